"""Unit 09: multi-query and grouped-query attention, and what the key/value cache costs.

Generating a token reads the cached keys and values of every earlier token, in every layer:

    cache bytes per token = 2 (keys and values) L n_kv_heads d_k (bytes per element)

Multi-head attention has one key/value head per query head (n_kv_heads = n_heads).
Multi-query attention (Shazeer 2019, arXiv:1911.02150) keeps one (n_kv_heads = 1) that every
query head shares; grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245) keeps
n_kv_heads of them, each shared by a group of n_heads / n_kv_heads query heads. The cache
shrinks by n_heads / n_kv_heads; the queries keep all n_heads heads.

    Q = X W^Q             (B, T_q, d_model)          -> (B, n_heads, T_q, d_k)
    K = X W^K, V = X W^V  (B, T_k, n_kv_heads d_k)   -> (B, n_kv_heads, T_k, d_k)
    head r = softmax(Q_r K_g^T / sqrt(d_k)) V_g,   g = r // (n_heads / n_kv_heads)

Query head r uses key/value head r // group, group = n_heads / n_kv_heads: the groups are
blocks of neighbouring heads (heads 0 .. group - 1 share key/value head 0), as Llama's
`repeat_kv` orders them; `multihead.repeat_kv` does the same. The layer is
`multihead.MultiHeadAttention(d_model, n_heads, n_kv_heads=...)`, with narrower W^K and W^V:
its `keys_values` gives n_kv_heads heads (that is what a cache keeps) and its `attend` repeats
them to n_heads when it attends, so unit 06's `DecoderLayer` and `KVCache` hold the shared
heads alone.

Ainslie et al. turn a trained multi-head model into a grouped one by averaging the key and
value projections of each group's heads (`from_multihead`), and apply it to the decoder's
self- and cross-attention of their encoder-decoder (T5), not to the encoder, whose keys and
values are computed once in parallel and never cached; unit 06's Transformer does the same
when its config says `TransformerConfig(..., n_kv_heads=...)`.
"""

from __future__ import annotations

import torch

from course_utils._checks import require_choice, require_ids, require_int, require_kv_heads
from course_utils.attention_cost import element_bytes
from course_utils.data.vocab import START_ID
from course_utils.multihead import MultiHeadAttention
from course_utils.transformer import KVCache, Transformer

__all__ = ["LLAMA_2_7B", "MISTRAL_7B", "cache_bytes", "fill_caches", "from_multihead",
           "kv_cache_bytes_per_token"]

# Published sizes (fp16 weights and cache): Llama 2 7B (Touvron et al. 2023, arXiv:2307.09288)
# has multi-head attention; Mistral 7B (Jiang et al. 2023, arXiv:2310.06825) the same layers,
# heads and width with 8 key/value heads (grouped-query).
LLAMA_2_7B = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "d_k": 128,
              "dtype": torch.float16}
MISTRAL_7B = {**LLAMA_2_7B, "n_kv_heads": 8}


