"""Notes for the instructor on what a submission's code uses (course_grader.flags)."""

from __future__ import annotations

import time

import nbformat
import pytest
from conftest import ROOT

from course_grader import flags
from course_grader.autograde import _unit_rules

UNITS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
SOFTMAX = {name: "use exp, max and sum" for name in flags.grading.READY_MADE_SOFTMAX}
# unit 09's rules: PyTorch's softmax, log-softmax and attention
ATTENTION = _unit_rules(ROOT, "09_attention_at_scale")[0]
HIDDEN = ("course_utils.attention", "course_utils.bow")
SETUP = "import torch\nimport torch.nn.functional as F\nfrom course_utils import grading\n"


def notes(source: str, forbidden=SOFTMAX) -> list[str]:
    names = flags.Names()
    flags.flag_source(SETUP, {}, (), names)
    return flags.flag_source(source, forbidden, HIDDEN, names)


def notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    return nb


@pytest.mark.parametrize("unit", UNITS)
def test_the_instructors_solutions_and_the_release_are_not_flagged(unit):
    forbidden, hidden = _unit_rules(ROOT, unit)
    solution = nbformat.read(ROOT / "solutions" / unit / f"{unit}.ipynb", as_version=4)
    release = nbformat.read(ROOT / "exercises" / unit / f"{unit}.ipynb", as_version=4)
    instructor = flags.instructor_cells(solution)
    assert flags.flag_notebook(solution, forbidden, hidden) == []
    assert flags.flag_notebook(solution, forbidden, hidden, instructor) == []
    assert flags.flag_notebook(release, forbidden, hidden, instructor) == []


def test_what_the_tests_forbid_is_read_from_the_source_notebook():
    forbidden, hidden = _unit_rules(ROOT, "00_attention_as_lookup")
    assert set(flags.grading.READY_MADE_SOFTMAX) <= set(forbidden)
    assert forbidden["torch.softmax"] == "use exp, max and sum"
    assert "course_utils.attention" in hidden and "course_utils.grading" not in hidden
    forbidden, _ = _unit_rules(ROOT, "02_seq2seq_rnn")
    assert "torch.nn.functional.cross_entropy" in forbidden   # a tuple named in the notebook


@pytest.mark.parametrize("source, expected", [
    ("def softmax(x, dim=-1):\n    return F.softmax(x, dim)\n", "torch.nn.functional.softmax"),
    ("def softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n", "torch.softmax"),
    ("def softmax(x, dim=-1):\n    return (x * 1).softmax(dim)\n", ".softmax(), i.e."),
    ("def softmax(x, dim=-1):\n    return x.softmax(dim=dim)\n", ".softmax(), i.e."),
    ("from torch.nn.functional import softmax as sm\n\ndef softmax(x, dim=-1):\n"
     "    return sm(x, dim)\n", "torch.nn.functional.softmax"),
    ("import torch as t\nsoftmax = lambda x, dim=-1: t.ops.aten._softmax(x, dim, False)\n",
     "torch.ops.aten._softmax"),
    ("softmax = getattr(torch, 'soft' + 'max')\n", "uses torch.softmax (the tests"),
    ("from course_utils.attention import softmax\n", "imports course_utils.attention.softmax"),
    ("import course_utils.bow as b\n", "imports course_utils.bow"),
    ("m = __import__('course_utils.attention')\n", "imports course_utils.attention, ref"),
    ("m = __import__(name)\n", "dynamic import"),
    ("exec(open('x.py').read())\n", "uses exec"),
    ("f = softmax.__code__\n", "__code__"),
    ("get_ipython().events.register('post_run_cell', print)\n", "the kernel itself"),
    ("grading.check_tensor = print\n", "changes course_utils.grading.check_tensor"),
    ("torch.Tensor.isclose = lambda *a: True\n", "changes torch.Tensor.isclose"),
    ("grading = None\n", "rebinds `grading`"),
    ("import course_utils.grading.agent as a\n", "the grader's helper"),
    ("import subprocess\nsubprocess.run(['ls'])\n", "other processes"),
])
def test_ways_round_a_rule_are_flagged(source, expected):
    found = notes(source)
    assert any(expected in n for n in found), found
    assert all(n.startswith("line ") for n in found)


