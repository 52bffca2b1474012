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
`repeat_kv` orders them; `repeat_kv` here does the same. `GroupedQueryAttention` is
`multihead.MultiHeadAttention` with narrower W^K and W^V: its `keys_values` gives n_kv_heads
heads (that is what a cache keeps) and its `attend` repeats them to n_heads when it attends,
so unit 06's `DecoderLayer` and `KVCache` work with it unchanged.

Ainslie et al. turn a trained multi-head model into a grouped one by averaging the key and
value projections of each group's heads (`GroupedQueryAttention.from_multihead`), and apply
it to the decoder's self- and cross-attention of their encoder-decoder (T5), not to the
encoder, whose keys and values are computed once in parallel and never cached;
`grouped_query_transformer` does the same to unit 06's Transformer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from course_utils._checks import (
    require_bool,
    require_choice,
    require_float_tensor,
    require_ids,
    require_int,
    require_kv_heads,
    shape_str,
)
from course_utils.attention_cost import element_bytes
from course_utils.data.vocab import START_ID
from course_utils.multihead import MultiHeadAttention, split_heads
from course_utils.transformer import KVCache, Transformer, TransformerConfig

__all__ = ["LLAMA_2_7B", "MISTRAL_7B", "GroupedQueryAttention", "cache_bytes",
           "fill_caches", "grouped_query_transformer", "kv_cache_bytes_per_token",
           "repeat_kv"]

# Published sizes (fp16 weights and cache): Llama 2 7B (Touvron et al. 2023, arXiv:2307.09288)
# has multi-head attention; Mistral 7B (Jiang et al. 2023, arXiv:2310.06825) the same layers,
# heads and width with 8 key/value heads (grouped-query).
LLAMA_2_7B = {"n_layers": 32, "n_heads": 32, "n_kv_heads": 32, "d_k": 128,
              "dtype": torch.float16}
MISTRAL_7B = {**LLAMA_2_7B, "n_kv_heads": 8}


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """(B, n_kv_heads, T, d_k) -> (B, n_kv_heads group, T, d_k), each head repeated `group`
    times in a block: output head r is input head r // group (Llama's order; the interleaved
    order r % n_kv_heads would pair query heads with the wrong keys)."""
    require_float_tensor(x, "x", "(B, n_kv_heads, T, d_k)", ndim=4)
    group = require_int(group, "group")
    batch, n_kv_heads, length, d_k = x.shape
    # (B, n_kv_heads, T, d_k) -> (B, n_kv_heads, group, T, d_k) -> (B, n_heads, T, d_k)
    x = x[:, :, None].expand(batch, n_kv_heads, group, length, d_k)
    return x.reshape(batch, n_kv_heads * group, length, d_k)


