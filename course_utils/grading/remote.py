"""The grader's side of a test cell: while the checker process (`course_grader.checker`) runs
one, the restrictions a test asks for (names to forbid, functions to substitute, a seed) are
collected here and sent along with each call of a student function, instead of being applied
in this process. The checker opens and closes that state with `start` and `stop`; the checks
read it with `current`. In a student's kernel it is never opened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class RemoteTest:
    """What the checker process asks of this module while it runs a test cell: the names
    to forbid and the functions to substitute are sent along with each call of a student
    function instead of being applied here."""

    def __init__(self) -> None:
        self.forbidden: list[tuple[tuple[str, ...], str]] = []
        self.substitutes: list[dict] = []
        self.seeds: list[int] = []

    def seed(self) -> int | None:
        return self.seeds[-1] if self.seeds else None

    def forbidden_names(self) -> tuple[list[str], str]:
        names = [n for block, _ in self.forbidden for n in block]
        reasons = [r for _, r in self.forbidden]
        return names, "; ".join(dict.fromkeys(reasons))

    def substitute_map(self) -> dict:
        merged: dict = {}
        for block in self.substitutes:
            merged.update(block)
        return merged


_CURRENT: list[RemoteTest] = []   # the test cell the checker is running, if any


def start() -> RemoteTest:
    """The checker begins a test cell: what it asks for is collected from now on."""
    _CURRENT[:] = [RemoteTest()]
    return _CURRENT[0]


def stop() -> None:
    """The checker has finished the test cell."""
    _CURRENT.clear()


def current() -> RemoteTest | None:
    """The test cell the checker is running (None in a student's kernel or a plain run)."""
    return _CURRENT[0] if _CURRENT else None


@contextlib.contextmanager
def pushed(stack: list, item) -> Iterator[None]:
    stack.append(item)
    try:
        yield
    finally:
        stack.pop()
