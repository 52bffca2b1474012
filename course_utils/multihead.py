"""Unit 05: multi-head attention (Vaswani et al., 2017), with its weights in plain sight.

    Q = X_q W^Q,  K = X_kv W^K,  V = X_kv W^V                    (B, T, d_model)
    split into n_heads heads of d_k = d_model / n_heads          (B, n_heads, T, d_k)
    head_h = softmax(Q_h K_h^T / sqrt(d_k), mask) V_h            (B, n_heads, T_q, d_k)
    output = merge(head_1 ... head_h) W^O                        (B, T_q, d_model)

Self-attention is `mha(x, x, x)`; cross-attention `mha(decoder_states, encoder_states,
encoder_states)`, where T_q and T_k differ.

Masks follow the course's convention, as in `F.scaled_dot_product_attention`: a bool tensor,
**True = may attend**, broadcastable to (B, n_heads, T_q, T_k): (T_q, T_k) for a causal mask,
(B, 1, 1, T_k) for padding. `torch.nn.MultiheadAttention` uses the OPPOSITE convention: its
`attn_mask` and `key_padding_mask` are True where a query may NOT attend. Pass `~mask` there.

`head_mask` (n_heads,) multiplies each head's weights: 0 switches a head off, 1 keeps it
(unit 08 switches heads off one at a time to see which ones a model can do without).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from course_utils._checks import (
    require_finite,
    require_float_tensor,
    require_heads,
    require_mask,
    shape_str,
)
from course_utils.attention import attention_unchecked

__all__ = ["MultiHeadAttention", "merge_heads", "split_heads"]


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, d_model) -> (B, n_heads, T, d_k): head h holds features h d_k ... (h + 1) d_k - 1
    of every position. A reshape alone, without the transpose, would mix positions."""
    require_float_tensor(x, "x", "(B, T, d_model)", ndim=3)
    batch, length, d_model = x.shape
    require_heads(d_model, n_heads)
    # (B, T, d_model) -> (B, T, n_heads, d_k) -> (B, n_heads, T, d_k)
    return x.reshape(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, n_heads, T, d_k) -> (B, T, n_heads d_k): the inverse of `split_heads`."""
    require_float_tensor(x, "x", "(B, n_heads, T, d_k)", ndim=4)
    batch, n_heads, length, d_k = x.shape
    # (B, n_heads, T, d_k) -> (B, T, n_heads, d_k) -> (B, T, d_model)
    return x.transpose(1, 2).reshape(batch, length, n_heads * d_k)


class MultiHeadAttention(nn.Module):
    """n_heads scaled dot-product attentions side by side, each on its own d_k-wide slice
    of learned projections of the queries, keys and values; W^O mixes what they found.

    forward(query (B, T_q, d_model), key (B, T_k, d_model), value (B, T_k, d_model),
    mask bool broadcastable to (B, n_heads, T_q, T_k), True = may attend, head_mask
    (n_heads,) float, 0 = head switched off) -> (output (B, T_q, d_model), weights
    (B, n_heads, T_q, T_k), times head_mask when one is given).
    A query whose every key is masked gets zero weights and the output bias alone.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        d_k = require_heads(d_model, n_heads)
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_k
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # W^Q, all heads side by side
        self.w_k = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.w_v = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_inputs(query, key, value)
        k, v = self.keys_values(key, value)  # (B, n_heads, T_k, d_k) each
        return self.attend(query, k, v, mask, head_mask)

    def keys_values(self, key: torch.Tensor, value: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The projected keys and values, split into heads: (B, n_heads, T_k, d_k) each.
        Computed once, they can be kept (a decoder's key/value cache) and passed to `attend`."""
        k = split_heads(self.w_k(key), self.n_heads)  # (B, n_heads, T_k, d_k)
        v = split_heads(self.w_v(value), self.n_heads)  # (B, n_heads, T_k, d_k)
        return k, v

    def attend(self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T_q, d_model) against projected keys and values from `keys_values`,
        (B, n_heads, T_k, d_k) -> (output (B, T_q, d_model), weights (B, n_heads, T_q, T_k))."""
        require_finite(query, "query")
        if mask is not None:
            shape = (query.shape[0], self.n_heads, query.shape[1], k.shape[-2])
            require_mask(mask, "mask", shape, broadcast=True)
        q = split_heads(self.w_q(query), self.n_heads)  # (B, n_heads, T_q, d_k)
        if head_mask is None:
            # heads (B, n_heads, T_q, d_k), weights (B, n_heads, T_q, T_k)
            heads, weights = attention_unchecked(q, k, v, mask)
        else:
            require_float_tensor(head_mask, "head_mask", f"({self.n_heads},)", ndim=1)
            if head_mask.shape != (self.n_heads,):
                raise ValueError(f"head_mask must have shape (n_heads,) = ({self.n_heads},); "
                                 f"got {shape_str(head_mask.shape)}")
            require_finite(head_mask, "head_mask")
            _, weights = attention_unchecked(q, k, v, mask)
            weights = weights * head_mask[:, None, None]  # (B, n_heads, T_q, T_k)
            heads = weights @ v  # (B, n_heads, T_q, d_k)
        return self.w_o(merge_heads(heads)), weights  # (B, T_q, d_model)

    def check_inputs(self, query, key, value) -> None:
        """ValueError unless query (B, T_q, d_model), key and value (B, T_k, d_model) are float
        tensors of this layer's width with one batch size and one dtype, as many values as
        keys, and finite keys and values (the layers of unit 06 check their inputs here once,
        then attend without checking again)."""
        for x, name, rows in ((query, "query", "T_q"), (key, "key", "T_k"),
                              (value, "value", "T_k")):
            require_float_tensor(x, name, f"(B, {rows}, {self.d_model})", ndim=3)
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} must have shape (B, {rows}, d_model = {self.d_model}); "
                                 f"got {shape_str(x.shape)}")
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(f"query, key and value must have the same batch size B; got "
                             f"{shape_str(query.shape)}, {shape_str(key.shape)}, "
                             f"{shape_str(value.shape)}")
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"every key needs a value: key {shape_str(key.shape)} and value "
                             f"{shape_str(value.shape)} must have the same length T_k")
        if not query.dtype == key.dtype == value.dtype:
            raise ValueError(f"query, key and value must have one dtype; got {query.dtype}, "
                             f"{key.dtype} and {value.dtype}")
        if key is not query:
            require_finite(key, "key")
        if value is not key:
            require_finite(value, "value")

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """The same attention, with the weights of a `torch.nn.MultiheadAttention` copied
        (it must be batch_first, with the default key/value widths and no bias_k/bias_v)."""
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention; got {type(m).__name__}")
        if not m.batch_first or not m._qkv_same_embed_dim or m.bias_k is not None \
                or m.add_zero_attn:
            raise ValueError("only batch_first=True, kdim = vdim = embed_dim, no add_bias_kv "
                             "and no add_zero_attn have a counterpart here")
        bias = m.in_proj_bias is not None
        mine = cls(m.embed_dim, m.num_heads, bias=bias).to(m.in_proj_weight.dtype)
        with torch.no_grad():
            for layer, weight in zip((mine.w_q, mine.w_k, mine.w_v),
                                     m.in_proj_weight.chunk(3), strict=True):
                layer.weight.copy_(weight)  # in_proj_weight is [W^Q; W^K; W^V]: (3 d, d)
            mine.w_o.weight.copy_(m.out_proj.weight)
            if bias:
                for layer, b in zip((mine.w_q, mine.w_k, mine.w_v), m.in_proj_bias.chunk(3),
                                    strict=True):
                    layer.bias.copy_(b)
                mine.w_o.bias.copy_(m.out_proj.bias)
        return mine

    def to_torch(self) -> nn.MultiheadAttention:
        """A `torch.nn.MultiheadAttention(batch_first=True)` with these weights. Remember to
        pass it masks inverted: its True means may NOT attend."""
        bias = self.w_q.bias is not None
        m = nn.MultiheadAttention(self.d_model, self.n_heads, bias=bias, batch_first=True,
                                  dtype=self.w_q.weight.dtype)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.cat([self.w_q.weight, self.w_k.weight,
                                              self.w_v.weight]))  # (3 d_model, d_model)
            m.out_proj.weight.copy_(self.w_o.weight)
            if bias:
                m.in_proj_bias.copy_(torch.cat([self.w_q.bias, self.w_k.bias, self.w_v.bias]))
                m.out_proj.bias.copy_(self.w_o.bias)
        return m