@pytest.mark.parametrize("source", [
    "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim, keepdim=True))\n"
    "    return e / e.sum(dim, keepdim=True)\n\nalpha = softmax(torch.zeros(3))\n",
    "def softmax(x, dim=-1):\n    return torch.exp(x - torch.logsumexp(x, dim, keepdim=True))\n",
    "import numpy as np\n\ndef weighted_average(w, v):\n"
    "    return torch.einsum('...n,...nd->...d', w, v)\n",
    "import math\nscale = 1 / math.sqrt(64)\n",
    "class Attention(torch.nn.Module):\n    def forward(self, q):\n        return self.proj(q)\n",
])
def test_ordinary_solutions_are_not_flagged(source):
    assert notes(source) == []


SDPA = "torch.nn.functional.scaled_dot_product_attention"


@pytest.mark.parametrize("source, expected", [
    # a star import is noted, and the names it brings in are known by what they are
    ("from torch.nn.functional import *\n\ndef tiled_attention(q, k, v, block_size):\n"
     "    return scaled_dot_product_attention(q, k, v)\n",
     ["imports every name of torch.nn.functional, which holds", f"line 4: uses {SDPA}"]),
    ("from torch import *\ny = nn.functional.softmax(x, -1)\n",
     ["imports every name of torch,", "line 2: uses torch.nn.functional.softmax"]),
    # operator's getters, however they are imported, applied at once or later
    ("import operator\nsdpa = operator.attrgetter("
     "'nn.functional.scaled_dot_product_attention')(torch)\n", [f"line 2: uses {SDPA}"]),
    ("from operator import attrgetter as ag\nget = ag('nn.functional.scaled_dot_product_"
     "attention')\ny = get(torch)(q, k, v)\n",
     ["line 2: looks up 'nn.functional.scaled_dot_product_attention' by name, as in " + SDPA]),
    ("import operator as op\nfunctional = op.attrgetter('functional')\n"
     "y = functional(torch.nn).scaled_dot_product_attention(q, k, v)\n", [f"line 3: uses {SDPA}"]),
    ("getters = [__import__('operator').attrgetter('scaled_dot_product_attention')]\n",
     ["looks up 'scaled_dot_product_attention' by name, as in " + SDPA]),
    ("import operator as op\ny = op.methodcaller('softmax', -1)(x)\n",
     ["line 2: calls .softmax(), i.e. torch.Tensor.softmax"]),
    ("import operator as op\ny = op.methodcaller('scaled_dot_product_attention', q, k, v)(F)\n",
     [f"line 2: uses {SDPA}"]),
    # getattr with a constant name, or one folded from constants
    ("y = getattr(F, 'softmax')(x, -1)\n", ["uses torch.nn.functional.softmax"]),
    ("y = getattr(torch, f'soft{\"max\"}')(x)\n", ["uses torch.softmax"]),
    ("y = getattr(torch, ''.join(['soft', 'max']))(x)\n", ["uses torch.softmax"]),
    ("y = getattr(getattr(torch, 'nn'), 'functional').softmax(x)\n",
     ["uses torch.nn.functional.softmax"]),
    ("y = __builtins__.getattr(torch, 'softmax')(x)\n", ["uses torch.softmax"]),
    ("g = getattr\ny = g(torch, 'softmax')(x)\n", ["line 2: uses torch.softmax"]),
    ("y = getattr(x, 'softmax')(-1)\n", [".softmax(), i.e. torch.Tensor.softmax"]),
    # imports by a constant name
    ("import importlib\nattend = importlib.import_module('torch.nn.functional')"
     ".scaled_dot_product_attention\n", [f"line 2: uses {SDPA}"]),
    ("from importlib import import_module as im\nfunctional = im('torch.nn.functional')\n"
     "y = functional.scaled_dot_product_attention(q, k, v)\n", [f"line 3: uses {SDPA}"]),
    ("y = __import__('torch.nn.functional', fromlist=['softmax']).softmax(x)\n",
     ["uses torch.nn.functional.softmax"]),
    ("y = __import__('torch').nn.functional.softmax(x)\n", ["uses torch.nn.functional.softmax"]),
    ("import importlib\nos_ = importlib.import_module('os')\n", ["line 2: uses os"]),
    # a module by another name, as a value, or from a table of names
    ("functional = torch.nn.functional\ny = functional.scaled_dot_product_attention(q, k, v)\n",
     [f"line 2: uses {SDPA}"]),
    ("def attend(module, q, k, v):\n    return module.scaled_dot_product_attention(q, k, v)\n\n"
     "y = attend(F, q, k, v)\n",
     ["line 4: uses the module torch.nn.functional as a value, which reaches"]),
    ("y = vars(F)['softmax'](x)\n", ["uses torch.nn.functional.softmax", "uses vars"]),
    ("y = F.__dict__['scaled_dot_product_attention'](q, k, v)\n", [f"uses {SDPA}"]),
    ("import sys\ny = sys.modules['torch.nn.functional'].softmax(x)\n",
     ["uses torch.nn.functional.softmax", "uses sys.modules"]),
    # a definition that may never run does not unbind what an import bound
    ("if False:\n    def F():\n        pass\ny = F.scaled_dot_product_attention(q, k, v)\n",
     [f"line 4: uses {SDPA}"]),
    ("setattr(torch, 'exp', lambda x: x)\n", ["changes torch.exp, a library's own attribute"]),
])
def test_lookups_by_a_constant_name_are_flagged_by_the_name_they_reach(source, expected):
    found = notes(source, ATTENTION)
    for text in expected:
        assert any(text in n for n in found), (text, found)


