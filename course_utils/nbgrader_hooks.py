"""nbgrader plug-ins used by `nbgrader_config.py` (instructor side, never imported by notebooks).

`HideHiddenTests` runs when feedback is generated: a student's feedback shows which test
cells passed and what the visible tests said, but neither the source of the hidden tests
nor a traceback that would quote their lines.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import re
import shutil
import tempfile
import time

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbformat import v4 as nbformat_v4
from nbgrader.preprocessors import Execute, OverwriteCells
from traitlets import Bool, Dict, Integer, Unicode

from course_utils import integrity, sandbox

__all__ = [
    "HideHiddenTests",
    "RestoreCells",
    "SafeExecute",
    "SandboxUnavailable",
    "SandboxedKernelManager",
    "hidden_line_numbers",
]

# Exceptions whose message is written for students (by grading's checks or the autograder).
SAFE_VERDICTS = ("GradingFailure", "TamperingDetected", "KernelStopped")
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
        safe = ename in SAFE_VERDICTS
        if in_hidden and not safe:
            # A bare assertion or crash inside a hidden test: its text may quote the test.
            message = f"A hidden test failed ({ename}). Check your function on more cases."
        elif in_hidden:
            message = f"A hidden test failed: {evalue}"
        else:
            message = f"{ename}: {evalue}"
        output["traceback"] = [message]
        if in_hidden and not safe:
            output["evalue"] = ""


# ------------------------------------------------------------------ safe autograding

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ud800-\udfff]")
UNSAFE_HINT = ("To grade without the sandbox anyway (student code then runs as you, with "
               "access to your files and the network), set c.SafeExecute.sandbox = False or "
               "run `make autograde UNSAFE=1`.")


class SandboxUnavailable(RuntimeError):
    """Grading was asked to use the sandbox and this machine cannot provide it."""


@functools.lru_cache(maxsize=1)
def _sandbox_problem() -> str | None:
    return sandbox.unavailable_reason()


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel inside `course_utils.sandbox`, talking over Unix sockets in a
    private folder (the sandbox has no network, so TCP to the grader is impossible)."""

    limits = Dict(help="course_utils.sandbox.Limits fields to override").tag(config=True)

    async def _async_pre_start_kernel(self, **kw):
        self._private_dir = tempfile.mkdtemp(prefix="course-kernel-")
        self.transport = "ipc"
        self.connection_file = os.path.join(self._private_dir, "kernel.json")
        self.ip = os.path.join(self._private_dir, "ipc")
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        workdir = kw.get("cwd") or os.getcwd()
        wrapped = sandbox.wrap(kernel_cmd, workdir=workdir, runtime_dir=self._private_dir,
                               limits=sandbox.Limits(**self.limits))
        return await super()._async_launch_kernel(wrapped, **kw)

    def exit_reason(self) -> str | None:
        record = sandbox.exit_record(getattr(self, "_private_dir", ""))
        return record["reason"] if record else None

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and getattr(self, "_private_dir", None):
            shutil.rmtree(self._private_dir, ignore_errors=True)


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _setup_imports(nb) -> dict[str, str]:
    """{name: dotted target} for the imports in the notebook's locked, non-solution cells:
    the names that test cells may rely on (`torch`, `grading`, `np`, ...)."""
    names: dict[str, str] = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("locked") or meta.get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        names[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        names[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if alias.name != "*":
                        names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _is_graded_test(cell) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


class SafeExecute(Execute):
    """nbgrader's Execute, made safe for untrusted notebooks.

    * the kernel runs in `course_utils.sandbox` (unless `sandbox = False`, the unsafe flag);
    * each cell's output is capped at `max_output_chars` (a single huge line included) and
      cleaned of control characters and invalid text;
    * around every graded test cell the integrity of the functions that tests rely on is
      checked against a fingerprint taken before the first cell (kept here, outside the
      kernel); a change adds a TamperingDetected error, so the item scores 0;
    * a cell that outlives the timeout and ignores the interrupt, or that kills the kernel,
      gets an error saying so; the kernel is stopped and every later cell is marked as not
      run, so that every item still gets a score (0) instead of none.
    """

    sandbox = Bool(True, help="run student code in course_utils.sandbox").tag(config=True)
    max_output_chars = Integer(20_000, help="output kept per cell, in characters").tag(
        config=True)
    probe_timeout = Integer(60, help="seconds allowed for one integrity check").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.sandbox:
            problem = _sandbox_problem()
            if problem:
                raise SandboxUnavailable(f"Refusing to autograde: {problem}. {UNSAFE_HINT}")
            self.kernel_manager_class = SandboxedKernelManager

    # -- the notebook
    def preprocess(self, nb, resources, km=None):
        self._stopped: str | None = None
        self._baseline: dict | None = None
        self._names = _setup_imports(nb)
        self._output_used: dict[int, int] = {}
        return super().preprocess(nb, resources, km=km)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("KernelStopped", f"Not run: {self._stopped}.")]
            return cell, resources
        graded = _is_graded_test(cell)
        if self._baseline is None:
            self._baseline = self._fingerprint(expected=True) or {}
        changed = self._tampering() if graded else []
        self._output_used[index] = 0
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except (CellTimeoutError, DeadKernelError) as err:
            self._stop(self._why(err))
            cell.outputs.append(_error("KernelStopped", self._stopped_verdict))
            return cell, resources
        if graded:
            changed = sorted(set(changed) | set(self._tampering()))
            if changed:
                cell.outputs.append(_error("TamperingDetected", integrity.describe(changed)))
        return cell, resources

    # -- integrity
    def _fingerprint(self, expected: bool = False) -> dict | None:
        """Run integrity.fingerprint's own source in the kernel and return its result."""
        source = inspect.getsource(integrity.fingerprint)
        call = (f"(lambda ns: (exec({source!r}, ns), __import__('json').dumps("
                f"ns['fingerprint']({integrity.WATCHED_MODULES!r}, {self._names!r}, "
                f"{expected!r})))[1])({{}})")
        try:
            msg_id = self.kc.execute("", silent=True, store_history=False,
                                     user_expressions={"fp": call})
            reply = run_sync(self._shell_reply)(msg_id)
            value = reply["content"]["user_expressions"]["fp"]
            return json.loads(ast.literal_eval(value["data"]["text/plain"]))
        except Exception:  # noqa: BLE001 - anything that stops the check counts as tampering
            return None

    async def _shell_reply(self, msg_id: str) -> dict:
        deadline = time.monotonic() + self.probe_timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=left))
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def _tampering(self) -> list[str]:
        if not self._baseline:
            return ["the integrity check itself (it could not run before the first cell)"]
        now = self._fingerprint()
        if now is None:
            return ["the integrity check itself (the kernel did not answer it)"]
        return integrity.changes(self._baseline, now)

    # -- stopping a kernel that hangs or dies
    def _why(self, err: Exception) -> str:
        if isinstance(err, DeadKernelError):
            reason = None
            if isinstance(self.km, SandboxedKernelManager):
                reason = self.km.exit_reason()
            return ("the kernel died while this cell ran"
                    + (f" ({reason})" if reason else " (it exited, crashed or hit a limit)"))
        return (f"this cell ran longer than {self.timeout} s and did not stop when interrupted, "
                f"so the kernel was stopped")

    def _stop(self, reason: str) -> None:
        self._stopped = reason
        self._stopped_verdict = f"{reason}. This item scores 0 and the cells after it are not run."
        self.log.warning("Stopping the kernel: %s", reason)
        try:
            run_sync(self.km.shutdown_kernel)(now=True)
        except Exception as err:  # noqa: BLE001 - it may be dead already
            self.log.debug("shutdown after stop: %s", err)

    # -- output limits
    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        used = self._output_used.get(cell_index, 0)
        budget = self.max_output_chars - used
        if budget <= 0:
            return None
        size = _clip(msg.get("msg_type", ""), content, budget, self.max_output_chars)
        self._output_used[cell_index] = used + size
        return super().output(outs, msg, display_id, cell_index)


