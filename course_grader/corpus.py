"""A corpus of bad submissions, built from the real released exercise of a unit.

Each case is a submission folder and what grading must make of it: the score, and a text
that must appear in the student's reason (autograde_status) or in the autograded notebook.
`tests/course_grader/test_adversarial.py` grades them all with `course_grader.autograde`;
the same corpus is used by `course_grader/benchmark.py`, and an instructor can write it out
to try a grading set-up: `python -m course_grader.corpus COURSE_DIR`.

Attempts to make wrong answers pass (replacing the checks, forging the kernel's signals,
objects that lie in comparisons, hijacking the grader's helper in the kernel) all score 0:
the verdict is computed by the checker from the values alone.

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
SOFTMAX_POINTS = 3.0     # softmax_basic and softmax_stable; the other parts are judged with a
                         # correct softmax put in for the student's (grading.substitute)
SOFTMAX_VISIBLE = FULL - SOFTMAX_POINTS   # a ready-made softmax: only its hidden tests fail


@dataclass
class Case:
    name: str            # the student id
    what: str            # what the submission does
    build: Callable[[Path, Path], None]   # (course, folder) -> writes the submission
    score: float
    says: str = ""       # must appear in the reason or in the autograded notebook
    never: str = "ESCAPED"  # must appear nowhere in the autograded notebook
    flagged: str = ""    # must appear in the notes for the instructor (course_grader.flags)


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def released(course: Path, unit: str = UNIT) -> nbformat.NotebookNode:
    return nbformat.read(course / "exercises" / unit / f"{unit}.ipynb", as_version=4)


def solve(course: Path, nb, skip: tuple[str, ...] = (), unit: str = UNIT) -> nbformat.NotebookNode:
    """Fill the solution cells (but those in `skip`) with the instructor's solution."""
    source = nbformat.read(course / "solutions" / unit / f"{unit}.ipynb", as_version=4)
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


def solved_with(cell: str, source: str, *, replace: bool = False):
    """The instructor's solution with a free cell of `source` after the cell `cell`, or, with
    `replace`, with `source` in place of that solution cell's."""
    def build(course: Path, folder: Path) -> None:
        nb = solve(course, released(course))
        (set_source if replace else insert_after)(nb, cell, source)
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


# Wrong values are judged as wrong values, whatever the kernel did to its own world.
JUDGED_BY_VALUES = "is wrong at index"


def _wrong_and(extra: dict):
    """Wrong answers with the solution cells replaced by `extra` ({grade_id: source})."""
    def build(course: Path, folder: Path) -> None:
        nb = released(course)
        for grade_id, source in {**WRONG_ANSWERS, **extra}.items():
            set_source(nb, grade_id, source)
        write(nb, folder)
    return build