@pytest.mark.parametrize("source", [
    "y = getattr(torch, name)(x)\n",
    "y = getattr(torch, 'SOFTMAX'.lower())(x)\n",
    "import operator\ny = operator.attrgetter(name)(torch)\n",
    "from operator import attrgetter as ag\ny = ag(name)(torch)\n",
    "import operator as op\ny = op.methodcaller(name)(x)\n",
    "import importlib\nm = importlib.import_module(name)\n",
    "from importlib import import_module\nm = import_module(name)\n",
    "m = __import__(name)\n",
    "look = getattr\nitems = [look]\n",
    "setattr(torch, name, print)\n",
])
def test_a_lookup_by_a_computed_name_stays_flagged_as_dynamic_access(source):
    found = notes(source, ATTENTION)
    assert any("computed name" in n or "dynamic import" in n for n in found), found


@pytest.mark.parametrize("source", [
    "def scaled_dot_product_attention(q, k, v):\n    return q\n\n"
    "y = scaled_dot_product_attention(q, k, v)\n",
    "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim, keepdim=True))\n"
    "    return e / e.sum(dim, keepdim=True)\n\nfrom operator import attrgetter\n"
    "best = sorted(beams, key=attrgetter('score'))\n",
    "# torch.softmax and F.scaled_dot_product_attention are forbidden here\n"
    "why = 'torch.softmax is forbidden'\n",
    "shape = getattr(x, 'shape')\ny = getattr(torch, 'exp')(x)\nw = getattr(self, 'proj')\n",
    "import importlib\nroot = importlib.import_module('math').sqrt(2)\n",
    "from math import *\nscale = 1 / sqrt(64)\n",
    "ok = isinstance(x, torch.Tensor) and hasattr(torch, 'softmax')\n",
    "y = x % 3  # 50% of the time\n",
])
def test_harmless_code_that_looks_like_a_lookup_is_not_flagged(source):
    assert notes(source, ATTENTION) == []