def _clean(text: str) -> str:
    return _CONTROL.sub("\ufffd", text) if isinstance(text, str) else str(text)


def _clip(msg_type: str, content: dict, budget: int, limit: int) -> int:
    """Clean `content` in place and cut it to `budget` characters; return the size kept
    (everything that is left of the budget once something had to be cut)."""
    note = (f"\n[... output cut here: a cell may show at most {limit} characters; "
            f"the rest was discarded ...]\n")
    if msg_type == "stream":
        text = _clean(content.get("text", ""))
        if len(text) > budget:
            content["text"] = text[:budget] + note
            return budget
        content["text"] = text
        return len(text)
    if msg_type in ("display_data", "execute_result", "update_display_data"):
        data = content.get("data", {})
        size = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())
        if size > budget:
            content["data"] = {"text/plain": note.strip()}
            content["metadata"] = {}
            return budget
        if "text/plain" in data:
            data["text/plain"] = _clean(data["text/plain"])
        return size
    if msg_type == "error":
        content["ename"] = _clean(content.get("ename", ""))[:200]
        content["evalue"] = _clean(content.get("evalue", ""))[: max(200, budget // 2)]
        lines, kept = [], 0
        for line in content.get("traceback", []):
            line = _clean(line)
            if kept + len(line) > budget:
                lines.append(note.strip())
                break
            lines.append(line)
            kept += len(line)
        content["traceback"] = lines
        return kept + len(content["evalue"])
    return 0


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells, which puts back the test cells a submission deleted or
    stripped of metadata, made robust: a cell goes after the nearest earlier cell of the
    source that is still present (nbgrader's own version fails with a KeyError when the
    cell just before is missing too), and read-only set-up cells (imports) come back too."""

    add_missing_cells = Bool(True).tag(config=True)

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        by_name = {cell.name: cell for cell in source_nb.source_cells}
        grade_cells = {cell.name: cell for cell in source_nb.grade_cells}
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for position, name in enumerate(order):
            source = by_name[name]
            restorable = name in grade_cells or (source.locked and name not in solution_ids)
            present = self._present(nb)
            if not restorable or name in present:
                continue
            where = next((present[prev] + 1 for prev in reversed(order[:position])
                          if prev in present), 0)
            if name in grade_cells:
                cell = self.missing_cell_transform(source, grade_cells[name].max_score,
                                                   is_solution=name in solution_ids)
            else:
                cell = self._locked_cell(source)
            self.log.warning("Cell %s was missing from the submission; put back", name)
            nb.cells.insert(where, cell)
        return nb, resources

    @staticmethod
    def _present(nb) -> dict[str, int]:
        return {cell.metadata["nbgrader"]["grade_id"]: index
                for index, cell in enumerate(nb.cells)
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")}

    def _locked_cell(self, source) -> NotebookNode:
        note = self.missing_cell_notification.format(cell_id=source.name)
        meta = {"deletable": False, "editable": False,
                "nbgrader": {"grade": False, "grade_id": source.name, "locked": True,
                             "solution": False, "checksum": source.checksum,
                             "schema_version": 3}}
        if source.cell_type == "code":
            return nbformat_v4.new_code_cell("# " + note.strip() + "\n" + source.source,
                                             metadata=meta)
        return nbformat_v4.new_markdown_cell(note + source.source, metadata=meta)
