"""nbgrader plug-ins used by `nbgrader_config.py` (instructor side, never imported by notebooks).

`HideHiddenTests` runs when feedback is generated: a student's feedback shows which test
cells passed and what the visible tests said, but neither the source of the hidden tests
nor a traceback that would quote their lines.
"""

from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Unicode

__all__ = ["HideHiddenTests", "hidden_line_numbers"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_FRAME = re.compile(r"(?:Cell In\s*\[\d+\]|<ipython-input-[^>]*>), line (\d+)")


def hidden_line_numbers(source: str, begin: str, end: str) -> set[int]:
    """1-based numbers of the lines of `source` from a `begin` marker to its `end` marker."""
    hidden, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        if begin in line:
            inside = True
        if inside:
            hidden.add(number)
        if end in line:
            inside = False
    return hidden


class HideHiddenTests(Preprocessor):
    """Remove hidden-test source and hidden-test tracebacks from graded test cells."""

    enabled = Bool(True, help="nbconvert preprocessors are off unless enabled").tag(config=True)
    begin_delimeter = Unicode("BEGIN HIDDEN TESTS").tag(config=True)
    end_delimeter = Unicode("END HIDDEN TESTS").tag(config=True)
    placeholder = Unicode("# (hidden tests: their code is not shown in feedback)").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            return cell, resources
        hidden = hidden_line_numbers(cell.source, self.begin_delimeter, self.end_delimeter)
        if not hidden:
            return cell, resources
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                self._sanitize_error(output, hidden)
        kept, replaced = [], False
        for number, line in enumerate(cell.source.splitlines(), start=1):
            if number not in hidden:
                kept.append(line)
            elif not replaced:
                indent = line[: len(line) - len(line.lstrip())]
                kept.append(indent + self.placeholder)
                replaced = True
        cell.source = "\n".join(kept)
        return cell, resources

    def _sanitize_error(self, output, hidden: set[int]) -> None:
        plain = _ANSI.sub("", "\n".join(output.get("traceback", [])))
        lines = [int(n) for n in _CELL_FRAME.findall(plain)]
        in_hidden = bool(lines) and lines[0] in hidden
        ename, evalue = output.get("ename", "Error"), output.get("evalue", "")
        if in_hidden and ename != "GradingFailure":
            # A bare assertion or crash inside a hidden test: its text may quote the test.
            message = f"A hidden test failed ({ename}). Check your function on more cases."
        elif in_hidden:
            message = f"A hidden test failed: {evalue}"
        else:
            message = f"{ename}: {evalue}"
        output["traceback"] = [message]
        if in_hidden and ename != "GradingFailure":
            output["evalue"] = ""
