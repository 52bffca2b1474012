"""README's notation table, held in the code: the shapes and formulas that `course_utils` writes
in its comments, docstrings and messages use the table's symbols.

Two rules, read off README's "Notation" section:

* a **dimension written as one letter** is one of the table's (B, N, S, T, L); any other size
  has a name (`n_heads`, `n_vocab`, `d_model`, `T_q`). So `(B, h, T, T)`, `(B, T, V)` or
  `(B, T, H)` fail: V is the value matrix, H is kept free, h is an encoder state.
* the letters the table **keeps free** (H, C, D, m) never stand alone in a formula.

A shape is a parenthesised, comma-separated group of sizes (names, numbers, `...`, sums and
products of them) with at least one of the table's dimensions in it, or of capital letters
only: `(B, S, d_enc)`, `(N,)`, `(B, S + 5)`, `(M, H)`; prose in brackets is not, nor BERT's
sentence pair `(A, B)`. The scan reads every comment and every string
constant (docstrings and error messages included) of every module of `course_utils`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
from conftest import ROOT

MODULES = sorted((ROOT / "course_utils").rglob("*.py"))
# t: a step (the table's x_t), so a prefix that ends at it holds t entries: (B, t).
SINGLE_LETTER_DIMS = {"B", "N", "S", "T", "L", "t"}
TABLE_DIMS = {"B", "N", "S", "T", "L", "T_q", "T_k", "d_emb", "d_h", "d_enc", "d_a", "d_k", "d_v",
                                   "d_model", "d_ff", "n_heads", "n_vocab", "n_ctx", "n_layers"}
FREE_LETTERS = ("H", "C", "D", "m")

_SIZE = r"(?:\.\.\.|[A-Za-z_][A-Za-z_0-9]*|\d+)"
# One size of a shape: "B", "2 d_emb", "S + 5", "d_model // n_heads" (no brackets inside).
SIZE = re.compile(rf"(?:\d+ )?{_SIZE}(?: ?(?://|[-+*/]) ?{_SIZE})*")
GROUP = re.compile(r"\(([^()]*)\)")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
# BERT's two sentences of a pair are A and B, as in the paper: a tuple of texts, not a shape.
SENTENCE_PAIRS = {"A, B", "A, B, is_next"}
FREE = re.compile(rf"(?<![\w.'\"`/\\-])({'|'.join(FREE_LETTERS)})(?![\w'\"`(-])")


def texts(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose, strings): (line, text) of every comment and docstring of a module, and of every
    other string constant (messages, labels)."""
    source = path.read_text()
    prose = [(tok.start[0], tok.string) for tok in
             tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    docstrings, tree = set(), ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                docstrings.add(id(first.value))
                prose.append((first.lineno, first.value.value))
    strings = [(node.lineno, node.value) for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and id(node) not in docstrings]
    return prose, strings


def shape_faults(text: str) -> list[str]:
    """The one-letter sizes outside the table in the shapes that `text` writes."""
    faults = []
    for match in GROUP.finditer(text):
        sizes = [size.strip() for size in match.group(1).split(",")]
        if sizes[-1] == "":
            sizes.pop()  # "(N,)"
        if (len(match.group(1).split(",")) < 2 or not all(SIZE.fullmatch(s) for s in sizes)
                or ", ".join(sizes) in SENTENCE_PAIRS):
            continue
        names = IDENTIFIER.findall(match.group(1))
        if not TABLE_DIMS.intersection(names) and not all(
                len(name) == 1 and name.isupper() for name in names):
            continue  # a tuple of values or of names, not a shape
        faults += [f"{name} in {match.group(0)}" for name in names
                   if len(name) == 1 and name not in SINGLE_LETTER_DIMS]
    return faults


def free_letter_faults(text: str) -> list[str]:
    """The free letters standing alone in `text`, except where a paper's letter is quoted as
    such ("BERT's H", "the paper's L/H/A")."""
    return [f"{m.group(1)} in ...{text[max(0, m.start() - 25):m.end() + 25]}..."
            for m in FREE.finditer(text) if not text[:m.start()].endswith("'s ")]


def faults_of(path: Path) -> list[str]:
    """Shapes everywhere; free letters in comments and docstrings (a message may quote data,
    such as the gender code "m")."""
    prose, strings = texts(path)
    return [f"{path.relative_to(ROOT)}:{line}: {fault}" for line, text in prose + strings
            for fault in shape_faults(text)] + \
           [f"{path.relative_to(ROOT)}:{line}: {fault}" for line, text in prose
            for fault in free_letter_faults(text)]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT / "course_utils")))
def test_shapes_and_formulas_follow_the_notation_table(path):
    assert faults_of(path) == []


@pytest.mark.parametrize("text, faults", [
    ("logits (B, T, V)", ["V in (B, T, V)"]),
    ("# (B, h, T, T) maps", ["h in (B, h, T, T)"]),
    ("x (B, T, H)", ["H in (B, T, H)"]),
    ("head_mask (L, A)", ["A in (L, A)"]),
    ("h (M, H), probs (V,)", ["M in (M, H)", "H in (M, H)", "V in (V,)"]),
    ("weights (B, n_heads, T_q, T_k), context (B, S, d_enc), ids (N,)", []),
    ("(B, S + 5) and (2, 14) and (q, k) and (rows = queries, keys)", []),
    ("W_o (n_vocab, 2 d_emb), per head (B, n_heads, T, d_model // n_heads)", []),
])
def test_the_shape_rule_reads_shapes_and_passes_prose(text, faults):
    assert shape_faults(text) == faults


@pytest.mark.parametrize("text, n", [
    ("V H + S H + 2 H", 3), ("x_i - m", 1), ("the C content rows", 1), ("2-D maps", 0),
    ("H = d_model", 1), ("m = max_j x_j", 1),
    ("BERT's H", 0), ("the paper's L/H/A", 0), ("d_model, a MiniLM, the CLS token", 0),
])
def test_the_free_letter_rule(text, n):
    assert len(free_letter_faults(text)) == n


def test_the_table_in_readme_names_every_symbol_the_rules_use():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Notation"):]
    table = table[:table.index("\n## ", 1)]
    for symbol in ("$B$", "$N$", "$S$, $T$", "$T_q$, $T_k$", "$L$", "$n_\\text{vocab}$",
                   "$n_\\text{heads}$", "$d_\\text{model}$", "$l$, $r$"):
        assert symbol in table, symbol
    for letter in ("$H$", "$C$", "$D$", "$m$"):
        assert letter in table.split("kept free", 1)[1], letter
