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

Unit 09's variants are chosen when the layer is built, and a model's config passes its fields
here (`transformer.TransformerConfig`, `pointer_model.PointerConfig`: VARIANT_FIELDS, checked
by `check_variant` and printed by `config_repr` only where one is chosen):

    n_kv_heads    key/value heads, each shared by a group of n_heads / n_kv_heads neighbouring
                  query heads (None: n_heads, multi-head; 1: multi-query; grouped-query
                  between): W^K and W^V have n_kv_heads d_k rows, `keys_values` gives
                  (B, n_kv_heads, T_k, d_k), what a cache keeps, and `attend` repeats each
                  head to its group (`repeat_kv`) when it attends
    window        None: every key; w: query t attends to keys u with |t - u| <= w
                  (`long_inputs.sliding_window_mask`)
    causal        True: and to no key after it, u <= t
    feature_map   None: softmax(q . k / sqrt(d_k)); phi: linear attention, the products
                  phi(q) . phi(k) normalised (`long_inputs.linear_attention`), no scale

The window and causal=True read the T_q queries as the last T_q of the T_k positions: in
self-attention T_q = T_k, and a decoder's cached step (one new query against every key so
far, passed to `attend`) gets the band of the whole sequence's last row. They live in the
layer, so `forward` and `attend` (the cached path) apply them alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
import torch.nn as nn

from course_utils._checks import (
    require_bool,
    require_finite,
    require_float_tensor,
    require_heads,
    require_int,
    require_kv_heads,
    require_mask,
    shape_str,
)
from course_utils.attention import attention_unchecked
from course_utils.long_inputs import (
    linear_attention,
    linear_attention_weights,
    sliding_window_mask,
)

__all__ = ["VARIANT_FIELDS", "MultiHeadAttention", "check_variant", "config_repr", "merge_heads",
           "repeat_kv", "split_heads"]

VARIANT_FIELDS = ("n_kv_heads", "window", "feature_map")  # what a model's config passes on


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


def check_variant(n_heads: int, n_kv_heads: int | None = None, window: int | None = None,
                  feature_map: Callable | None = None) -> None:
    """ValueError unless n_kv_heads (None or a divisor of n_heads), window (None or an int
    >= 0) and feature_map (None or a function of a tensor) make an attention: a window masks
    softmax scores, so it is not taken with a feature map."""
    if n_kv_heads is not None:
        require_kv_heads(n_heads, n_kv_heads)
    if window is not None:
        require_int(window, "window", low=0)
    if feature_map is not None and not callable(feature_map):
        raise ValueError(f"feature_map must be None (softmax attention) or a function of a "
                         f"tensor, such as long_inputs.elu_feature_map; got "
                         f"{type(feature_map).__name__}")
    if window is not None and feature_map is not None:
        raise ValueError(f"a window masks softmax scores; linear attention (feature_map) takes "
                         f"none: got window={window!r} and feature_map={feature_map!r}")


def config_repr(config) -> str:
    """A model config's repr, as its dataclass writes it but with the variant's fields
    (VARIANT_FIELDS) only where one is chosen: a config of plain multi-head attention prints
    as it did before unit 09."""
    shown = [f"{f.name}={getattr(config, f.name)!r}" for f in dataclasses.fields(config)
             if f.name not in VARIANT_FIELDS or getattr(config, f.name) is not None]
    return f"{type(config).__name__}({', '.join(shown)})"


