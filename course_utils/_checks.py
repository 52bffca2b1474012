"""Argument checks: the one place where `course_utils` validates what it is given.

Every public function checks its arguments with these helpers, so that a wrong rank, a
mismatched width, a mask of the wrong dtype or a count that is not a positive int fails at
once with a ValueError that names what was expected (the shape, dtype or range), instead of
producing a silent wrong answer. Each helper returns the checked value, so a check can be one
line: `n = require_int(n, "n_steps")`.

Shapes in messages use the course's notation: `B` batch, `S`/`T` source/target length,
`T_q`/`T_k` query/key length, `n_vocab` vocabulary, `d_emb`, `d_h`, `d_enc`, `d_a`, `d_k`, `d_v`
widths, `n_ctx` unit 01's context window.

    scalars   require_int, require_bool, require_str, require_choice, require_positive_number,
              require_fraction, require_number_in, require_increasing_pair
    tensors   shape_str, require_float_tensor, require_ids, require_mask, require_no_nan,
              require_finite, check_dim, broadcast_batch, require_weight, require_matrix
    attention require_queries_keys, require_query_keys_any_width, require_query_and_keys,
              require_heads_qkv, require_kv_heads
    RNNs      require_gru, require_source, require_encoder_states
    labels    require_labels
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn as nn

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def shape_str(shape) -> str:
    """`(2, 3, 4)` for a torch.Size or tuple; `(5,)` for one dimension."""
    dims = tuple(shape)
    if len(dims) == 1:
        return f"({dims[0]},)"
    return "(" + ", ".join(str(d) for d in dims) + ")"


# ----------------------------------------------------------------------------- scalars

def require_int(value, name: str, low: int = 1, high: int | None = None) -> int:
    """An int (not a bool) in [low, high]; "a positive int" when low = 1 and no high."""
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if ok and value >= low and (high is None or value <= high):
        return int(value)
    if high is not None:
        wanted = f"an int in [{low}, {high}]"
    else:
        wanted = "a positive int" if low == 1 else f"an int >= {low}"
    raise ValueError(f"{name} must be {wanted}; got {value!r}")


def require_bool(value, name: str) -> bool:
    """True or False, nothing else: the string "False" would silently mean True."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool (True or False); got {value!r}")
    return value


def require_heads(d_model, n_heads) -> int:
    """d_model and n_heads, positive ints, with n_heads dividing d_model: -> d_k, the width of
    each head. The one check of the split into heads (attention layers and configs call it)."""
    require_int(d_model, "d_model")
    require_int(n_heads, "n_heads")
    if d_model % n_heads:
        raise ValueError(f"d_model = {d_model} must be divisible by n_heads = {n_heads}: "
                         f"each head gets d_k = d_model / n_heads features")
    return d_model // n_heads


def require_kv_heads(n_heads, n_kv_heads) -> int:
    """n_heads query heads sharing n_kv_heads key/value heads (grouped-query attention), both
    positive ints, n_kv_heads dividing n_heads: -> the group size n_heads / n_kv_heads."""
    require_int(n_heads, "n_heads")
    require_int(n_kv_heads, "n_kv_heads")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads = {n_kv_heads} must divide n_heads = {n_heads}: each "
                         f"key/value head serves a group of n_heads / n_kv_heads query heads "
                         f"(1 = multi-query, n_heads = multi-head)")
    return n_heads // n_kv_heads


def require_str(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str; got {type(value).__name__}")
    return value


def require_choice(value, name: str, choices: Sequence) -> object:
    """One of `choices`, e.g. schedule in ("constant", "linear")."""
    if value not in tuple(choices):
        wanted = " or ".join(repr(c) for c in choices) if len(choices) <= 2 else \
            f"one of {tuple(choices)}"
        raise ValueError(f"{name} must be {wanted}; got {value!r}")
    return value


def require_positive_number(value, name: str, zero: bool = False) -> float:
    """A finite real number > 0 (>= 0 with `zero`), e.g. a learning rate or a clip norm."""
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if ok and math.isfinite(value) and (value >= 0 if zero else value > 0):
        return float(value)
    raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} finite number; "
                     f"got {value!r}")


