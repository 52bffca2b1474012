"""Input checks shared by the public functions of `course_utils`.

Every public function validates its arguments with these helpers so that a wrong rank,
a mismatched width or a mask of the wrong dtype fails at once with a ValueError that
names the shape or dtype that was expected, instead of producing a silent wrong answer.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def shape_str(shape) -> str:
    """`(2, 3, 4)` for a torch.Size or tuple; `(5,)` for one dimension."""
    dims = tuple(shape)
    if len(dims) == 1:
        return f"({dims[0]},)"
    return "(" + ", ".join(str(d) for d in dims) + ")"


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
