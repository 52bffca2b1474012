"""Unit 06: the Transformer (Vaswani et al., 2017), built from unit 05's parts.

    encoder layer   x = LN(x + SelfAttn(x, pad))               post-LN, as in the paper
                    x = LN(x + FF(x)),   FF(x) = W_2 relu(W_1 x + b_1) + b_2
    decoder layer   y = LN(y + SelfAttn(y, causal & pad_tgt))  masked: no peeking ahead
                    y = LN(y + CrossAttn(y, memory, pad_src))   queries y, keys/values memory
                    y = LN(y + FF(y))
    pre-LN          x = x + SubLayer(LN(x)) instead (`norm_first=True`), plus a final LN

Post-LN normalises after each residual sum, so the gradient that reaches the lower layers
passes through every LayerNorm on the way down; deep post-LN stacks need a learning-rate
warm-up to train at all. Pre-LN keeps an identity path from the loss to the embeddings, which
is why most later models (GPT-2 onwards) put the norm first.

The model: token embeddings times sqrt(d_model) plus the sinusoidal encoding, N encoder
layers, N decoder layers, a linear layer to the target vocabulary. Training is teacher
forcing: the whole target is read at once under the causal mask. Greedy decoding feeds the
argmax back; with the key/value cache each step projects the newest token only and keeps the
keys and values of the earlier ones, giving the same tokens as recomputing the whole prefix.

The attention is chosen by the config (unit 09's variants, `multihead.MultiHeadAttention`):
`n_kv_heads` key/value heads in the decoder's self- and cross-attention, the layers whose keys
and values the cache keeps (grouped-query attention, Ainslie et al. 2023, who leave the
encoder multi-head: its keys and values are computed once and never cached); a `window` or
linear attention's `feature_map` in every self-attention (the cross-attention reads the whole
source). Each layer builds its attention from them, so training, `forward` and cached
decoding compute the same variant.

Masks are bool, True = may attend (the course's convention, the OPPOSITE of the
`mask`/`key_padding_mask` arguments of `torch.nn.Transformer*`). Notation: B batch, S source
length, T target length, d_model width, d_ff feed-forward width, n_vocab vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils._checks import (
    require_bool,
    require_choice,
    require_float_tensor,
    require_heads,
    require_ids,
    require_int,
    require_number_in,
    require_positive_number,
    shape_str,
)
from course_utils.data.vocab import END_ID, PAD_ID, START_ID
from course_utils.multihead import MultiHeadAttention, check_variant, config_repr
from course_utils.positional import sinusoidal_encoding
from course_utils.sequence import greedy_decode, padded_cross_entropy

__all__ = ["DecoderLayer", "EncoderLayer", "FeedForward", "KVCache", "Transformer",
           "TransformerConfig", "causal_mask", "key_mask", "padding_mask",
           "padding_mask_from_ids"]

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


# ----------------------------------------------------------------------------- masks

def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal: position t may attend to 0 .. t, itself
    included, and to nothing after it."""
    require_int(T, "T")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T_q, T_k)