def from_multihead(mha: MultiHeadAttention, n_kv_heads: int, pool: str = "mean"
                   ) -> MultiHeadAttention:
    """A grouped-query layer made from a multi-head one: W^Q and W^O copied; the W^K and W^V
    slices of the heads of each group averaged into one (`pool="mean"`, Ainslie et al.'s
    conversion of a trained model), or the group's first head kept (`pool="first"`: what a
    grouped layer is drawn as). n_kv_heads = n_heads copies every weight: the same layer.
    The variant's other fields (window, causal, feature_map) are kept."""
    if not isinstance(mha, MultiHeadAttention):
        raise ValueError(f"mha must be a multihead.MultiHeadAttention; got {type(mha).__name__}")
    if mha.group != 1:
        raise ValueError(f"mha must be multi-head (a key/value head per head); it shares "
                         f"n_kv_heads = {mha.n_kv_heads} among n_heads = {mha.n_heads}")
    group = require_kv_heads(mha.n_heads, n_kv_heads)
    require_choice(pool, "pool", ("mean", "first"))
    bias = mha.w_q.bias is not None
    grouped = MultiHeadAttention(mha.d_model, mha.n_heads, bias=bias, n_kv_heads=n_kv_heads,
                                 window=mha.window, causal=mha.causal,
                                 feature_map=mha.feature_map).to(mha.w_q.weight.dtype)

    def pooled(x):  # (n_heads d_k, ...) -> (n_kv_heads d_k, ...), grouped by blocks
        x = x.reshape(n_kv_heads, group, mha.d_k, *x.shape[1:])  # (n_kv_heads, group, d_k, ...)
        return (x.mean(1) if pool == "mean" else x[:, 0]).flatten(0, 1)

    with torch.no_grad():
        for name in ("w_q", "w_o"):
            getattr(grouped, name).load_state_dict(getattr(mha, name).state_dict())
        for name in ("w_k", "w_v"):
            theirs, mine = getattr(mha, name), getattr(grouped, name)
            mine.weight.copy_(pooled(theirs.weight))
            if bias:
                mine.bias.copy_(pooled(theirs.bias))
    return grouped


def kv_cache_bytes_per_token(n_layers: int, n_kv_heads: int, d_k: int,
                             dtype: torch.dtype = torch.float16, n_heads: int | None = None
                             ) -> int:
    """The key/value cache's bytes per token of a decoder's self-attention:

        2 L n_kv_heads d_k (bytes per element)      (keys and values, L layers)

    n_heads, if given, is only checked (n_kv_heads must divide it), so that a config dict
    such as `LLAMA_2_7B` can be passed whole: kv_cache_bytes_per_token(**LLAMA_2_7B) =
    2 32 32 128 2 = 524,288 bytes = 0.5 MiB."""
    require_int(n_layers, "n_layers")
    require_int(d_k, "d_k")
    if n_heads is not None:
        require_kv_heads(n_heads, n_kv_heads)
    require_int(n_kv_heads, "n_kv_heads")
    return 2 * n_layers * n_kv_heads * d_k * element_bytes(dtype)


def cache_bytes(caches: list[KVCache]) -> dict[str, int]:
    """The bytes a list of `KVCache` (one per decoder layer) holds: {"self": the target
    positions' keys and values, "cross": the encoder output's}."""
    if not isinstance(caches, list | tuple) or not all(isinstance(c, KVCache) for c in caches):
        raise ValueError("caches must be a list of transformer.KVCache, one per decoder layer")

    def size(*tensors):
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    return {"self": sum(size(c.k, c.v) for c in caches),
            "cross": sum(size(c.memory_k, c.memory_v) for c in caches)}


@torch.no_grad()
def fill_caches(model: Transformer, src: torch.Tensor, lengths: torch.Tensor, n_tokens: int
                ) -> list[KVCache]:
    """Decode `n_tokens` greedy steps of `model` with the cache (every row continues, <end>
    or not) and return the caches, one per decoder layer: after them each holds keys and
    values (B, n_kv_heads, n_tokens, d_k) and the encoder's (B, n_kv_heads, S, d_k)."""
    if not isinstance(model, Transformer):
        raise ValueError(f"model must be a transformer.Transformer; got {type(model).__name__}")
    require_ids(src, "src", "(B, S)", 2)
    n_tokens = require_int(n_tokens, "n_tokens")
    memory, src_mask = model.encode(src, lengths)
    caches = [KVCache() for _ in model.decoder]
    state = {"memory": memory, "src_mask": src_mask, "cache": caches,
             "prefix": torch.empty(src.shape[0], 0, dtype=torch.long, device=src.device)}
    y = torch.full((src.shape[0],), START_ID, dtype=torch.long, device=src.device)  # (B,)
    for _ in range(n_tokens):
        logits, state = model.step(y, state)  # (B, n_vocab)
        y = logits.argmax(dim=-1)  # (B,)
    return caches
