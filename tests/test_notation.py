r"""README's notation table, held in the code and in the lectures.

**In `course_utils`** (every comment and string constant of every module, docstrings and error
messages included), two rules read off README's "Notation" section:

* a **dimension written as one letter** is one of the table's (B, N, S, T, L); any other size
  has a name (`n_heads`, `n_vocab`, `d_model`, `T_q`). So `(B, h, T, T)`, `(B, T, V)` or
  `(B, T, H)` fail: V is the value matrix, H is kept free, h is an encoder state.
* the letters the table **keeps free** (H, C, D) never stand alone in a comment or docstring.

A shape is a parenthesised, comma-separated group of sizes (names, numbers, `...`, sums and
products of them) with at least one of the table's dimensions in it, or of capital letters
only: `(B, S, d_enc)`, `(N,)`, `(B, S + 5)`, `(M, H)`; prose in brackets is not, nor BERT's
sentence pair `(A, B)`.

**In the lectures' markdown** (the formulas between `$...$` and `$$...$$`, with the text of
`\text{...}`, `\mathrm{...}` and `\mathcal{...}` left out, and the words around them),
one rule per symbol that a lecture has used for something else (`LECTURE_RULES`):

* $L$ is the number of layers: never subscripted, set equal to anything but a number, in an
  exponent, or called a length (the log-sum-exp is $\mathrm{lse}$, a length $T$ or $S$);
* $S$ is the source length: never subscripted or set equal to anything but a number (a state
  is $U_t$);
* $V$ is the value matrix: never a subscript ($p_V$), the end of a list ($\dots, V$), a
  number, a logarithm's argument or a vocabulary;
* $N$ counts examples: an average $\frac{1}{N}$ never runs over examples and positions at
  once, and $N$ is never a number of positions or tokens;
* $e$ is a score: an exponential is $\exp(\cdot)$, never $e^{\cdot}$;
* a score's or a weight's key index is never $l$, a layer's index ($e_{t,u}$, not $e_{t,l}$);
* $k$ is a key: never a kernel width or an offset ($t + k$, $k - 1$, $T/k$, $\log_k$, $k^l$,
  "offset $k$", "$k$ positions");
* the projections of multi-head attention carry their role as a superscript ($W^V_r$), never
  as a subscript ($W_V^r$, $b_O$);
* a token ($x$, $y$) or a decoder state ($s$) is never defined as a sum (an attention output
  is $c$ or $Z$, a running sum $\ell$);
* the kept-free letters $H$, $C$, $D$ never stand alone in a formula, except in a sentence
  that quotes a paper's letters or lists the free ones.

Lecture 00's copy of the table is README's, row for row.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

MODULES = sorted((ROOT / "course_utils").rglob("*.py"))
# t: a step (the table's x_t), so a prefix that ends at it holds t entries: (B, t).
SINGLE_LETTER_DIMS = {"B", "N", "S", "T", "L", "t"}
TABLE_DIMS = {"B", "N", "S", "T", "L", "T_q", "T_k", "d_emb", "d_h", "d_enc", "d_a", "d_k", "d_v",
                                   "d_model", "d_ff", "n_heads", "n_vocab", "n_ctx", "n_layers"}
FREE_LETTERS = ("H", "C", "D")

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
    ("V H + S H + 2 H", 3), ("x_i - m", 0), ("the C content rows", 1), ("2-D maps", 0),
    ("H = d_model", 1), ("m = max_j x_j", 0),
    ("BERT's H", 0), ("the paper's L/H/A", 0), ("d_model, a MiniLM, the CLS token", 0),
])
def test_the_free_letter_rule(text, n):
    assert len(free_letter_faults(text)) == n


def test_the_table_in_readme_names_every_symbol_the_rules_use():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Notation"):]
    table = table[:table.index("\n## ", 1)]
    for symbol in ("$B$", "$N$", "$S$, $T$", "$T_q$, $T_k$", "$L$", "$n_\\text{vocab}$",
                   "$n_\\text{heads}$", "$d_\\text{model}$, $d_\\text{ff}$", "$l$, $r$", "$u$",
                   "$e$", "$m$, $\\ell$", "$\\mathrm{lse}$", "$U_t$, $z_t$", "$x_t$, $y_t$",
                   "$W^Q$, $W^K$, $W^V$, $W^O$", "$s_t$", "$q, k, v$; $Q, K, V$",
                   "$n_\\text{kv}$", "$w$", "$b$", "$\\phi$"):
        assert f"| {symbol} |" in table, symbol
    for letter in ("$H$", "$C$", "$D$"):
        assert letter in table.split("kept free", 1)[1], letter


# ----------------------------------------------------------------------------- lectures

LECTURES = sorted((ROOT / "lectures").glob("*.ipynb"))
NOT_A = r"(?<![\\\w])"  # a letter on its own: not part of a word or of a command (\Sigma)


@dataclass(frozen=True)
class Rule:
    """A symbol's meaning, and the uses that break it: `in_math` is searched in every formula
    (its `\text{...}` blanked), `in_prose` in the markdown around the formulas."""

    symbol: str
    meaning: str
    in_math: str | None = None
    in_prose: str | None = None


SUBSCRIPT = r"(?:_\{[^{}]*\}|_\w)"
LECTURE_RULES = (
    Rule("L", "the number of layers",
         in_math=rf"{NOT_A}L_|{NOT_A}L\s*=(?!\s*\d)|\^\{{(?:[^{{}}]|\{{[^{{}}]*\}})*?{NOT_A}L(?!\w)",
         in_prose=r"(?:length|long)\s+\$L\$"),
    Rule("S", "the source length", in_math=rf"{NOT_A}S_|{NOT_A}S\s*=(?!\s*\d)"),
    Rule("V", "the value matrix",
         in_math=rf"_\{{?V(?!\w)|\\[lc]?dots\s*,?\s*V(?![\w^_])|{NOT_A}V\s*=\s*\d"
                 rf"|\\log\s*V(?!\w)",
         in_prose=r"vocabulary(?: size)?(?: of)?\s+\$V\$|\$V\$\s+(?:words|tokens|symbols)"),
    Rule("N", "a number of examples",
         in_math=r"\\frac\{1\}\{N\}\s*\\sum(?:_\{[^{}]*\}|_\w)?(?:\^\{[^{}]*\}|\^\w)?\s*\\sum",
         in_prose=r"\$N\$\s+(?:\w+\s+){0,2}(?:positions|tokens|words|keys|queries)"),
    Rule("e", "a score (an exponential is \\exp)", in_math=rf"{NOT_A}e\s*\^"),
    Rule("l", "a layer's index, never a key's",
         in_math=rf"{NOT_A}(?:e|\\alpha)_(?:l(?!\w)|\{{[^{{}}]*(?<![A-Za-z\\])l(?![A-Za-z])"
                 r"[^{}]*\})"),
    Rule("k", "a key, never a width or an offset",
         in_math=rf"{NOT_A}k\s*[-+]\s*[\dtuTS(]|[\dtuTS)]\s*[-+/]\s*k(?![\w'])"
                 rf"|\\log_\{{?k|{NOT_A}k\s*\^\s*(?!\{{?\\top)",
         in_prose=r"(?:offset|shift|kernel width)\s+\$k\$|\$k\$\s+(?:positions|places)"),
    Rule("W^Q", "multi-head projections: the role is a superscript",
         in_math=rf"{NOT_A}[Wb]_\{{?[QKVO](?!\w)"),
    Rule("xys", "a token or a decoder state, never a sum",
         in_math=rf"{NOT_A}[xys]{SUBSCRIPT}?\s*=\s*(?:\\frac\{{[^{{}}]*\}}\{{[^{{}}]*\}}\s*)?"
                 r"\\sum"),
)
FREE_IN_MATH = re.compile(rf"{NOT_A}([HCD])(?!\w)")
# A sentence that quotes a paper's letters ("The BERT paper names its sizes L, H, A") or
# lists the free ones may write them.
QUOTES_LETTERS = re.compile(r"paper|kept free")
FORMULA = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.DOTALL)
TEXT_COMMAND = re.compile(r"\\(?:text|mathrm|texttt|textbf|textit|operatorname|mathcal)\{[^{}]*\}")
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z*(\[\x00])|\n\s*\n")


def markdown_faults(markdown: str) -> list[str]:
    """The uses of symbols in a markdown text that break LECTURE_RULES or the free letters."""
    text = re.sub(r"`[^`]*`", "``", markdown)
    faults = [f"{rule.symbol} ({rule.meaning}): ...{m.group(0)}..."
              for rule in LECTURE_RULES if rule.in_prose
              for m in re.finditer(rule.in_prose, text)]
    formulas: list[str] = []

    def hold(match: re.Match) -> str:
        formulas.append(match.group(1) or match.group(2))
        return f"\x00{len(formulas) - 1}\x00"

    for sentence in SENTENCE_END.split(FORMULA.sub(hold, text)):
        quotes = QUOTES_LETTERS.search(sentence)
        for index in map(int, re.findall(r"\x00(\d+)\x00", sentence)):
            formula = " ".join(formulas[index].split())
            math = TEXT_COMMAND.sub("{}", formula)
            faults += [f"{rule.symbol} ({rule.meaning}): ${formula}$"
                       for rule in LECTURE_RULES if rule.in_math and re.search(rule.in_math, math)]
            if not quotes:
                faults += [f"{letter} (kept free): ${formula}$"
                           for letter in FREE_IN_MATH.findall(math)]
    return faults


@pytest.mark.parametrize("lecture", LECTURES, ids=lambda p: p.stem)
def test_the_lectures_formulas_follow_the_notation(lecture):
    cells = nbformat.read(lecture, as_version=4).cells
    faults = [fault for cell in cells if cell.cell_type == "markdown"
              for fault in markdown_faults(cell.source)]
    assert not faults, f"{lecture.name}:\n  " + "\n  ".join(faults)


# The clashes issue 40 found, each as its lecture wrote it, and uses that keep the meaning.
@pytest.mark.parametrize("markdown, symbols", [
    ("store only $L = m + \\log s$", ["L"]),                             # L09: a log-sum-exp
    ("$\\alpha_{\\text{tile}} = e^{\\,Q K_j^\\top / \\sqrt{d_k} - L}$", ["L", "e"]),  # L09
    ("$p = e^{\\,e - m'}$", ["e"]),                                      # L09: Euler's e
    ("the state $S = \\sum_j \\phi(k_j) v_j^\\top$, $S_i = S_{i-1} + \\phi(k_i) v_i^\\top$",
     ["S", "S"]),                                                        # L09
    ("$s = \\sum_j \\exp(x_j - m)$", ["xys"]),                      # L09: a running sum
    ("probabilities $p_1 \\dots p_V$", ["V"]),                          # L06
    ("$y_i = \\sum_r \\sum_j \\alpha^r_{ij}\\, f^r(x_j) + b_O$", ["W^Q", "xys"]),  # L08
    ("$f^r(x) = (x W_V^r + b_V^r)\\, W_O^r$", ["V", "W^Q"]),  # L08: the other spelling
    ("$\\text{to}[l, r] = \\frac{1}{N} \\sum_{b} \\sum_{i \\text{ real}} \\alpha_{bij}$, "
     "averaged over all $N$ real query positions", ["N", "N"]),          # L08
    ("$e_{t,l} = -\\infty$", ["l"]),                                    # L06
    ("$\\alpha_{t't} = \\exp(e_{t't}) / \\sum_{l=1}^{S} \\exp(e_{t'l})$", ["l"]),  # L03
    ("a convolution of kernel width $k$ reaches $\\lceil (T-1)/(k-1) \\rceil$ layers, "
     "$O(T/k)$, dilated $O(\\log_k T)$", ["k", "k", "k", "k"]),          # L05: a width
    ("$PE_t \\cdot PE_{t+k}$ depends on the offset $k$ only", ["k", "k"]),  # L05: an offset
    ("the word $k$ places away", ["k"]),
    ("a sequence of length $L$", ["L"]),
    ("$H = 768$ and $C$ classes", ["H", "C"]),
    # the symbols as the table means them
    ("$L = 6$ layers, $2 L\\, n_\\text{kv}\\, d_k$ bytes, $L w + 1$ positions", []),
    ("$\\mathrm{lse} = m + \\log \\ell$; $U_t = \\sum_{u \\le t} \\phi(k_u)\\, v_u^\\top$", []),
    ("$h_1, \\dots, h_S$ and $p_{t'} = S \\cdot \\sigma(v_p^\\top s)$, $S - 1$ steps", []),
    ("$\\text{head}_r = \\mathrm{softmax}(X W^Q_r (X W^K_r)^\\top) X W^V_r$, $Z = \\alpha V$", []),
    ("$e_{t,u} = q_t^\\top k_u$, $\\alpha^{(l,r)}_{bij}$, $\\exp(e_j - a)$", []),
    ("$q \\cdot k / \\sqrt{d_k}$", []),
    ("$\\theta_i = 10000^{-2i/d_k}$, $k'_u = R_u k_u$, $q^\\top k$, $k^\\top q$", []),
    ("$\\mathcal{L} = -\\frac{1}{N} \\sum_{i=1}^{N} \\log p(y_i \\mid x_i)$", []),
    ("The BERT paper names its sizes $L$ (layers), $H$ (hidden width) and $A$.", []),
])
def test_each_rule_catches_a_clash_and_passes_the_table(markdown, symbols):
    assert [fault.split(" ")[0] for fault in markdown_faults(markdown)] == symbols


def test_lecture_00_copies_readmes_table():
    def table(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("| ")]
    readme = (ROOT / "README.md").read_text()
    notation = readme[readme.index("## Notation"):]
    notation = notation[:notation.index("\n## ", 1)]
    lecture = [c.source for c in nbformat.read(ROOT / "lectures" / "00_attention_as_lookup.ipynb",
                                               as_version=4).cells
               if c.cell_type == "markdown" and c.source.startswith("## 2. Notation")]
    assert len(lecture) == 1 and table(lecture[0]) == table(notation) and len(table(notation)) > 30