def padding_mask(lengths: torch.Tensor, T: int | None = None) -> torch.Tensor:
    """(B, T) bool, True at the real tokens 0 .. lengths[b] - 1 of each row, False at the
    padding after them. T defaults to the longest length."""
    require_ids(lengths, "lengths", "(B,)", 1)
    if lengths.numel() and int(lengths.min()) < 1:
        raise ValueError(f"every length must be at least 1; got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    T = longest if T is None else require_int(T, "T")
    if longest > T:
        raise ValueError(f"T = {T} is shorter than the longest length {longest}")
    return torch.arange(T, device=lengths.device) < lengths.unsqueeze(1)  # (B, T)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int = PAD_ID) -> torch.Tensor:
    """(B, T) bool, True where `ids` is not `pad_id`."""
    require_ids(ids, "ids", "(B, T)", 2)
    return ids != pad_id  # (B, T)


def key_mask(keep: torch.Tensor) -> torch.Tensor:
    """(B, T_k) padding mask -> (B, 1, 1, T_k): the same keys for every head and query."""
    return keep[:, None, None, :]


# ----------------------------------------------------------------------------- layers

class FeedForward(nn.Module):
    """The position-wise network, applied to every position on its own:
    (..., d_model) -> relu(x W_1^T + b_1) W_2^T + b_2 -> (..., d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        require_choice(activation, "activation", tuple(ACTIVATIONS))
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def _check_layer_sizes(d_model, n_heads, d_ff, dropout, norm_first):
    require_heads(d_model, n_heads)
    require_int(d_ff, "d_ff")
    require_number_in(dropout, "dropout", 0.0, 1.0, "a probability")
    require_bool(norm_first, "norm_first")


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each inside a residual connection with LayerNorm.

    forward(x (B, S, d_model), mask bool broadcastable to (B, n_heads, S, S), True = may
    attend, head_mask (n_heads,) 0 = head off) -> (x (B, S, d_model), weights (B, n_heads, S, S)).
    Dropout (off by default) acts on each sub-layer's output and inside the feed-forward
    network; unlike PyTorch's layer, none acts on the attention weights. `window` and
    `feature_map` choose the self-attention's variant (`multihead.MultiHeadAttention`).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", eps: float = 1e-5, *,
                 window: int | None = None, feature_map: Callable | None = None):
        super().__init__()
        _check_layer_sizes(d_model, n_heads, d_ff, dropout, norm_first)
        require_positive_number(eps, "eps")
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, window=window,
                                            feature_map=feature_map)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps), nn.LayerNorm(d_model, eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                head_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.norm_first:
            h = self.norm1(x)
            a, weights = self.self_attn(h, h, h, mask, head_mask)
            x = x + self.dropout(a)
            return x + self.dropout(self.ff(self.norm2(x))), weights
        a, weights = self.self_attn(x, x, x, mask, head_mask)
        x = self.norm1(x + self.dropout(a))
        return self.norm2(x + self.dropout(self.ff(x))), weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """The same layer with the weights of a `torch.nn.TransformerEncoderLayer`
        (batch_first=True, relu or gelu)."""
        return _from_torch(cls, layer, nn.TransformerEncoderLayer)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward; each
    inside a residual connection with LayerNorm.

    forward(y (B, T, d_model), memory (B, S, d_model), self_mask broadcastable to
    (B, n_heads, T, T), cross_mask broadcastable to (B, n_heads, T, S); True = may attend)
    -> (y (B, T, d_model), self weights (B, n_heads, T, T), cross weights (B, n_heads, T, S)).

    With a `cache` (one `KVCache` per layer), y holds only the newest positions: their keys
    and values are appended to the cache and the queries attend to everything cached;
    self_mask then covers (T_new, T_cached + T_new). `n_kv_heads` (both attentions), `window`
    and `feature_map` (the self-attention) choose the variant (`multihead.MultiHeadAttention`);
    the cached path attends with the same layers, so it computes the same variant.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0,
                 norm_first: bool = False, activation: str = "relu", *,
                 n_kv_heads: int | None = None, window: int | None = None,
                 feature_map: Callable | None = None):
        super().__init__()
        _check_layer_sizes(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, n_kv_heads=n_kv_heads,
                                            window=window, feature_map=feature_map)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, n_kv_heads=n_kv_heads)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, y: torch.Tensor, memory: torch.Tensor,
                self_mask: torch.Tensor | None = None, cross_mask: torch.Tensor | None = None,
                cache: KVCache | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        require_float_tensor(memory, "memory", "(B, S, d_model)", ndim=3)
        norm = self.norm1 if self.norm_first else nn.Identity()
        a, self_w = self._self_attention(norm(y), self_mask, cache)
        y = y + self.dropout(a) if self.norm_first else self.norm1(y + self.dropout(a))
        h = self.norm2(y) if self.norm_first else y
        a, cross_w = self._cross_attention(h, memory, cross_mask, cache)
        y = y + self.dropout(a) if self.norm_first else self.norm2(y + self.dropout(a))
        if self.norm_first:
            return y + self.dropout(self.ff(self.norm3(y))), self_w, cross_w
        return self.norm3(y + self.dropout(self.ff(y))), self_w, cross_w

    def _self_attention(self, h, mask, cache):
        if cache is None:
            return self.self_attn(h, h, h, mask)
        self.self_attn.check_inputs(h, h, h)
        k, v = self.self_attn.keys_values(h, h)  # (B, n_kv_heads, T_new, d_k)
        k, v = cache.append(k, v)  # (B, n_kv_heads, T_cached + T_new, d_k)
        return self.self_attn.attend(h, k, v, mask)  # the newest queries: the last T_new

    def _cross_attention(self, h, memory, mask, cache):
        if cache is None:
            return self.cross_attn(h, memory, memory, mask)
        if cache.memory_k is None:  # the encoder's output is fixed: project it once
            self.cross_attn.check_inputs(h, memory, memory)
            cache.memory_k, cache.memory_v = self.cross_attn.keys_values(memory, memory)
        return self.cross_attn.attend(h, cache.memory_k, cache.memory_v, mask)

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """The same layer with the weights of a `torch.nn.TransformerDecoderLayer`
        (batch_first=True, relu or gelu)."""
        return _from_torch(cls, layer, nn.TransformerDecoderLayer)


def _from_torch(cls, layer, torch_class):
    """A course layer `cls` with the weights of PyTorch's `layer` (a `torch_class`)."""
    if not isinstance(layer, torch_class):
        raise TypeError(f"expected a torch.nn.{torch_class.__name__}; got {type(layer).__name__}")
    if not layer.self_attn.batch_first:
        raise ValueError("only batch_first=True layers have a counterpart here")
    attn = layer.self_attn
    mine = cls(attn.embed_dim, attn.num_heads, layer.linear1.out_features, layer.dropout.p,
               layer.norm_first, _activation_name(layer.activation)).to(attn.in_proj_weight.dtype)
    mine.self_attn = MultiHeadAttention.from_torch(attn)
    if hasattr(layer, "multihead_attn"):  # the decoder's cross-attention
        mine.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
    norms = [name for name in ("norm1", "norm2", "norm3") if hasattr(mine, name)]
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(mine.ff, name).load_state_dict(getattr(layer, name).state_dict())
        for name in norms:
            getattr(mine, name).load_state_dict(getattr(layer, name).state_dict())
            getattr(mine, name).eps = getattr(layer, name).eps
    return mine


def _activation_name(activation) -> str:
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or isinstance(activation, nn.GELU):
        return "gelu"
    raise ValueError(f"only relu and gelu layers have a counterpart here; got {activation!r}")


@dataclass
class KVCache:
    """What one decoder layer keeps between steps of incremental decoding: the projected keys
    and values of every target position so far, (B, n_kv_heads, t, d_k) each, and those of the
    encoder's output, (B, n_kv_heads, S, d_k), computed at the first step (n_kv_heads =
    n_heads unless the config shares them). A window masks the old keys; they stay kept."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    memory_k: torch.Tensor | None = None
    memory_v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the newest positions' keys and values; return all of them."""
        if self.k is not None and (k.shape[:2] != self.k.shape[:2]
                                   or k.shape[-1] != self.k.shape[-1]):
            raise ValueError(f"new keys {shape_str(k.shape)} do not fit the cached "
                             f"{shape_str(self.k.shape)}: expected (B, n_kv_heads, T_new, d_k)")
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)  # (B, n_kv_heads, t, d_k)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)  # (B, n_kv_heads, t, d_k)
        return self.k, self.v


