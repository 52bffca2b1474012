"""What each lecture's text promises, one module per lecture (`lecture_NN.py`):

* `CLAIMS`: its sentences about results of training, each a band on an expression evaluated in
  the lecture's namespace after its last cell (checked by test_lectures.py);
* `QUESTIONS`: for each question that asks the student to run something, the steps a student
  would take, read from the question's text (run by test_questions.py).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Claim:
    """A sentence of the lecture about a result of training, as a band on an expression.

    `expression` is evaluated in the lecture's namespace once, after the last cell (keep it
    free of side effects that matter: no training); its value must lie in [low, high]. Next
    to each claim, a comment gives the values measured when the band was set (seeds and code
    paths), so that a band can be judged: wide enough for any CPU, narrow enough to catch a
    real regression."""

    text: str
    expression: str
    low: float = -math.inf
    high: float = math.inf
    timing: bool = False  # a claim about wall time: see test_lectures.TIMINGS


def timing(text: str, expression: str, low: float = -math.inf, high: float = math.inf) -> Claim:
    """A claim about wall time. Its expression must give a number on every run, but its band is
    asserted only where the machine is quiet enough to time (`make bench`); under the load of a
    test suite a timing says more about the neighbours than about the lecture."""
    return Claim(text, expression, low, high, timing=True)


def exact_match(name: str) -> str:
    return f"float(correct[{name!r}].float().mean())"


@dataclass(frozen=True)
class Rerun:
    """Run again the one lecture cell that has the line `line`, with `edits` ((old, new) pairs,
    each old text found exactly once in that cell) applied first."""

    line: str
    edits: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Question:
    """A question's steps (code a student types, or a lecture cell run again), an expression
    whose value the steps must change, one that must be true after them, and steps that put
    back what a later question reads (run after the checks; not matched against the text)."""

    steps: tuple[str | Rerun, ...]
    changed: str
    check: str = "True"
    restore: tuple[str | Rerun, ...] = ()


def spec(lecture: str) -> ModuleType:
    """The module of the lecture whose file stem is `lecture` ("03_attention_seq2seq")."""
    return importlib.import_module(f"{__name__}.lecture_{lecture[:2]}")