class MultiHeadAttention(nn.Module):
    """n_heads scaled dot-product attentions side by side, each on its own d_k-wide slice
    of learned projections of the queries, keys and values; W^O mixes what they found.

    forward(query (B, T_q, d_model), key (B, T_k, d_model), value (B, T_k, d_model),
    mask bool broadcastable to (B, n_heads, T_q, T_k), True = may attend, head_mask
    (n_heads,) float, 0 = head switched off) -> (output (B, T_q, d_model), weights
    (B, n_heads, T_q, T_k), times head_mask when one is given).
    A query whose every key is masked gets zero weights and the output bias alone.

    n_kv_heads, window, causal and feature_map choose unit 09's variant (the module's
    docstring). Fewer key/value heads start from the weights multi-head attention draws, each
    group keeping the rows of its first head: after one seed, a model differs from its
    multi-head twin in the key/value heads it drops alone. Linear attention's weights are its
    quadratic form; without a mask or head_mask its output comes from the O(T) form and the
    weights, computed without gradient, are only to be looked at.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, *,
                 n_kv_heads: int | None = None, window: int | None = None,
                 causal: bool = False, feature_map: Callable | None = None):
        super().__init__()
        d_k = require_heads(d_model, n_heads)
        check_variant(n_heads, n_kv_heads, window, feature_map)
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_k
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.group = n_heads // self.n_kv_heads  # query heads per key/value head
        self.window, self.causal = window, require_bool(causal, "causal")
        self.feature_map = feature_map
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # W^Q, all heads side by side
        self.w_k = nn.Linear(d_model, d_model, bias=bias)  # W^K
        self.w_v = nn.Linear(d_model, d_model, bias=bias)  # W^V
        self.w_o = nn.Linear(d_model, d_model, bias=bias)  # W^O
        if self.group > 1:  # W^K, W^V: (n_kv_heads d_k, d_model)
            for projection in (self.w_k, self.w_v):
                self._keep_first_head_of_each_group(projection)

    def _keep_first_head_of_each_group(self, projection: nn.Linear) -> None:
        """Narrow a projection drawn as multi-head attention's, (n_heads d_k, d_model), to the
        rows of the first head of each group, (n_kv_heads d_k, d_model), in place."""
        def first(x):  # (n_heads d_k, ...) -> (n_kv_heads d_k, ...)
            x = x.detach().reshape(self.n_kv_heads, self.group, self.d_k, *x.shape[1:])
            return nn.Parameter(x[:, 0].flatten(0, 1).clone())

        projection.weight = first(projection.weight)
        if projection.bias is not None:
            projection.bias = first(projection.bias)
        projection.out_features = self.n_kv_heads * self.d_k

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        self.check_inputs(query, key, value)
        k, v = self.keys_values(key, value)  # (B, n_kv_heads, T_k, d_k) each
        return self.attend(query, k, v, mask, head_mask)

    def keys_values(self, key: torch.Tensor, value: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The projected keys and values, split into heads: (B, n_kv_heads, T_k, d_k) each
        (n_kv_heads = n_heads unless the layer shares them). Computed once, they can be kept
        (a decoder's key/value cache) and passed to `attend`."""
        k = split_heads(self.w_k(key), self.n_kv_heads)  # (B, n_kv_heads, T_k, d_k)
        v = split_heads(self.w_v(value), self.n_kv_heads)  # (B, n_kv_heads, T_k, d_k)
        return k, v

    def attend(self, query: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None, head_mask: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """query (B, T_q, d_model) against projected keys and values from `keys_values`,
        (B, n_kv_heads, T_k, d_k) -> (output (B, T_q, d_model), weights (B, n_heads, T_q, T_k)).
        The layer's window and causal=True are applied here, with the queries at the last T_q
        of the T_k positions, on top of `mask`."""
        require_finite(query, "query")
        self._check_keys_values(k, v)
        t_q, t_k = query.shape[1], k.shape[-2]
        if mask is not None:
            require_mask(mask, "mask", (query.shape[0], self.n_heads, t_q, t_k), broadcast=True)
        if self.feature_map is None:  # linear attention: causal=True acts in its sums
            band = self._band(t_q, t_k, query.device)  # (T_q, T_k) or None
            mask = band if mask is None else mask if band is None else mask & band
        if head_mask is not None:
            require_float_tensor(head_mask, "head_mask", f"({self.n_heads},)", ndim=1)
            if head_mask.shape != (self.n_heads,):
                raise ValueError(f"head_mask must have shape (n_heads,) = ({self.n_heads},); "
                                 f"got {shape_str(head_mask.shape)}")
            require_finite(head_mask, "head_mask")
        q = split_heads(self.w_q(query), self.n_heads)  # (B, n_heads, T_q, d_k)
        if self.group > 1:  # each key/value head serves its group: (B, n_heads, T_k, d_k)
            k, v = repeat_kv(k, self.group), repeat_kv(v, self.group)
        heads, weights = self._heads(q, k, v, mask, head_mask)  # (B, n_heads, T_q, d_k)
        return self.w_o(merge_heads(heads)), weights  # (B, T_q, d_model)

    def _heads(self, q, k, v, mask, head_mask):
        """Each head's output (B, n_heads, T_q, d_k) and weights (B, n_heads, T_q, T_k)."""
        linear = {"causal": self.causal, "feature_map": self.feature_map}
        if self.feature_map is not None and mask is None and head_mask is None:
            heads = linear_attention(q, k, v, **linear)  # O(T)
            with torch.no_grad():
                weights = linear_attention_weights(q, k, **linear)
            return heads, weights
        if self.feature_map is not None:  # masked: the quadratic form, which takes any mask
            weights = linear_attention_weights(q, k, **linear, mask=mask)
        elif head_mask is None:
            return attention_unchecked(q, k, v, mask)
        else:
            weights = attention_unchecked(q, k, v, mask)[1]
        if head_mask is not None:
            weights = weights * head_mask[:, None, None]  # (B, n_heads, T_q, T_k)
        return weights @ v, weights

    def _band(self, t_q: int, t_k: int, device) -> torch.Tensor | None:
        """The keys the window and causal=True leave each query, (T_q, T_k) bool, the queries
        standing at positions T_k - T_q .. T_k - 1; None when the layer has neither."""
        if self.window is None and not self.causal:
            return None
        if t_q > t_k:
            raise ValueError(f"a window or causal=True reads the queries as the last T_q of the "
                             f"T_k positions: T_q = {t_q} must not exceed T_k = {t_k}")
        reach = t_k if self.window is None else self.window
        return sliding_window_mask(t_k, reach, self.causal, device)[t_k - t_q:]

    def _check_keys_values(self, k, v) -> None:
        """ValueError unless k and v have this layer's key/value heads and width."""
        for x, name in ((k, "k"), (v, "v")):
            expected = f"(B, n_kv_heads = {self.n_kv_heads}, T_k, d_k = {self.d_k})"
            require_float_tensor(x, name, expected, ndim=4)
            if x.shape[1] != self.n_kv_heads or x.shape[-1] != self.d_k:
                raise ValueError(f"{name} must have shape {expected}; got {shape_str(x.shape)}")

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
        pass it masks inverted: its True means may NOT attend. Only plain multi-head softmax
        attention has one (no shared key/value heads, window, causal band or feature map)."""
        variant = {"n_kv_heads": self.n_kv_heads if self.group > 1 else None,
                   "window": self.window, "causal": self.causal or None,
                   "feature_map": self.feature_map}
        chosen = {name: value for name, value in variant.items() if value is not None}
        if chosen:
            raise ValueError(f"only plain multi-head attention has a torch.nn.MultiheadAttention "
                             f"counterpart; this layer has {chosen}")
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
