"""A corpus of bad submissions, built from the real released exercise of a unit.

Each case is a submission folder and what grading must make of it: the score, and a text
that must appear in the student's reason (autograde_status) or in the autograded notebook.
`tests/test_adversarial.py` grades them all with `course_grader.autograde`; the same corpus
is used by `course_grader/benchmark.py`.

Attacks that are not about points (reading the hidden tests, writing outside the working
copy, the network, fork bombs, filling the disk, memory) come with a correct solution, so
that their expected score is full marks and the check is what the attack printed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

UNIT = "00_attention_as_lookup"
NOTEBOOK = f"{UNIT}.ipynb"
FULL = 9.0


@dataclass
class Case:
    name: str            # the student id
    what: str            # what the submission does
    build: Callable[[Path, Path], None]   # (course, folder) -> writes the submission
    score: float
    says: str = ""       # must appear in the reason or in the autograded notebook
    never: str = "ESCAPED"  # must appear nowhere in the autograded notebook


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def released(course: Path) -> nbformat.NotebookNode:
    return nbformat.read(course / "exercises" / UNIT / NOTEBOOK, as_version=4)


def solve(course: Path, nb, skip: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    """Fill the solution cells (but those in `skip`) with the instructor's solution."""
    source = nbformat.read(course / "solutions" / UNIT / NOTEBOOK, as_version=4)
    solutions = {_meta(c).get("grade_id"): c.source for c in source.cells}
    for cell in nb.cells:
        grade_id = _meta(cell).get("grade_id")
        if _meta(cell).get("solution") and grade_id not in skip:
            cell.source = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", solutions[grade_id])
    return nb


def set_source(nb, grade_id: str, source: str) -> None:
    for cell in nb.cells:
        if _meta(cell).get("grade_id") == grade_id:
            cell.source = source
            return
    raise KeyError(grade_id)


def insert_after(nb, grade_id: str, source: str) -> None:
    """Insert a free code cell (no nbgrader metadata) after the cell `grade_id`."""
    for index, cell in enumerate(nb.cells):
        if _meta(cell).get("grade_id") == grade_id:
            nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
            return
    raise KeyError(grade_id)


def write(nb, folder: Path, name: str = NOTEBOOK) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)


def solved_with(cell_after: str, source: str):
    def build(course: Path, folder: Path) -> None:
        nb = solve(course, released(course))
        insert_after(nb, cell_after, source)
        write(nb, folder)
    return build


WRONG_ANSWERS = {
    "softmax_solution": "def softmax(x, dim=-1):\n    return torch.zeros_like(x)\n",
    "weighted_average_solution": "def weighted_average(weights, values):\n"
                                 "    return values.sum(dim=-2) * 0\n",
    "soft_lookup_solution": "def soft_lookup(query, keys, values):\n"
                            "    return values[0] * 0, keys[:, 0] * 0\n",
}


def wrong_with(tamper: str, where: str = "setup"):
    """Wrong answers everywhere, plus code that tries to make the tests pass anyway."""
    def build(course: Path, folder: Path) -> None:
        nb = released(course)
        for grade_id, source in WRONG_ANSWERS.items():
            set_source(nb, grade_id, source)
        insert_after(nb, where, tamper)
        write(nb, folder)
    return build


def _correct(course: Path, folder: Path) -> None:
    write(solve(course, released(course)), folder)


def _untouched(course: Path, folder: Path) -> None:
    write(released(course), folder)


def _delegates(course: Path, folder: Path) -> None:
    nb = released(course)
    set_source(nb, "softmax_solution", "from course_utils.attention import softmax\n")
    set_source(nb, "weighted_average_solution",
               "from course_utils.attention import weighted_average\n")
    set_source(nb, "soft_lookup_solution",
               "from course_utils import attention as ref\n\n"
               "def soft_lookup(query, keys, values):\n"
               "    return ref.soft_lookup(query, keys, values)\n")
    write(nb, folder)


def _empty(course: Path, folder: Path) -> None:
    write(nbformat.v4.new_notebook(), folder)