def _aten_softmax(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    set_source(nb, "softmax_solution",
               "def softmax(x, dim=-1):\n    return torch.ops.aten._softmax(x, dim, False)\n")
    write(nb, folder)


def _copies_reference(course: Path, folder: Path) -> None:
    nb = released(course)
    set_source(nb, "softmax_solution",
               "import types\nfrom course_utils import attention as _ref\n"
               "softmax = types.FunctionType(_ref.softmax.__code__, _ref.softmax.__globals__)\n")
    set_source(nb, "weighted_average_solution",
               "import importlib\n_ref = importlib.import_module('course_utils.attention')\n"
               "weighted_average = _ref.weighted_average\n")
    set_source(nb, "soft_lookup_solution",
               "import sys\nsys.path.insert(0, '/work/main')\n"
               "from course_utils.attention import soft_lookup\n")
    write(nb, folder)


SEARCHES_FOR_HIDDEN_TESTS = """\
import glob, os
for path in glob.glob('**/*.ipynb', recursive=True) + glob.glob('/var/submission/**',
                                                               recursive=True):
    if os.path.isfile(path):
        print('FOUND', path, open(path, errors='replace').read()[:100000])
print('INPUTS', In)
print('HISTORY', list(get_ipython().history_manager.get_range(output=False)))
"""


def _test_cells_first(nb) -> None:
    """Every test cell of `nb` moved above the first solution cell, and the first one copied
    again at the end: the submission's order of test cells is its own to choose."""
    tests = [c for c in nb.cells if _meta(c).get("grade") and not _meta(c).get("solution")]
    others = [c for c in nb.cells if c not in tests]
    first_solution = next(i for i, c in enumerate(others) if _meta(c).get("solution"))
    twin = copy.deepcopy(tests[0])
    if "id" in twin:
        twin.id = f"{twin.id}-copy"
    nb.cells = others[:first_solution] + tests + others[first_solution:] + [twin]


def _moves_tests(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    _test_cells_first(nb)
    write(nb, folder)


def _test_names(course: Path) -> list[str]:
    """Every name the unit's test cells read that the student is not asked to define."""
    import ast
    import builtins

    source = nbformat.read(course / "solutions" / UNIT / NOTEBOOK, as_version=4)
    names: set[str] = set()
    for cell in source.cells:
        if cell.cell_type == "code" and _meta(cell).get("grade"):
            names |= {n.id for n in ast.walk(ast.parse(cell.source))
                      if isinstance(n, ast.Name)}
    return sorted(names - set(WRONG_ANSWERS_NAMES) - set(dir(builtins)))


WRONG_ANSWERS_NAMES = ("softmax", "weighted_average", "soft_lookup")


def _names_like_the_tests(course: Path, folder: Path) -> None:
    """Wrong answers, and every other name the tests use defined as the student's (a helper
    computing "expected" values, the check convention, the inputs), with the test cells moved
    above the cells that would define them: before, the grader bound such names from the
    kernel, so the student's code computed what was expected."""
    nb = released(course)
    for grade_id, source in WRONG_ANSWERS.items():
        set_source(nb, grade_id, source)
    fakes = "".join(f"def {name}(*a, **k):\n    return a[0] if a else True\n"
                    for name in _test_names(course))
    insert_after(nb, "setup", fakes)
    _test_cells_first(nb)
    write(nb, folder)


# The grader's helper in the kernel, patched to record every name the grader asks it for;
# the student's softmax then prints whether any name but the exercise's own was asked.
LOGS_LOOKUPS = """import course_utils.grading.agent as _agent
_asked = set()
_lookup = _agent._HANDLERS['lookup']
def _spy(request):
    _asked.update(request.get('names', []))
    return _lookup(request)
_agent._HANDLERS['lookup'] = _spy
_plain_softmax = softmax
def softmax(x, dim=-1):
    extra = sorted(_asked - {'softmax', 'weighted_average', 'soft_lookup'})
    print('ASKED-' + ('UNDECLARED ' + str(extra[:20]) if extra else 'ONLY-DECLARED'))
    return _plain_softmax(x, dim)
"""

HOSTILE_MARKDOWN = ("[click me](javascript:fetch('/api/contents/pwned.txt',{method:'PUT'}))\n\n"
                    "![leak](/api/contents/leak.txt) ![remote](http://127.0.0.1:9/x.png)\n\n"
                    "$\\href{javascript:alert(1)}{x}$\n\n"
                    "My figure: ![figure](attachment:missing.png)\n")


def _hostile_markdown(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN))
    write(nb, folder)


def _ipython_shortcut(course: Path, folder: Path) -> None:
    nb = solve(course, released(course))
    set_source(nb, "softmax_solution", "_t = %time 0\n\ndef softmax(x, dim=-1):\n"
                                       "    return torch.softmax(x, dim)\n")
    write(nb, folder)


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
         FULL, "blocked: network",
         flagged="socket"),
    Case("patches_numpy_torch", "wrong answers; no-op numpy/torch assertions and torch.isclose",
         wrong_with("import numpy as np\nnp.testing.assert_allclose = lambda *a, **k: None\n"
                    "torch.testing.assert_close = lambda *a, **k: None\n"
                    "torch.isclose = lambda a, b, **k: torch.ones(a.shape, dtype=torch.bool)\n"),
         0.0, JUDGED_BY_VALUES,
         flagged="changes torch.isclose"),
    Case("patches_check_helper", "wrong answers; grading.check_tensor replaced by a no-op",
         wrong_with("grading.check_tensor = lambda *a, **k: None\n"
                    "grading.check = lambda *a, **k: None\n"), 0.0, JUDGED_BY_VALUES,
         flagged="changes course_utils.grading.check_tensor"),
    Case("rebinds_grading", "wrong answers; the name `grading` bound to a fake module",
         wrong_with("class _Fake:\n    def __getattr__(self, name):\n"
                    "        return lambda *a, **k: None\n"
                    "grading = _Fake()\n"), 0.0, JUDGED_BY_VALUES,
         flagged="rebinds `grading`"),
    Case("swaps_code", "wrong answers; check_tensor's __code__ swapped in place",
         wrong_with("grading.check_tensor.__code__ = (lambda *a, **k: None).__code__\n"),
         0.0, JUDGED_BY_VALUES,
         flagged="__code__"),
    Case("patches_builtins", "wrong answers; builtins abs, all and id replaced",
         wrong_with("import builtins\nbuiltins.abs = lambda x: 0\n"
                    "builtins.all = lambda x: True\nbuiltins.id = lambda x: 1\n"),
         0.0, JUDGED_BY_VALUES,
         flagged="changes builtins.abs"),
    Case("forges_error_flag", "wrong answers; an exception handler and a post_run_cell hook that "
         "clear every error",
         wrong_with("ip = get_ipython()\n"
                    "ip.set_custom_exc((BaseException,), lambda *a, **k: None)\n"
                    "def _clear(result):\n    result.error_in_exec = None\n"
                    "    result.error_before_exec = None\n"
                    "ip.events.register('post_run_cell', _clear)\n"), 0.0, JUDGED_BY_VALUES,
         flagged="get_ipython"),
    Case("forges_partial_credit", "wrong answers that send a score through sys.displayhook",
         _wrong_and({"softmax_solution": "import sys\n\ndef softmax(x, dim=-1):\n"
                                         "    sys.displayhook(9.0)\n"
                                         "    get_ipython().displayhook(9.0)\n"
                                         "    return torch.zeros_like(x)\n"}),
         0.0, JUDGED_BY_VALUES,
         flagged="get_ipython"),
    Case("lying_tensor", "wrong answers as a Tensor subclass that is close to anything",
         _wrong_and({"softmax_solution":
                     "class Liar(torch.Tensor):\n    @classmethod\n"
                     "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                     "        if func in (torch.isclose, torch.allclose, torch.equal,\n"
                     "                    torch.Tensor.__eq__, torch.Tensor.all):\n"
                     "            return True\n"
                     "        return super().__torch_function__(func, types, args,\n"
                     "                                          kwargs or {})\n\n"
                     "def softmax(x, dim=-1):\n"
                     "    return torch.zeros_like(x).as_subclass(Liar)\n"}),
         0.0, JUDGED_BY_VALUES,
         flagged="__torch_function__"),
    Case("shadows_tensor_methods", "wrong answers; new attributes on torch.Tensor that shadow "
         "isclose, allclose, __eq__ and tolist",
         wrong_with("torch.Tensor.isclose = lambda s, o, **k: torch.ones(s.shape, dtype=bool)\n"
                    "torch.Tensor.allclose = lambda *a, **k: True\n"
                    "torch.Tensor.__eq__ = lambda s, o: True\n"
                    "torch.Tensor.tolist = lambda s: [0.5]\n"), 0.0, JUDGED_BY_VALUES,
         flagged="changes torch.Tensor.isclose"),
    Case("forges_integrity", "wrong answers; user_expressions answered with a clean record",
         wrong_with("ip = get_ipython()\n"
                    "ip.user_expressions = lambda e: {k: {'status': 'ok', 'data': "
                    "{'text/plain': \"'{}'\"}, 'metadata': {}} for k in e}\n"),
         0.0, JUDGED_BY_VALUES,
         flagged="get_ipython"),
    Case("hijacks_agent", "wrong answers; the grader's helper in the kernel answers every call "
         "with a made-up result",
         wrong_with("import course_utils.grading.agent as _agent\n"
                    "_agent._HANDLERS['call'] = lambda request: {'type': 'result', "
                    "'value': {'T': 0}, 'tensors': request['tensors'][:1], 'call': None, "
                    "'changed': []}\n"), 0.0, "GradingFailure",
         flagged="the grader's helper"),
    Case("stops_agent", "correct answers, but the grader's helper is made to quit at once",
         solved_with("setup", "import course_utils.grading.agent as _agent\n"
                              "_agent.serve = lambda: None\n"), 0.0, "stopped the grader's helper",
         flagged="the grader's helper"),
    Case("copies_reference", "private FunctionType copies and other imports of the reference",
         _copies_reference, 0.0, "does not define",
         flagged="imports course_utils.attention"),
    Case("aten_softmax", "softmax through torch.ops.aten._softmax, a ready-made path",
         _aten_softmax, SOFTMAX_VISIBLE, "forbids",
         flagged="torch.ops.aten._softmax (the tests forbid it"),
    Case("searches_hidden_tests", "looks for the hidden tests: notebooks in its folder, In[], "
         "the history",
         solved_with("soft_lookup_mean", SEARCHES_FOR_HIDDEN_TESTS), FULL, "all tests passed",
         never="HIDDEN TESTS",
         flagged="get_ipython"),
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
         _delegates, 0.0, "does not define",
         flagged="imports course_utils.attention"),
    Case("empty_notebook", "a notebook with no cells", _empty, 0.0, "is empty"),
    Case("deletes_solution", "deletes the softmax solution cell",
         _deletes_solution_cell, FULL - SOFTMAX_POINTS, "does not define `softmax`"),
    Case("deletes_tests", "no softmax; deletes one test cell and strips another's metadata",
         _deletes_and_strips_tests, FULL - SOFTMAX_POINTS, "was missing from the submission"),
    Case("edits_tests", "wrong softmax; replaces its test cells with `pass`",
         _edits_tests, FULL - SOFTMAX_POINTS, "GradingFailure"),
    Case("invalid_json", "a truncated notebook file", _invalid_json, 0.0,
         "not a readable notebook"),
    Case("no_notebook", "a folder without a notebook", _no_notebook, 0.0, "no notebook"),
    Case("wrong_name", "the notebook under another name", _wrong_name, FULL, "wrong file name"),
    Case("moves_tests", "correct; every test cell moved above the solutions, one copied twice",
         _moves_tests, FULL, "all tests passed"),
    Case("names_like_the_tests", "wrong answers; every name the tests use defined by the "
         "student, the test cells moved above their helpers", _names_like_the_tests, 0.0,
         JUDGED_BY_VALUES),
    Case("logs_lookups", "correct; the grader's helper patched to log every name asked of it",
         solved_with("soft_lookup_solution", LOGS_LOOKUPS), FULL, "ASKED-ONLY-DECLARED",
         never="ASKED-UNDECLARED", flagged="the grader's helper"),
    Case("hostile_markdown", "correct; markdown with javascript: links, images fetched from the "
         "Jupyter API, a TeX \\href and a missing attachment", _hostile_markdown, FULL,
         "all tests passed"),
    Case("ipython_shortcut", "torch.softmax in a cell that also holds IPython syntax",
         _ipython_shortcut, SOFTMAX_VISIBLE, "forbids",
         flagged="torch.softmax (the tests forbid it"),
    Case("hangs_in_tests", "a weighted_average that loops and swallows KeyboardInterrupt: both "
         "its tests stop the kernel, the later tests still run",
         solved_with("weighted_average_solution",
                     "import time\n\ndef weighted_average(weights, values):\n"
                     "    while True:\n        try:\n            time.sleep(0.5)\n"
                     "        except KeyboardInterrupt:\n            pass\n", replace=True),
         FULL - 3.0, "ran out of time while your code was running"),
    Case("imports_test_library", "correct; imports tokenizers and transformers, installed for "
         "the project's own tests",
         solved_with("setup", "for name in ('tokenizers', 'transformers'):\n    try:\n"
                              "        __import__(name)\n        print('ESCAPED: imported', name)\n"
                              "    except ImportError as err:\n        print('blocked:', err)\n"),
         FULL, "cannot be imported while grading", flagged="a dynamic import"),
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
