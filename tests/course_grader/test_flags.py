"""Notes for the instructor on what a submission's code uses (course_grader.flags)."""

from __future__ import annotations

import nbformat
import pytest
from conftest import ROOT

from course_grader import flags
from course_grader.autograde import _unit_rules

UNITS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
SOFTMAX = {name: "use exp, max and sum" for name in flags.grading.READY_MADE_SOFTMAX}
HIDDEN = ("course_utils.attention", "course_utils.bow")
SETUP = "import torch\nimport torch.nn.functional as F\nfrom course_utils import grading\n"


def notes(source: str, forbidden=SOFTMAX) -> list[str]:
    aliases: dict[str, str] = {}
    flags.flag_source(SETUP, {}, (), aliases)
    return flags.flag_source(source, forbidden, HIDDEN, aliases)


@pytest.mark.parametrize("unit", UNITS)
def test_the_instructors_solutions_are_not_flagged(unit):
    forbidden, hidden = _unit_rules(ROOT, unit)
    nb = nbformat.read(ROOT / "solutions" / unit / f"{unit}.ipynb", as_version=4)
    assert flags.flag_notebook(nb, forbidden, hidden) == []


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
    ("softmax = getattr(torch, 'soft' + 'max')\n", "attribute looked up by a computed name"),
    ("from course_utils.attention import softmax\n", "imports course_utils.attention.softmax"),
    ("import course_utils.bow as b\n", "imports course_utils.bow"),
    ("m = __import__('course_utils.attention')\n", "dynamic import"),
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


def test_source_that_is_not_python_or_is_huge_is_handled():
    assert notes("def (:\n") == [
        "this cell is not valid Python, even read as IPython reads it, so its code "
        "could not be checked"]
    assert len(notes("x = 1\n" * 100_000 + "import os\n")) <= 1   # read up to a cap
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
        "line 1: uses torch.softmax (the tests forbid it: use exp, max and sum)"]
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
