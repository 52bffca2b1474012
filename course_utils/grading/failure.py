"""A test's verdict for the student: `GradingFailure`, its message, and how a notebook shows it
(its message alone, wrapped, without a traceback through this package)."""

from __future__ import annotations

import textwrap


class GradingFailure(AssertionError):
    """A test verdict meant for the student: the message says what to fix.

    Its first line is the sentence that matters (what was called and what was wrong); the
    values and a hint follow on lines of their own. In a notebook (and in nbgrader's Validate)
    it is shown as that message alone, wrapped to 80 columns, without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return wrap_message(f"{type(self).__name__}: {self}").splitlines()


def wrap_message(message: str, width: int = 80) -> str:
    """`message` with each of its lines wrapped to `width` columns (words are not split)."""
    return "\n".join(textwrap.fill(line, width=width, break_long_words=False,
                                   break_on_hyphens=False, subsequent_indent="  ") or line
                     for line in str(message).splitlines())


def check(condition: bool, message: str) -> None:
    """Fail with `message` unless `condition` holds."""
    if not condition:
        raise GradingFailure(message)


def _show_briefly(shell, etype, value, tb, tb_offset=None):
    """IPython shows a GradingFailure as its message, wrapped to 80 columns, not a traceback
    through this module."""
    lines = value._render_traceback_()
    lines[0] = f"\x1b[0;31m{etype.__name__}\x1b[0m" + lines[0][len(etype.__name__):]
    shell._showtraceback(etype, value, lines)


def install_brief_display() -> None:
    """Make IPython (when it runs this) show a GradingFailure as its message alone."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((GradingFailure,), _show_briefly)