def require_fraction(value, name: str, what: str = "a number") -> float:
    """A number in [0, 1] (an accuracy; a one-element tensor is accepted)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, int | float | np.number) or isinstance(value, bool):
        raise ValueError(f"{name} must be {what} in [0, 1]; got {value!r}")
    if not 0.0 <= float(value) <= 1.0:  # also False for NaN
        raise ValueError(f"{name} must be {what} in [0, 1] (a fraction, not a percentage); "
                         f"got {float(value)!r}")
    return float(value)


def require_number_in(value, name: str, low: float, high: float, what: str = "a number",
                      rel_tol: float = 0.0) -> float:
    """A real number in [low, high], allowing the ends to be missed by a relative `rel_tol`
    (a slider on a log scale does not hit them exactly)."""
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    if ok and low * (1 - rel_tol) <= value <= high * (1 + rel_tol):  # False for NaN
        return float(value)
    raise ValueError(f"{name} must be {what} in [{low:g}, {high:g}]; got {value!r}")


def require_increasing_pair(pair, name: str, example: str) -> tuple[float, float]:
    """(low, high) with 0 < low < high, both finite, e.g. a range of temperatures."""
    try:
        low, high = (float(x) for x in pair)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lowest, highest) of positive numbers, "
                         f"e.g. {example}; got {pair!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
        raise ValueError(f"{name} must be a pair (lowest, highest) with 0 < lowest < highest, "
                         f"both finite; got {pair!r}")
    return low, high


def require_labels(labels, n: int, name: str, what: str, shape, owner: str = "the matrix is"
                   ) -> list[str]:
    """`n` labels (any iterable but a str), one per `what` (e.g. "row") of a matrix `shape`;
    returned as a list of str."""
    if isinstance(labels, str) or not isinstance(labels, Iterable):
        raise ValueError(f"{name} must be a list of {n} labels, one per {what}; got "
                         f"{type(labels).__name__}")
    labels = [str(label) for label in labels]
    if len(labels) != n:
        raise ValueError(f"{name} must have one label per {what}: {owner} {shape_str(shape)}, "
                         f"so expected {n} labels; got {len(labels)}")
    return labels


# ----------------------------------------------------------------------------- tensors

def require_float_tensor(x, name: str, expected: str, min_ndim: int = 1, ndim: int | None = None):
    """Check that `x` is a floating-point tensor of the right rank.

    `expected` is the shape written for people, such as "(..., T_q, d_k)"; it goes
    into the error message.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(
            f"{name} must be a torch.Tensor of shape {expected}; got {type(x).__name__}"
        )
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be a floating-point tensor (float16, bfloat16, float32 or float64) "
            f"of shape {expected}; got dtype {x.dtype}"
        )
    if ndim is not None and x.dim() != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimension(s), shape {expected}; "
            f"got shape {shape_str(x.shape)}"
        )
    if x.dim() < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s), shape {expected}; "
            f"got shape {shape_str(x.shape)}"
        )
    return x


def require_ids(x, name: str, expected: str, ndim: int) -> torch.Tensor:
    """Token ids: an int64 tensor with `ndim` dimensions, shape `expected` (e.g. "(B, S)")."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be an int64 torch.Tensor of shape {expected}; "
                         f"got {type(x).__name__}")
    if x.dtype != torch.long:
        raise ValueError(f"{name} must have dtype torch.int64 (token ids), shape {expected}; "
                         f"got dtype {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {expected}; got shape {shape_str(x.shape)}")
    return x


def require_mask(mask, name: str, shape, meaning: str = "True = may attend",
                 broadcast: bool = False) -> torch.Tensor:
    """A bool tensor of exactly `shape`, or (with `broadcast`) one that broadcasts to it."""
    if not isinstance(mask, torch.Tensor):
        how = "broadcastable to" if broadcast else "of shape"
        raise ValueError(f"{name} must be a bool torch.Tensor ({meaning}) {how} "
                         f"{shape_str(shape)}; got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must have dtype torch.bool ({meaning}), shape "
                         f"{shape_str(shape)}; got dtype {mask.dtype}. Convert with "
                         f"`mask.bool()` only if 1 means what True means here.")
    if broadcast:
        try:
            fits = torch.broadcast_shapes(mask.shape, shape) == tuple(shape)
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"{name} of shape {shape_str(mask.shape)} does not broadcast to "
                             f"the scores {shape_str(shape)}; expected a shape such as "
                             f"(..., T_q, T_k) or (..., 1, T_k)")
    elif mask.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {shape_str(shape)} ({meaning}); "
                         f"got {shape_str(mask.shape)}")
    return mask


def require_no_nan(x: torch.Tensor, name: str) -> None:
    """Reject NaN and +inf; -inf is allowed because it is how a score is masked out."""
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains NaN; expected finite values (or -inf to mask)")
    if torch.isposinf(x).any():
        raise ValueError(f"{name} contains +inf; expected finite values (or -inf to mask)")


def require_finite(x: torch.Tensor, name: str) -> None:
    """Reject NaN and +-inf (for inputs such as queries, keys, values and weights)."""
    if not torch.isfinite(x).all():
        kind = "NaN" if torch.isnan(x).any() else "inf"
        raise ValueError(f"{name} contains {kind}; expected finite values")


def check_dim(dim: int, ndim: int, name: str = "dim") -> int:
    """Turn a possibly negative `dim` into a positive index, or raise."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"{name} must be an int in [-{ndim}, {ndim - 1}]; got {dim!r}")
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"{name} must be in [-{ndim}, {ndim - 1}] for a {ndim}-d tensor; got {dim}"
        )
    return dim % ndim