class GroupedQueryAttention(MultiHeadAttention):
    """Multi-head attention whose n_heads query heads share n_kv_heads key/value heads.

    forward(query (B, T_q, d_model), key (B, T_k, d_model), value (B, T_k, d_model), mask
    broadcastable to (B, n_heads, T_q, T_k), True = may attend) -> (output (B, T_q, d_model),
    weights (B, n_heads, T_q, T_k)), as `MultiHeadAttention`. `keys_values` gives
    (B, n_kv_heads, T_k, d_k) each: what a cache holds. n_kv_heads = n_heads is multi-head
    attention, 1 multi-query attention.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = True):
        super().__init__(d_model, n_heads, bias=bias)
        self.group = require_kv_heads(n_heads, n_kv_heads)
        self.n_kv_heads = n_kv_heads
        if n_kv_heads != n_heads:  # W^K, W^V: (n_kv_heads d_k, d_model)
            self.w_k = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)
            self.w_v = nn.Linear(d_model, n_kv_heads * self.d_k, bias=bias)

    def keys_values(self, key: torch.Tensor, value: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The projected keys and values, (B, n_kv_heads, T_k, d_k) each."""
        k = split_heads(self.w_k(key), self.n_kv_heads)  # (B, n_kv_heads, T_k, d_k)
        v = split_heads(self.w_v(value), self.n_kv_heads)  # (B, n_kv_heads, T_k, d_k)
        return k, v

    def attend(self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T_q, d_model) against keys and values from `keys_values`,
        (B, n_kv_heads, T_k, d_k): each repeated to the n_heads query heads, then attended as
        in `MultiHeadAttention.attend`."""
        for x, name in ((k, "k"), (v, "v")):
            require_float_tensor(x, name, f"(B, n_kv_heads = {self.n_kv_heads}, T_k, d_k)",
                                 ndim=4)
            if x.shape[1] != self.n_kv_heads or x.shape[-1] != self.d_k:
                raise ValueError(f"{name} must have shape (B, n_kv_heads = {self.n_kv_heads}, "
                                 f"T_k, d_k = {self.d_k}); got {shape_str(x.shape)}")
        k = repeat_kv(k, self.group)  # (B, n_heads, T_k, d_k)
        v = repeat_kv(v, self.group)  # (B, n_heads, T_k, d_k)
        return super().attend(query, k, v, mask, head_mask)

    @classmethod
    def from_multihead(cls, mha: MultiHeadAttention, n_kv_heads: int, pool: str = "mean"
                       ) -> GroupedQueryAttention:
        """A grouped-query layer made from a multi-head one: W^Q and W^O copied; the W^K and
        W^V slices of the heads of each group averaged into one (`pool="mean"`, Ainslie et
        al.'s conversion of a trained model), or the group's first head kept (`pool="first"`:
        for an untrained layer, whose weights averaging would shrink). n_kv_heads = n_heads
        copies every weight: the same layer."""
        if not isinstance(mha, MultiHeadAttention) or isinstance(mha, GroupedQueryAttention):
            raise ValueError(f"mha must be a multihead.MultiHeadAttention; got "
                             f"{type(mha).__name__}")
        require_choice(pool, "pool", ("mean", "first"))
        bias = mha.w_q.bias is not None
        gqa = cls(mha.d_model, mha.n_heads, n_kv_heads, bias=bias).to(mha.w_q.weight.dtype)
        shape = (n_kv_heads, gqa.group, mha.d_k)  # the rows of W^K, (n_heads d_k, d_model)

        def pooled(x):  # (n_heads d_k, ...) -> (n_kv_heads d_k, ...), grouped by blocks
            x = x.reshape(*shape, *x.shape[1:])  # (n_kv_heads, group, d_k, ...)
            return (x.mean(1) if pool == "mean" else x[:, 0]).flatten(0, 1)

        with torch.no_grad():
            for name in ("w_q", "w_o"):
                getattr(gqa, name).load_state_dict(getattr(mha, name).state_dict())
            for name in ("w_k", "w_v"):
                theirs, mine = getattr(mha, name), getattr(gqa, name)
                mine.weight.copy_(pooled(theirs.weight))
                if bias:
                    mine.bias.copy_(pooled(theirs.bias))
        return gqa


def grouped_query_transformer(config: TransformerConfig, n_kv_heads: int,
                              encoder: bool = False) -> Transformer:
    """Unit 06's Transformer with grouped-query attention in the decoder (its self- and its
    cross-attention, both cached when decoding), and in the encoder too with `encoder=True`.
    Everything else as `Transformer(config)`: training (`translator.train`), evaluation and
    `translate`, with the cache or without, work unchanged.

    The weights are those `Transformer(config)` draws, each grouped layer keeping the first
    head of each group's W^K and W^V (`from_multihead(..., pool="first")`): after the same
    seed, n_kv_heads = n_heads gives the very same model, and fewer key/value heads differ
    from it in the heads they drop alone."""
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig; got {type(config).__name__}")
    require_kv_heads(config.n_heads, n_kv_heads)
    require_bool(encoder, "encoder")
    model = Transformer(config)
    layers = [*model.decoder, *(model.encoder if encoder else [])]
    for layer in layers:
        for name in ("self_attn", "cross_attn"):
            if hasattr(layer, name):
                grouped = GroupedQueryAttention.from_multihead(getattr(layer, name), n_kv_heads,
                                                               pool="first")
                setattr(layer, name, grouped)
    return model


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