def _deletes_solution_cell(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    nb.cells = [c for c in nb.cells if _meta(c).get("grade_id") != "softmax_solution"]
    write(nb, folder)


def _deletes_and_strips_tests(course: Path, folder: Path) -> None:
    # softmax left unsolved; its first test cell deleted, its second stripped of metadata
    nb = solve(course, released(course), skip=("softmax_solution",))
    nb.cells = [c for c in nb.cells if _meta(c).get("grade_id") != "softmax_basic"]
    for cell in nb.cells:
        if _meta(cell).get("grade_id") == "softmax_stable":
            cell.metadata = {}
    write(nb, folder)


def _edits_tests(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    set_source(nb, "softmax_solution", WRONG_ANSWERS["softmax_solution"])
    set_source(nb, "softmax_basic", "pass\n")
    set_source(nb, "softmax_stable", "print('all good')\n")
    write(nb, folder)


def _invalid_json(course: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    text = nbformat.writes(solve(course, released(course)))
    (folder / NOTEBOOK).write_text(text[: len(text) // 2])


def _no_notebook(course: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "answers.txt").write_text("I did it all in my head\n")


def _wrong_name(course: Path, folder: Path) -> None:
    write(solve(course, released(course)), folder, name="attention (1).ipynb")


def _reads_hidden_tests(course: Path, folder: Path) -> None:
    targets = [course / "solutions" / UNIT / NOTEBOOK, course / "gradebook.db",
               course / "nbgrader_config.py", Path.home() / ".bashrc", Path("/etc/shadow")]
    code = ("import glob\n"
            f"for path in {[str(t) for t in targets]!r}:\n"
            "    try:\n"
            "        open(path, 'rb').read(10)\n"
            "        print('ESCAPED: read', path)\n"
            "    except OSError as err:\n"
            "        print('blocked: read', type(err).__name__)\n"
            f"others = glob.glob({str(course / 'submitted' / '*')!r}) + "
            f"glob.glob({str(course / 'autograded' / '*')!r})\n"
            f"others = [p for p in others if not p.endswith({folder.parent.name!r})]\n"
            "if others:\n"
            "    print('ESCAPED: sees', others)\n"
            "else:\n"
            "    print('blocked: no other submissions')\n")
    solved_with("setup", code)(course, folder)


def _writes_outside(course: Path, folder: Path) -> None:
    targets = [course / "pwned.txt", course / "submitted" / "pwned.txt",
               course / "autograded" / "pwned.txt", Path.home() / "pwned.txt"]
    code = (f"for path in {[str(t) for t in targets]!r}:\n"
            "    try:\n"
            "        open(path, 'w').write('x')\n"
            "        print('wrote (in the sandbox only, if it is private there)', path)\n"
            "    except OSError as err:\n"
            "        print('blocked: write', type(err).__name__)\n"
            "open('in_working_copy.txt', 'w').write('fine, but thrown away')\n")
    solved_with("setup", code)(course, folder)


CASES = [
    Case("correct", "the instructor's solution", _correct, FULL, "all tests passed"),
    Case("untouched", "the release, unchanged", _untouched, 0.0, "NotImplementedError"),
    Case("reads_hidden", "reads solutions/, the gradebook, other submissions, home",
         _reads_hidden_tests, FULL, "blocked: no other submissions"),
    # whether a write reached the host is checked on the host (test_nothing_escaped...)
    Case("writes_outside", "writes into the course, submitted/, autograded/, home",
         _writes_outside, FULL, "all tests passed"),
    Case("network", "opens connections to the internet",
         solved_with("setup", "import socket\nfor host in [('1.1.1.1', 53), ('pypi.org', 443)]:\n"
                     "    try:\n        socket.create_connection(host, timeout=3)\n"
                     "        print('ESCAPED: connected', host)\n"
                     "    except OSError as err:\n        print('blocked: network', err.errno)\n"),
         FULL, "blocked: network"),
    Case("patches_numpy_torch", "wrong answers; no-op numpy/torch assertions and torch.isclose",
         wrong_with("import numpy as np\nnp.testing.assert_allclose = lambda *a, **k: None\n"
                    "torch.testing.assert_close = lambda *a, **k: None\n"
                    "torch.isclose = lambda a, b, **k: torch.ones(a.shape, dtype=torch.bool)\n"),
         0.0, "tampering detected"),
    Case("patches_check_helper", "wrong answers; grading.check_tensor replaced by a no-op",
         wrong_with("grading.check_tensor = lambda *a, **k: None\n"
                    "grading.check = lambda *a, **k: None\n"), 0.0, "tampering detected"),
    Case("rebinds_grading", "wrong answers; the name `grading` bound to a fake module",
         wrong_with("class _Fake:\n    def __getattr__(self, name):\n"
                    "        return lambda *a, **k: None\n"
                    "grading = _Fake()\n"), 0.0, "tampering detected"),
    Case("swaps_code", "wrong answers; check_tensor's __code__ swapped in place",
         wrong_with("grading.check_tensor.__code__ = (lambda *a, **k: None).__code__\n"),
         0.0, "tampering detected"),
    Case("patches_builtins", "wrong answers; builtins abs and all replaced",
         wrong_with("import builtins\nbuiltins.abs = lambda x: 0\n"
                    "builtins.all = lambda x: True\n"), 0.0, "tampering detected"),
    Case("swallows_interrupt", "a loop that swallows KeyboardInterrupt after the softmax tests",
         solved_with("softmax_stable", "import time\nwhile True:\n    try:\n"
                     "        time.sleep(0.5)\n    except KeyboardInterrupt:\n        pass\n"),
         3.0, "did not stop when interrupted"),
    Case("kills_kernel", "kills its own kernel after the softmax tests",
         solved_with("softmax_stable", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
         3.0, "the kernel died"),
    Case("huge_line", "prints one 50 MB line",
         solved_with("setup", "print('x' * 50_000_000)\n"), FULL, "output cut here"),
    Case("binary_junk", "writes binary junk and control characters to stdout",
         solved_with("setup", "import sys\nsys.stdout.buffer.write(bytes(range(256)) * 400)\n"
                     "sys.stdout.flush()\nprint('junk \\x00\\x07\\x1b[2J\\udcff end')\n"),
         FULL, "all tests passed"),
    Case("fork_bomb", "forks until it cannot",
         solved_with("setup", "import os, time\nn = 0\ntry:\n    for _ in range(100_000):\n"
                     "        if os.fork() == 0:\n"
                     "            os.execv('/bin/sleep', ['sleep', '3613'])\n"
                     "        n += 1\nexcept OSError as err:\n"
                     "    print('blocked: fork refused after', n, 'processes')\n"),
         FULL, "blocked: fork refused after"),
    Case("fills_disk", "fills the disk of its working copy",
         solved_with("setup", "n = 0\ntry:\n    with open('fill.bin', 'wb') as f:\n"
                     "        for _ in range(100_000):\n"
                     "            f.write(b'x' * 2**20)\n            f.flush()\n"
                     "            n += 1\nexcept OSError as err:\n"
                     "    print('blocked: disk full after', n, 'MiB')\n"
                     "import os\nos.remove('fill.bin')\n"),
         FULL, "blocked: disk full after"),
    Case("memory_hog", "allocates 8 GiB",
         solved_with("setup", "try:\n    hog = bytearray(8 * 2**30)\n    print('ESCAPED: 8 GiB')\n"
                     "except MemoryError:\n    print('blocked: MemoryError')\n"),
         FULL, "blocked: MemoryError"),
    Case("delegates", "imports the course_utils reference instead of writing the code",
         _delegates, 0.0, "your code called course_utils.attention"),
    Case("empty_notebook", "a notebook with no cells", _empty, 0.0, "is empty"),
    Case("deletes_solution", "deletes the softmax solution cell",
         _deletes_solution_cell, 3.0, "NameError"),
    Case("deletes_tests", "no softmax; deletes one test cell and strips another's metadata",
         _deletes_and_strips_tests, 3.0, "was missing from the submission"),
    Case("edits_tests", "wrong softmax; replaces its test cells with `pass`",
         _edits_tests, 3.0, "GradingFailure"),
    Case("invalid_json", "a truncated notebook file", _invalid_json, 0.0,
         "not a readable notebook"),
    Case("no_notebook", "a folder without a notebook", _no_notebook, 0.0, "no notebook"),
    Case("wrong_name", "the notebook under another name", _wrong_name, FULL, "wrong file name"),
]


def build_corpus(course: Path, cases=CASES) -> None:
    """Write every case's submission to `course/submitted/<case>/<unit>/`."""
    for case in cases:
        case.build(course, course / "submitted" / case.name / UNIT)


def duplicate(cases, copies: int) -> list[Case]:
    """`copies` renamed copies of each case (for benchmarks)."""
    out = []
    for i in range(copies):
        for case in cases:
            twin = copy.copy(case)
            twin.name = f"{case.name}_{i:02d}"
            out.append(twin)
    return out