def broadcast_batch(a: torch.Size, b: torch.Size, what: str) -> torch.Size:
    """Broadcast two batch shapes, or raise a ValueError that shows both."""
    try:
        return torch.broadcast_shapes(a, b)
    except RuntimeError:
        raise ValueError(
            f"{what}: batch dimensions {shape_str(a)} and {shape_str(b)} do not broadcast"
        ) from None


def require_weight(w, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A learned weight of exactly `shape`, in the dtype of the inputs, finite."""
    expected = shape_str(shape)
    require_float_tensor(w, name, expected, ndim=len(shape))
    if tuple(w.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {expected}; got {shape_str(w.shape)}")
    if w.dtype != dtype:
        raise ValueError(f"{name} must have the dtype of q and k ({dtype}); got {w.dtype}")
    require_finite(w, name)
    return w


def require_matrix(weights) -> np.ndarray:
    """A non-empty finite (T_q, T_k) matrix (tensor or array-like), as float64 NumPy."""
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().to("cpu", torch.float32).numpy()
    array = np.asarray(weights, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(
            f"weights must be a 2-d matrix of shape (T_q, T_k), one row per query; got shape "
            f"{shape_str(array.shape)} (select one example and one head first, e.g. w[0, h])"
        )
    if array.size == 0:
        raise ValueError(
            f"weights must be a non-empty (T_q, T_k) matrix; got shape {shape_str(array.shape)}"
        )
    if not np.isfinite(array).all():
        raise ValueError("weights contain NaN or inf; expected finite attention weights")
    return array


# ----------------------------------------------------------------------------- attention

def require_queries_keys(q, k) -> None:
    """Queries (..., T_q, d_k) and keys (..., T_k, d_k) of one width, dtype and batch."""
    require_query_keys_any_width(q, k, "(..., T_q, d_k)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same width d_k: q is {shape_str(q.shape)}, "
            f"so k must be (..., T_k, {q.shape[-1]}); got k {shape_str(k.shape)}"
        )


def require_heads_qkv(q, k, v) -> None:
    """Queries (B, n_heads, T_q, d_k), keys (B, n_heads, T_k, d_k) and values
    (B, n_heads, T_k, d_v), split into heads: one batch, one number of heads, one dtype,
    as many values as keys, all finite."""
    for x, name, rows, width in ((q, "q (queries)", "T_q", "d_k"), (k, "k (keys)", "T_k", "d_k"),
                                 (v, "v (values)", "T_k", "d_v")):
        require_float_tensor(x, name, f"(B, n_heads, {rows}, {width})", ndim=4)
    if not q.shape[:2] == k.shape[:2] == v.shape[:2]:
        raise ValueError(f"q, k and v must have the same B and n_heads, (B, n_heads, T, d_k): got "
                         f"q {shape_str(q.shape)}, k {shape_str(k.shape)}, v {shape_str(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"queries and keys must have the same width d_k: q is "
                         f"{shape_str(q.shape)}, so k must be (B, n_heads, T_k, {q.shape[-1]}); "
                         f"got k {shape_str(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"every key needs a value: k is {shape_str(k.shape)}, so v must be "
                         f"(B, n_heads, {k.shape[-2]}, d_v); got v {shape_str(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k and v must have one dtype; got {q.dtype}, {k.dtype} and "
                         f"{v.dtype}")
    for x, name in ((q, "q (queries)"), (k, "k (keys)"), (v, "v (values)")):
        require_finite(x, name)


def require_query_keys_any_width(q, k, q_shape: str = "(..., T_q, d_q)") -> None:
    """Queries and keys whose widths may differ (bilinear and additive scores); the batch
    dimensions must broadcast, the dtypes agree, the values be finite."""
    require_float_tensor(q, "q (queries)", q_shape, min_ndim=2)
    require_float_tensor(k, "k (keys)", "(..., T_k, d_k)", min_ndim=2)
    if q.dtype != k.dtype:
        raise ValueError(f"q and k must have the same dtype; got {q.dtype} and {k.dtype}")
    broadcast_batch(q.shape[:-2], k.shape[:-2], "q and k")
    require_finite(q, "q (queries)")
    require_finite(k, "k (keys)")


def require_query_and_keys(query, keys) -> None:
    """One query (..., d) per set of n keys (..., n, d): unit 01's previous word and its
    context window (n = n_ctx)."""
    require_float_tensor(query, "query", "(..., d_emb)")
    require_float_tensor(keys, "keys", "(..., n_ctx, d_emb)", min_ndim=2)
    if keys.dim() != query.dim() + 1 or keys.shape[:-2] != query.shape[:-1] \
            or keys.shape[-1] != query.shape[-1]:
        expected = "(" + ", ".join([*map(str, query.shape[:-1]), "n_ctx",
                                    str(query.shape[-1])]) + ")"
        raise ValueError(
            f"keys must hold n_ctx vectors for every query: query {shape_str(query.shape)} "
            f"expects keys of shape {expected}; got keys {shape_str(keys.shape)}"
        )


# ----------------------------------------------------------------------------- RNNs

def require_gru(rnn, name: str, batch_first: bool = True, bidirectional: bool = False) -> nn.GRU:
    """The reference code reads one layer with biases, of one direction unless told otherwise
    (a bidirectional GRU read as a unidirectional one would give wrong states)."""
    if not isinstance(rnn, nn.GRU):
        raise ValueError(f"{name} must be an nn.GRU; got {type(rnn).__name__}")
    if (rnn.num_layers != 1 or rnn.bidirectional != bidirectional or not rnn.bias
            or (batch_first and not rnn.batch_first)):
        direction = "both directions" if bidirectional else "one direction"
        raise ValueError(f"{name} must be nn.GRU(input_size, hidden_size, batch_first=True"
                         f"{', bidirectional=True' if bidirectional else ''}): one layer, "
                         f"{direction}, with biases; got num_layers={rnn.num_layers}, "
                         f"bidirectional={rnn.bidirectional}, bias={rnn.bias}, "
                         f"batch_first={rnn.batch_first}")
    return rnn


def require_source(src, lengths) -> None:
    """Source ids src (B, S) and their lengths (B,) in 1..S."""
    require_ids(src, "src", "(B, S)", 2)
    require_ids(lengths, "lengths", "(B,)", 1)
    if lengths.shape[0] != src.shape[0]:
        raise ValueError(f"lengths must have shape ({src.shape[0]},), one per row of src "
                         f"{shape_str(src.shape)}; got {shape_str(lengths.shape)}")
    if src.shape[0] and (int(lengths.min()) < 1 or int(lengths.max()) > src.shape[1]):
        raise ValueError(f"lengths must lie in 1..{src.shape[1]} (the width of src); got "
                         f"{int(lengths.min())}..{int(lengths.max())}")


def require_encoder_states(states, mask, batch: int, d_enc: int) -> None:
    """Encoder states (B, S, d_enc) for `batch` rows and their mask (B, S) bool."""
    require_float_tensor(states, "enc.states", f"(B, S, {d_enc})", ndim=3)
    if states.shape[0] != batch or states.shape[2] != d_enc:
        raise ValueError(f"enc.states must have shape ({batch}, S, {d_enc}); got "
                         f"{shape_str(states.shape)}")
    require_mask(mask, "enc.mask", states.shape[:2], meaning="True = a real source token")