# ----------------------------------------------------------------------------- the model

@dataclass
class TransformerConfig:
    """Sizes and switches of the encoder-decoder Transformer (unit 06), and its attention's
    variant (unit 09; `multihead.MultiHeadAttention`): the fields after n_positions."""

    src_vocab_size: int  # n_vocab of the source
    tgt_vocab_size: int  # n_vocab of the target
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128  # width of the position-wise feed-forward network
    n_layers: int = 2  # encoder layers, and as many decoder layers
    dropout: float = 0.0
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN
    max_len: int = 40  # greedy decoding stops after this many steps at the latest
    n_positions: int = 128  # rows of the sinusoidal table: the longest source or target
    n_kv_heads: int | None = None  # the decoder's key/value heads (None: n_heads), cached
    window: int | None = None  # self-attention to keys at most window positions away
    feature_map: Callable | None = None  # linear attention phi(q) . phi(k) in self-attention

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "n_layers", "max_len",
                     "n_positions"):
            require_int(getattr(self, name), name)
        _check_layer_sizes(self.d_model, self.n_heads, self.d_ff, self.dropout,
                           self.norm_first)
        check_variant(self.n_heads, self.n_kv_heads, self.window, self.feature_map)
        if self.max_len + 1 > self.n_positions:
            raise ValueError(f"n_positions = {self.n_positions} must exceed max_len = "
                             f"{self.max_len}: decoding reads <start> and max_len tokens")

    def __repr__(self) -> str:
        return config_repr(self)  # the variant's fields only where one is chosen