def test_every_cell_is_read_however_many_there_are():
    cells = [""] * 500 + ["sm = torch.softmax\n"]
    assert flags.flag_notebook(notebook(SETUP, *cells), SOFTMAX) == [
        "cell #502, line 1: uses torch.softmax (the tests forbid it: use exp, max and sum)"]
    many = notebook(SETUP, *["def f(x):\n    return torch.exp(x)\n"] * 5000,
                    "sm = torch.softmax\n")
    start = time.process_time()
    found = flags.flag_notebook(many, SOFTMAX)
    assert time.process_time() - start < 20   # about 1 s on the lecture CPU
    assert found == ["cell #5002, line 1: uses torch.softmax (the tests forbid it: use exp, "
                     "max and sum)"]


@pytest.mark.parametrize("comment", [200_000, 2_000_000])
def test_every_cell_is_read_whole_and_a_percent_in_a_comment_is_no_magic(comment):
    cell = "# " + "50% " * (comment // 4) + "\nsm = torch.softmax\n"
    assert flags.flag_notebook(notebook(SETUP, cell), SOFTMAX) == [
        "cell #2, line 2: uses torch.softmax (the tests forbid it: use exp, max and sum)"]


def test_what_is_a_magic():
    strings = 'text = """\n%time in a string\n!ls in a string\n"""\nrate = 5 % 3\n'
    shell = "!ls\nrate = 5 % 3  # 60%\n"
    found = flags.flag_notebook(notebook(strings, shell), {})
    assert found == ["cell #2: runs IPython magics or shell commands"]


def test_a_cell_too_large_or_too_deep_to_parse_is_flagged_and_the_next_still_read():
    code = "y = torch.exp(x - x.amax(-1, keepdim=True))\n"
    huge = code * (flags.MAX_PARSED // len(code) + 1)
    cells = [huge, "x = " + "-" * 100_000 + "1\n", "x = " + "+".join(["'a'"] * 200_000) + "\n",
             "sm = torch.softmax\n"]
    found = flags.flag_notebook(notebook(SETUP, *cells), SOFTMAX)
    assert found[0] == (f"cell #2, this cell is too large to check ({len(huge):,} characters "
                        f"of code; cells of up to {flags.MAX_PARSED:,} are read)")
    assert found[1:3] == [f"cell #{i}, this cell is nested too deeply for Python's parser, so "
                          f"its code could not be checked" for i in (3, 4)]
    assert found[3:] == ["cell #5, line 1: uses torch.softmax (the tests forbid it: use exp, "
                         "max and sum)"]


def test_a_long_cell_that_is_not_python_is_not_rewritten_as_ipython():
    long = "x = 1\n" * (flags.MAX_REWRITTEN // 6) + "!ls\nsm = torch.softmax\n"
    assert flags.flag_notebook(notebook(long, "!ls\nsm = torch.softmax\n"), SOFTMAX) == [
        f"cell #1, this cell is not valid Python and too long ({len(long):,} characters) to be "
        f"read as IPython reads it, so its code could not be checked",
        "cell #2, line 2: uses torch.softmax (the tests forbid it: use exp, max and sum)",
        "cell #2: runs IPython magics or shell commands"]


def test_a_deep_lookup_is_dynamic_access_not_a_crash():
    name = " + ".join(["'a'"] * 500)
    found = notes(f"y = getattr(torch, {name})\n", ATTENTION)
    assert any("computed name" in n for n in found), found


def test_past_the_cap_the_forbidden_names_are_kept_and_the_rest_counted():
    cells = [f"import os\nos.getcwd()  # {i}\n" for i in range(100)] + ["y = torch.softmax(x)\n"]
    found = flags.flag_notebook(notebook(SETUP, *cells), SOFTMAX)
    assert len(found) == flags.MAX_NOTES + 1
    assert "cell #102, line 1: uses torch.softmax (the tests forbid it: use exp, max and sum)" \
        in found
    assert found[-1] == f"... and {101 - flags.MAX_NOTES} more"


def test_a_cell_that_claims_to_be_the_instructors_is_read_unless_it_is():
    solution = nbformat.read(ROOT / "solutions" / "00_attention_as_lookup" /
                             "00_attention_as_lookup.ipynb", as_version=4)
    instructor = flags.instructor_cells(solution)
    assert {"setup", "softmax_basic"} <= instructor and "softmax_solution" not in instructor
    nb = notebook(SETUP, "sm = torch.softmax\n", "sm = torch.special.softmax\n",
                  "y = torch.softmax(x, -1)\n")
    nb.cells[0].metadata["nbgrader"] = {"locked": True, "grade_id": "setup"}
    nb.cells[1].metadata["nbgrader"] = {"locked": True, "grade_id": "my_own"}     # forged
    nb.cells[2].metadata["nbgrader"] = {"locked": True, "grade_id": "setup"}      # a copy
    nb.cells[3].metadata["nbgrader"] = {"grade": True, "grade_id": "softmax_basic"}
    assert flags.flag_notebook(nb, SOFTMAX, (), instructor) == [
        "cell my_own, line 1: uses torch.softmax (the tests forbid it: use exp, max and sum)",
        "cell setup, line 1: uses torch.special.softmax (the tests forbid it: use exp, max and "
        "sum)"]


def test_a_notebook_names_its_cells_and_skips_the_instructors():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP + "import os\n"),
                nbformat.v4.new_code_cell("def softmax(x, dim=-1):\n"
                                          "    return F.softmax(x, dim)\n"),
                nbformat.v4.new_code_cell("!cat /etc/passwd\nx = 1\n")]
    nb.cells[0].metadata["nbgrader"] = {"locked": True, "grade_id": "setup"}
    nb.cells[1].metadata["nbgrader"] = {"solution": True, "grade_id": "softmax_solution"}
    found = flags.flag_notebook(nb, SOFTMAX, HIDDEN)
    assert found == [
        "cell softmax_solution, line 2: uses torch.nn.functional.softmax "
        "(the tests forbid it: use exp, max and sum)",
        "cell #3: runs IPython magics or shell commands",
    ]


def test_source_that_is_not_python_or_is_long_is_handled():
    assert notes("def (:\n") == [
        "this cell is not valid Python, even read as IPython reads it, so its code "
        "could not be checked"]
    assert notes("x = 1\n" * 100_000 + "import os\n") == [
        "line 100001: uses os (the operating system)"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"import os\nos.getcwd()  # {i}\n")
                for i in range(100)]
    found = flags.flag_notebook(nb, {}, ())
    assert len(found) == flags.MAX_NOTES + 1 and found[-1].startswith("... and ")


def test_ipython_syntax_does_not_blind_the_flags():
    # one line of IPython syntax used to make the whole cell unreadable to the flags
    source = ("_t = %time 0\n"
              "def softmax(x, dim=-1):\n"
              "    return F.softmax(x, dim)\n")
    assert notes(source) == ["line 3: uses torch.nn.functional.softmax "
                             "(the tests forbid it: use exp, max and sum)"]
    # the body of a cell magic is read too
    assert notes("%%time\ny = torch.softmax(x, -1)\n") == [
        "line 2: uses torch.softmax (the tests forbid it: use exp, max and sum)"]
    # help syntax and shell escapes inside a cell that also holds the shortcut
    assert any("torch.softmax" in n for n in notes("torch.softmax?\n!ls\ny = torch.softmax(x)\n"))


def test_a_cell_that_cannot_be_parsed_is_itself_flagged():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def softmax(x, dim=-1):\n"
                                          "    return F.softmax(x, dim\n")]
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade_id": "softmax_solution"}
    found = flags.flag_notebook(nb, SOFTMAX, HIDDEN)
    assert found == ["cell softmax_solution, this cell is not valid Python, even read as "
                     "IPython reads it, so its code could not be checked"]
