"""The one progress bar of the course: text in a notebook, tqdm in a terminal.

    with ProgressBar(total=282, desc="attention") as bar:
        for step in range(282):
            ...
            bar.update(1, loss=loss.item())

In a Jupyter kernel the bar is a plain-text display (`IPython.display.display(...,
display_id=True)`) that is redrawn in place at most every `min_interval` seconds, and on
`close` replaced by one final line such as

    attention: 282/282 steps in 21.4 s, final loss 0.0101

A notebook saved after it ran therefore shows the finished run, not a bar frozen at 0%, and
there is no ipywidgets widget whose state could be lost. Outside a kernel it is a `tqdm`
bar on stderr that disappears when done. With `enabled=False` it shows nothing.
"""

from __future__ import annotations

import math
import sys
import time

import tqdm
from IPython import get_ipython
from IPython.display import display

from course_utils._checks import require_bool, require_int, require_positive_number, require_str

__all__ = ["ProgressBar", "in_kernel"]

_BAR_WIDTH = 100  # characters of the text bar, tqdm's `ncols`


def in_kernel() -> bool:
    """True inside a Jupyter kernel (an IPython shell with a kernel), False in a terminal,
    in plain Python and in IPython without a kernel."""
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None


class ProgressBar:
    """A progress bar over `total` units (steps), with the latest loss.

    total: a positive int; desc: the label in front; unit: what is counted ("steps");
    enabled: False shows nothing (the counts are still kept); min_interval: seconds between
    two redraws of the notebook bar (the last state is always drawn on close).
    `update(n, loss=...)` adds n units and records the loss; `close()` (or leaving the
    `with` block) draws the final line. Attributes: `n`, `total`, `loss` (the last one
    given, or None), `elapsed` (seconds since the start).
    """

    def __init__(self, total: int, desc: str = "progress", *, unit: str = "steps",
                 enabled: bool = True, min_interval: float = 0.2):
        self.total = require_int(total, "total", low=1)
        self.desc = require_str(desc, "desc")
        self.unit = require_str(unit, "unit")
        require_bool(enabled, "enabled")
        self.min_interval = require_positive_number(min_interval, "min_interval", zero=True)
        self.n = 0
        self.loss: float | None = None
        self.closed = False
        self._start = time.perf_counter()
        self._last_draw = -math.inf
        self._handle = None  # the notebook display, when in a kernel
        self._tqdm = None  # the terminal bar, outside a kernel
        if enabled and in_kernel():
            self._handle = display({"text/plain": self._meter()}, raw=True, display_id=True)
            self._last_draw = time.perf_counter()
        elif enabled:
            self._tqdm = tqdm.tqdm(total=self.total, desc=self.desc, unit=f" {self.unit}",
                                   leave=False, file=sys.stderr, dynamic_ncols=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def _meter(self) -> str:
        postfix = None if self.loss is None else f"loss={self.loss:.4g}"
        return tqdm.tqdm.format_meter(self.n, self.total, self.elapsed, prefix=self.desc,
                                      unit=f" {self.unit}", postfix=postfix, ncols=_BAR_WIDTH)

    def final_line(self) -> str:
        """`desc: n/total steps in 12.3 s, final loss 0.0101` (", stopped early" when
        n < total)."""
        line = f"{self.desc}: {self.n}/{self.total} {self.unit} in {self.elapsed:.1f} s"
        if self.loss is not None:
            line += f", final loss {self.loss:.4g}"
        if self.n < self.total:
            line += ", stopped early"
        return line

    def update(self, n: int = 1, loss: float | None = None) -> None:
        """Count `n` more units (n >= 0) and, if given, record the latest loss."""
        if self.closed:
            raise ValueError(f"the progress bar {self.desc!r} is closed; expected update() "
                             f"before close()")
        require_int(n, "n", low=0)
        if self.n + n > self.total:
            raise ValueError(f"update({n}) would count {self.n + n} {self.unit}, more than "
                             f"total = {self.total}")
        if loss is not None:
            self.loss = float(loss)
        self.n += n
        if self._tqdm is not None:
            if loss is not None:
                self._tqdm.set_postfix(loss=f"{self.loss:.4g}", refresh=False)
            self._tqdm.update(n)
        elif self._handle is not None:
            now = time.perf_counter()
            if now - self._last_draw >= self.min_interval:
                self._handle.update({"text/plain": self._meter()}, raw=True)
                self._last_draw = now

    def close(self) -> None:
        """Draw the final line in a notebook, remove the terminal bar. Closing twice is
        harmless."""
        if self.closed:
            return
        self.closed = True
        if self._handle is not None:
            self._handle.update({"text/plain": self.final_line()}, raw=True)
        if self._tqdm is not None:
            self._tqdm.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