class Transformer(nn.Module):
    """Encoder-decoder Transformer with the interface of `translator.Seq2Seq`: `forward`
    (teacher forcing), `loss`, `translate` (greedy decoding), so that `translator.train` and
    `translator.evaluate` work on it unchanged."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise ValueError(f"config must be a TransformerConfig; got {type(config).__name__}")
        self.config = config
        d = config.d_model
        layer = dict(d_model=d, n_heads=config.n_heads, d_ff=config.d_ff, dropout=config.dropout,
                     norm_first=config.norm_first, window=config.window,
                     feature_map=config.feature_map)
        self.src_embed = nn.Embedding(config.src_vocab_size, d)
        self.tgt_embed = nn.Embedding(config.tgt_vocab_size, d)
        for embedding in (self.src_embed, self.tgt_embed):
            # std d^-1/2, so that E x sqrt(d_model) has entries of size 1, like the positional
            # encoding; PyTorch's default std 1 would drown the positions by sqrt(d_model)
            nn.init.normal_(embedding.weight, std=d ** -0.5)
        self.register_buffer("positions", sinusoidal_encoding(config.n_positions, d),
                             persistent=False)  # (n_positions, d_model)
        self.encoder = nn.ModuleList(EncoderLayer(**layer) for _ in range(config.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(**layer, n_kv_heads=config.n_kv_heads)
                                     for _ in range(config.n_layers))
        # pre-LN leaves the residual stream unnormalised: one LayerNorm closes each stack
        final = nn.LayerNorm if config.norm_first else nn.Identity
        self.encoder_norm, self.decoder_norm = final(d), final(d)
        self.out = nn.Linear(d, config.tgt_vocab_size)
        self.dropout = nn.Dropout(config.dropout)

    def _embed(self, embedding: nn.Embedding, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """ids (B, T) -> E ids sqrt(d_model) + PE[start : start + T]: (B, T, d_model)."""
        end = start + ids.shape[1]
        if end > self.config.n_positions:
            raise ValueError(f"a sequence of {end} tokens is longer than n_positions = "
                             f"{self.config.n_positions}")
        x = embedding(ids) * math.sqrt(self.config.d_model)  # (B, T, d_model)
        return self.dropout(x + self.positions[start:end])  # (T, d_model) broadcast over B

    def encode(self, src: torch.Tensor, lengths: torch.Tensor, return_weights: bool = False):
        """src (B, S), lengths (B,) -> (memory (B, S, d_model), source mask (B, 1, 1, S));
        with `return_weights`, also the list of each layer's weights (B, n_heads, S, S)."""
        require_ids(src, "src", "(B, S)", 2)
        if lengths.shape != src.shape[:1]:
            raise ValueError(f"lengths must have shape ({src.shape[0]},), one per source; "
                             f"got {shape_str(lengths.shape)}")
        src_mask = key_mask(padding_mask(lengths, src.shape[1]))  # (B, 1, 1, S)
        x, weights = self._embed(self.src_embed, src), []  # (B, S, d_model)
        for layer in self.encoder:
            x, w = layer(x, src_mask)
            weights.append(w)
        memory = self.encoder_norm(x)
        return (memory, src_mask, weights) if return_weights else (memory, src_mask)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
               return_weights: bool = False):
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. read at once under the causal mask
        -> logits (B, T, n_vocab); with `return_weights`, also {"self": [(B, n_heads, T, T)...],
        "cross": [(B, n_heads, T, S)...]}, one entry per layer."""
        require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        T = tgt_in.shape[1]
        # (B, 1, 1, T) & (T, T) -> (B, 1, T, T): earlier real tokens only
        self_mask = key_mask(padding_mask_from_ids(tgt_in)) & causal_mask(T, tgt_in.device)
        y = self._embed(self.tgt_embed, tgt_in)  # (B, T, d_model)
        weights = {"self": [], "cross": []}
        for layer in self.decoder:
            y, self_w, cross_w = layer(y, memory, self_mask, src_mask)
            weights["self"].append(self_w)
            weights["cross"].append(cross_w)
        logits = self.out(self.decoder_norm(y))  # (B, T, n_vocab)
        return (logits, weights) if return_weights else logits

    def forward(self, src, lengths, tgt_in) -> torch.Tensor:
        """src (B, S), lengths (B,), tgt_in (B, T) -> logits (B, T, n_vocab)."""
        memory, src_mask = self.encode(src, lengths)
        return self.decode(tgt_in, memory, src_mask)

    def loss(self, src, lengths, tgt) -> torch.Tensor:
        """tgt (B, T + 1) = <start> y_1 .. y_n <end> <pad>..: read tgt[:, :-1], predict
        tgt[:, 1:], padded cross-entropy (a scalar)."""
        return padded_cross_entropy(self(src, lengths, tgt[:, :-1]), tgt[:, 1:])

    def step(self, y_prev: torch.Tensor, state: dict) -> tuple[torch.Tensor, dict]:
        """One step of greedy decoding. state = {"memory", "src_mask", "cache" (a KVCache per
        layer, or None to recompute), "prefix" (B, t) the tokens read so far}.
        y_prev (B,) -> (logits (B, n_vocab), the new state)."""
        prefix = torch.cat([state["prefix"], y_prev[:, None]], dim=1)  # (B, t + 1)
        memory, src_mask, cache = state["memory"], state["src_mask"], state["cache"]
        if cache is None:  # recompute every position, keep the last one's logits
            logits = self.decode(prefix, memory, src_mask)[:, -1]  # (B, n_vocab)
        else:  # the newest token only; the earlier ones' keys and values are in the cache
            y = self._embed(self.tgt_embed, y_prev[:, None], start=prefix.shape[1] - 1)
            self_mask = key_mask(padding_mask_from_ids(prefix))  # (B, 1, 1, t + 1)
            for layer, layer_cache in zip(self.decoder, cache, strict=True):
                y, _, _ = layer(y, memory, self_mask, src_mask, cache=layer_cache)
            logits = self.out(self.decoder_norm(y))[:, 0]  # (B, 1, n_vocab) -> (B, n_vocab)
        return logits, {**state, "prefix": prefix}

    @torch.no_grad()
    def translate(self, src, lengths, max_len: int | None = None, use_cache: bool = True,
                  start_id: int = START_ID, end_id: int = END_ID) -> torch.Tensor:
        """Greedy decoding of a batch until <end> (each row on its own) or max_len steps:
        ids (B, T_out), <pad> after each row's <end>. `use_cache=False` recomputes the whole
        prefix at every step; both give the same tokens."""
        require_bool(use_cache, "use_cache")
        memory, src_mask = self.encode(src, lengths)
        batch = src.shape[0]
        state = {"memory": memory, "src_mask": src_mask,
                 "cache": [KVCache() for _ in self.decoder] if use_cache else None,
                 "prefix": torch.empty(batch, 0, dtype=torch.long, device=src.device)}
        return greedy_decode(self.step, state, batch, start_id=start_id, end_id=end_id,
                             max_len=self.config.max_len if max_len is None else max_len)

