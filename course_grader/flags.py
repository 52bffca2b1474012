"""Notes for the instructor about what a submission's code uses, read from its source.

The tests block ready-made functions while they call a student's code (`grading.forbidden`),
but a student's kernel is the student's: a name can be reached in ways no block foresees.
So the grader also reads the student's cells, every one and each whole, without running
them, and notes

* every use of a name that the unit's tests forbid (torch.softmax, F.cross_entropy, ...),
  through an alias (`import torch.nn.functional as F`, `sm = F.softmax`), an import, a star
  import (`from torch.nn.functional import *`, itself noted), a method (`x.softmax`), or a
  lookup by a constant name (`getattr(torch, "soft" + "max")`,
  `operator.attrgetter("nn.functional.softmax")(torch)`, `importlib.import_module(...)`);
* every import of a course_utils module that holds reference code, which the sandbox hides;
* code that reaches around the language: lookups and imports by a computed name, exec/eval,
  frames, code objects, the kernel itself, files, processes and the network;
* a cell that cannot be read (not Python, or too large or too deeply nested to parse).

A note is not a verdict; scores come from the tests alone. Notes go to the status file and
the class report, where the instructor decides. Code hidden well enough (a string decoded at
run time and passed to getattr, say) is flagged only as dynamic access, not by name.

    flags.forbidden_names(solution_notebook)     -> {"torch.softmax": "use exp, max and sum"}
    flags.instructor_cells(solution_notebook)    -> frozenset({"setup", "softmax_basic", ...})
    flags.flag_notebook(submitted_nb, forbidden, hidden, instructor)
                                                 -> ["cell softmax_solution, line 2: ..."]
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

import nbformat

from course_utils import grading

# Names whose use says the code reaches around the language or out of the notebook.
REACHING_AROUND = {
    "__import__": "a dynamic import", "importlib": "a dynamic import",
    "exec": "exec", "eval": "eval", "compile": "compiled code",
    "getattr": "an attribute looked up by a computed name",
    "setattr": "an attribute set by a computed name",
    "delattr": "an attribute deleted by a computed name",
    "operator.attrgetter": "an attribute looked up by a computed name",
    "operator.methodcaller": "a method called by a computed name",
    "globals": "the notebook's global variables", "vars": "an object's variables",
    "sys.modules": "the table of loaded modules", "sys._getframe": "the call stack",
    "inspect": "introspection (inspect)", "gc": "the garbage collector's objects",
    "ctypes": "raw memory (ctypes)", "builtins": "the builtins", "__builtins__": "the builtins",
    "get_ipython": "the kernel itself", "IPython": "the kernel itself",
    "torch.ops": "PyTorch's operator table", "torch._C": "PyTorch's C internals",
    "open": "files", "os": "the operating system", "pathlib": "files", "shutil": "files",
    "subprocess": "other processes", "socket": "the network", "urllib": "the network",
    "requests": "the network",
    "course_utils.grading.agent": "the grader's helper in the kernel",
    "course_utils.grading.wire": "the grader's helper in the kernel",
}
DUNDER_ATTRIBUTES = {"__code__", "__globals__", "__closure__", "__dict__", "__class__",
                     "__subclasses__", "__torch_function__", "__self__", "__func__"}
# The functions that look a name up by a string, by what they do with it; importing them is
# no note, using them is: by the name they reach when the string is a constant, as dynamic
# access when it is not.
LOOKUPS = {"getattr": "getattr", "setattr": "setattr", "delattr": "setattr",
           "importlib.import_module": "import", "__import__": "__import__",
           "operator.attrgetter": "attrgetter", "operator.methodcaller": "methodcaller"}
GETTER = ":"   # bound to a getter: "attrgetter:nn.functional" (never a module's path)
# A cell with more than MAX_PARSED characters of code (comment lines aside) is flagged, not
# parsed: 2 MB of dense code take seconds and half a gigabyte to parse, and a submission may
# hold 20 MB. IPython's rewriting is slower still (4 s per MB): a cell that is not Python is
# read as IPython reads it up to MAX_REWRITTEN characters. MAX_NOTES notes are shown per
# notebook (those about forbidden names first), then how many more there were.
MAX_PARSED, MAX_REWRITTEN, MAX_NOTES, MAX_DEPTH = 2_000_000, 500_000, 40, 60
# What IPython rewrites: magics, shell escapes and help at the start of a logical line or
# after `=` (`x = %time f()`), help after a name (`f?`), pasted prompts, an indented cell.
_IPYTHON_SYNTAX = re.compile(r"^[ \t]*(?:[%!?]|>>>|In \[)|\?[ \t]*$|=[ \t]*[%!]|\A\s*^[ \t]+\S",
                             re.MULTILINE)
_CONSTANT_TUPLES = {"READY_MADE_SOFTMAX": grading.READY_MADE_SOFTMAX}


def _string_tuples(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """NAME = ("a", "b") assignments: the lists of names a test cell forbids."""
    found = dict(_CONSTANT_TUPLES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
                found[node.targets[0].id] = value
    return found


def forbidden_names(nb: nbformat.NotebookNode) -> dict[str, str]:
    """{dotted name: the reason} for every name the notebook's instructor cells pass to
    grading.forbidden (as strings, or as a tuple named in the same notebook or in grading)."""
    trees = [_parse(c.source).tree for c in nb.cells if c.cell_type == "code"]
    trees = [t for t in trees if t is not None]
    tuples: dict[str, tuple[str, ...]] = {}
    for tree in trees:
        tuples.update(_string_tuples(tree))
    names: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _plain_path(node.func).split(".")[-1]
                    == "forbidden"):
                continue
            reason = next((k.value.value for k in node.keywords if k.arg == "reason"
                           and isinstance(k.value, ast.Constant)), "")
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.setdefault(arg.value, reason)
                elif isinstance(arg, ast.Starred):
                    key = _plain_path(arg.value).split(".")[-1]
                    for name in tuples.get(key, ()):
                        names.setdefault(name, reason)
    return names


def instructor_cells(nb: nbformat.NotebookNode) -> frozenset[str]:
    """The grade_ids of a source notebook's code cells that are the instructor's (test cells
    and read-only set-up cells): in a submission, nbgrader puts their source back, so what a
    student wrote there never runs. Any other cell of a submission is read as the student's,
    whatever its metadata claims."""
    ids = set()
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id") and not meta.get("solution") \
                and (meta.get("grade") or meta.get("locked")):
            ids.add(meta["grade_id"])
    return frozenset(ids)


@functools.lru_cache(maxsize=1)
def _transformer():
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()


def transform_ipython(source: str) -> str:
    """`source` as IPython runs it: magics (`x = %time f()`), shell escapes and `?` help
    turned into the plain Python calls they stand for (`get_ipython().run_line_magic(...)`)."""
    try:
        return _transformer().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython cannot read it either; parse it as it is
        return source


@dataclass
class Parsed:
    """A cell's source read as IPython runs it: its tree (None if it could not be read, and
    `problem` says why) and whether it needed IPython's rewriting (magics, shell, help)."""
    tree: ast.Module | None
    magic: bool = False
    problem: str = ""
    offset: int = 0   # the lines before the tree's first (a cell magic's own line)


def _parse(source: str) -> Parsed:
    """Plain Python first: a cell that parses as Python holds no magic (a `%` or `!` in a
    comment or a string is not one), and most cells are read without IPython's rewriting.
    Only a cell that does not, and holds what looks like IPython's syntax, is rewritten."""
    size = _code_size(source)
    if size > MAX_PARSED:
        return Parsed(None, problem=f"this cell is too large to check ({size:,} characters "
                                    f"of code; cells of up to {MAX_PARSED:,} are read)")
    text, magic = source, False
    if text.lstrip().startswith("%%"):   # a cell magic (%%time, %%capture): read its body
        text, magic = text.lstrip().partition("\n")[2], True
    offset = source[:len(source) - len(text)].count("\n")
    try:
        try:
            return Parsed(ast.parse(text), magic, offset=offset)
        except SyntaxError:
            if not _IPYTHON_SYNTAX.search(text):
                raise
            if len(text) > MAX_REWRITTEN:
                return Parsed(None, magic, f"this cell is not valid Python and too long "
                                           f"({len(text):,} characters) to be read as IPython "
                                           f"reads it, so its code could not be checked")
            rewritten = transform_ipython(text)
            if rewritten == text:
                raise
            return Parsed(ast.parse(rewritten), True, offset=offset)
    except (SyntaxError, ValueError):
        return Parsed(None, magic, "this cell is not valid Python, even read as IPython "
                                   "reads it, so its code could not be checked")
    except (MemoryError, RecursionError):
        return Parsed(None, magic, "this cell is nested too deeply for Python's parser, so "
                                   "its code could not be checked")


def _code_size(source: str) -> int:
    """The characters of a cell that are not comment lines: what parsing it costs."""
    if len(source) <= MAX_PARSED:
        return len(source)
    return len(source) - sum(len(line) for line in source.splitlines()
                             if line.lstrip().startswith("#"))


def _plain_path(node: ast.AST) -> str:
    """'a.b.c' for the expression a.b.c; '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _fold(node: ast.AST, depth: int = 0) -> str | None:
    """The value of a string expression made of constants ('soft' + 'max', f'{"soft"}max',
    ''.join(['soft', 'max'])); None for anything computed at run time."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _fold(node.left, depth + 1), _fold(node.right, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_fold(v.value if isinstance(v, ast.FormattedValue) and v.conversion == -1
                       and v.format_spec is None else v, depth + 1) for v in node.values]
        return None if None in parts else "".join(parts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "join" and len(node.args) == 1 and not node.keywords \
            and isinstance(node.args[0], ast.List | ast.Tuple):
        sep = _fold(node.func.value, depth + 1)
        parts = [_fold(e, depth + 1) for e in node.args[0].elts]
        return None if sep is None or None in parts else sep.join(parts)
    return None


@dataclass
class Names:
    """What the names of a notebook stand for, as its cells so far bound them: imports, star
    imports, and assignments of a module's path (`F2 = torch.nn.functional`) or of a lookup
    function (`g = getattr`, `ag = operator.attrgetter("nn")`)."""
    bound: dict[str, str] = field(default_factory=dict)   # name -> dotted path, or a getter
    imported: set[str] = field(default_factory=set)       # the names an import statement bound

    def roots(self) -> set[str]:
        """The first parts of the modules' paths: what `torch.x` or `F.x` starts from."""
        return {p.split(".")[0] for p in self.bound.values()
                if GETTER not in p and p not in LOOKUPS} | {"torch", "builtins"}


class _CellReader:
    """The notes on one cell's tree, read against the unit's rules; the cell's imports and
    assignments update the notebook's `names` for the cells after it."""

    FORBIDDEN, HIDDEN, OTHER = 0, 1, 2   # ranks: the notes kept first when there are many

    def __init__(self, source: str, parsed: Parsed, forbidden: dict[str, str],
                 hidden: tuple[str, ...], names: Names) -> None:
        self.source, self.forbidden, self.hidden, self.names = source, forbidden, hidden, names
        self.offset = parsed.offset
        self.roots = names.roots()
        self.methods = {n.rsplit(".", 1)[-1]: n for n in forbidden if ".Tensor." in n}
        # a module that holds a forbidden function (not a class: torch.Tensor is used as a
        # value all the time): passed around as a value, it reaches it under other names
        self.holders = {}
        for name in forbidden:
            parts = name.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                if not parts[cut - 1][:1].isupper():
                    self.holders.setdefault(".".join(parts[:cut]), name)
        self.notes: list[tuple[int, str]] = []
        self.seen: set[str] = set()
        self.done: set[int] = set()   # nodes read with the call around them (getattr's name)
        self.operands: set[int] = set()   # objects a lookup by a constant name reads from
        # the names a note can start from: any other plain name is the student's own
        self.firsts = {n.split(".")[0] for n in (*forbidden, *REACHING_AROUND)} | {
            "__builtins__"}
        self.binders: list[ast.AST] = []    # imports, definitions, assignments to a name
        self.uses: list[ast.AST] = []       # imports, calls, names, attributes, items
        self.inner: set[int] = set()        # the x.y of x.y.z: read with the whole chain
        self.called: set[int] = set()       # the functions of calls
        self.assigned: set[int] = set()     # the values of assignments to a plain name
        self._sort(parsed.tree)

    def _sort(self, tree: ast.AST) -> None:
        """One breadth-first walk over the tree (a call before its function, an earlier
        statement before a later one), sorting out the nodes the two passes read."""
        nodes, skip = [tree], (ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)
        for node in nodes:
            for name in node._fields:
                value = getattr(node, name, None)
                if value.__class__ is list:
                    nodes.extend([v for v in value if isinstance(v, ast.AST)])
                elif isinstance(value, ast.AST) and not isinstance(value, skip):
                    nodes.append(value)
            kind = node.__class__
            if kind is ast.Name or kind is ast.Subscript:
                self.uses.append(node)
            elif kind is ast.Attribute:
                self.uses.append(node)
                self.inner.add(id(node.value))
            elif kind is ast.Call:
                self.uses.append(node)
                self.called.add(id(node.func))
            elif kind is ast.Import or kind is ast.ImportFrom:
                self.binders.append(node)
                self.uses.append(node)
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
                self.binders.append(node)
            elif _assigned_name(node):
                self.binders.append(node)
                self.assigned.add(id(node.value))

    def note(self, node: ast.AST, key: str, text: str, rank: int = OTHER) -> None:
        if key == "get_ipython" and key not in self.source:
            return   # IPython's own rewriting of a magic: noted once as a magic instead
        if key not in self.seen:  # one note per thing used, at its first line
            self.seen.add(key)
            line = getattr(node, "lineno", None)
            where = f"line {line + self.offset}" if line is not None else "line ?"
            self.notes.append((rank, f"{where}: {text}"))

    # ------------------------------------------------------------ what names stand for

    def path(self, node: ast.AST, depth: int = 0) -> str:
        """What an expression stands for: 'torch.nn.functional.softmax' for F.softmax once
        `import torch.nn.functional as F` (or getattr(F, 'softmax')); 'x.softmax' for an
        attribute of a plain name x; '?.softmax' for one of a computed value; a getter
        ('attrgetter:nn.functional'); '?' for anything else."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            base = self.names.bound.get(node.id, node.id)
            base = "builtins" if base == "__builtins__" else base
        elif depth > MAX_DEPTH:
            base = "?"
        elif isinstance(node, ast.Call):
            base = self._call_value(node, depth + 1)
        elif isinstance(node, ast.Subscript):
            base = self._item_value(node, depth + 1)
        else:
            base = "?"
        if GETTER in base and parts:
            base = "?"
        path = ".".join([base, *reversed(parts)])
        plain = path.removeprefix("builtins.")
        return plain if plain in LOOKUPS else path

    def _call_value(self, node: ast.Call, depth: int) -> str:
        """What a call returns, where it is a lookup by a constant name."""
        function = self.path(node.func, depth)
        if GETTER in function:   # a getter applied: attrgetter("nn.functional")(torch)
            kind, _, names = function.partition(GETTER)
            if kind == "attrgetter" and node.args and "," not in names:
                return f"{self.path(node.args[0], depth)}.{names}"
            return "?"
        kind, args = LOOKUPS.get(function), node.args
        if kind == "getattr" and len(args) >= 2:
            name = _fold(args[1])
            return "?" if name is None else f"{self.path(args[0], depth)}.{name}"
        if kind in ("import", "__import__") and args:
            name = _fold(args[0])
            if name is None:
                return "?"
            return name if kind == "import" or _has_fromlist(node) else name.split(".")[0]
        if kind in ("attrgetter", "methodcaller") and args:
            names = [_fold(a) for a in (args if kind == "attrgetter" else args[:1])]
            return "?" if None in names else f"{kind}{GETTER}{','.join(names)}"
        return "?"

    def _item_value(self, node: ast.Subscript, depth: int) -> str:
        """sys.modules['torch'], vars(F)['softmax'], F.__dict__['softmax'] by their paths."""
        key = _fold(node.slice)
        if key is None:
            return "?"
        value = node.value
        if isinstance(value, ast.Call) and len(value.args) == 1 \
                and self.path(value.func, depth) in ("vars", "builtins.vars"):
            return f"{self.path(value.args[0], depth)}.{key}"
        owner = self.path(value, depth)
        if owner == "sys.modules":
            return key
        return owner[:-len(".__dict__")] + "." + key if owner.endswith(".__dict__") else "?"

    # ------------------------------------------------------------ binding names

    def bind(self) -> None:
        """Record what the cell's imports, star imports, definitions and assignments bind."""
        for node in self.binders:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    self._bind(name, alias.name if alias.asname else name, imported=True)
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                for alias in node.names:
                    if alias.name == "*":
                        for name, path in self._star_names(module):
                            self._bind(name, path, imported=False)
                    else:
                        self._bind(alias.asname or alias.name, f"{module}.{alias.name}",
                                   imported=True)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self._unbind(node.name)   # the student's own softmax is not torch's
            elif _assigned_name(node):
                name, path = _assigned_name(node), self.path(node.value)
                if GETTER in path or path in LOOKUPS or (
                        not path.startswith("?") and path.split(".")[0] in self.roots):
                    self._bind(name, path, imported=False)
                else:
                    self._unbind(name)

    def _bind(self, name: str, path: str, imported: bool) -> None:
        self.names.bound[name] = path
        if imported:
            self.names.imported.add(name)
        if GETTER not in path and path not in LOOKUPS:
            self.roots.add(path.split(".")[0])

    def _unbind(self, name: str) -> None:
        # a name an import bound stays bound: a definition of it that never runs
        # (`if False: def F(): ...`) must not hide what F.softmax is
        if name not in self.names.imported:
            self.names.bound.pop(name, None)

    def _star_names(self, module: str) -> list[tuple[str, str]]:
        """The names `from module import *` brings in that lead to a forbidden function."""
        found = {}
        for name in self.forbidden:
            if name.startswith(module + "."):
                first = name[len(module) + 1:].split(".")[0]
                if not first.startswith("_"):
                    found[first] = f"{module}.{first}"
        return sorted(found.items())

    # ------------------------------------------------------------ checking uses

    def check(self) -> None:
        """Note what the cell's imports, lookups and references reach."""
        firsts, bound = self.firsts, self.names.bound
        for node in self.uses:   # breadth first: a call comes before its function
            kind = node.__class__
            if kind is ast.Name and node.id not in firsts and node.id not in bound:
                continue   # the student's own name, which nothing here can be about
            if kind is ast.Name or kind is ast.Attribute or kind is ast.Subscript:
                if id(node) not in self.inner and id(node) not in self.done:
                    self._check_reference(node)
            elif kind is ast.Call:
                self._check_call(node)
            else:
                self._check_import(node)

    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._check_module(alias.name, node)
            return
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name != "*":
                self._check_module(f"{module}.{alias.name}", node)
                continue
            self._check_module(module, node)
            held = [n for n in self.forbidden if n.startswith(module + ".")]
            if held:
                shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if held[3:] else "")
                self.note(node, "*" + module, f"imports every name of {module}, which holds "
                          f"{shown} (the tests forbid them: {self.forbidden[held[0]]})",
                          self.FORBIDDEN)

    def _check_module(self, full: str, node: ast.AST) -> None:
        """An import of `full` (a statement, or importlib.import_module with its name)."""
        if full.startswith("course_utils") and any(
                full == h or full.startswith(h + ".") for h in self.hidden):
            self.note(node, full, f"imports {full}, reference code the graded kernel cannot "
                                  f"see", self.HIDDEN)
        elif full not in LOOKUPS and full not in ("importlib", "operator"):
            self._check_path(full, node)   # the lookups are read where they are used

    def _check_call(self, node: ast.Call) -> None:
        """A lookup by name: the name it reaches if the string is a constant, else noted
        as dynamic access."""
        function = self.path(node.func)
        if GETTER in function:   # a getter applied to an object: what it reaches there
            kind, _, names = function.partition(GETTER)
            for name in names.split(",") if node.args else ():
                self._check_path(f"{self.path(node.args[0])}.{name}", node)
                self.operands.add(id(node.args[0]))
            return
        kind = LOOKUPS.get(function)
        if function in ("vars", "hasattr") and node.args:
            self.operands.add(id(node.args[0]))   # vars(F)['softmax'] is read as F.softmax
        if kind is None:
            return
        if kind in ("attrgetter", "methodcaller"):
            names = [_fold(a) for a in (node.args if kind == "attrgetter" else node.args[:1])]
        else:
            names = [_fold(a) for a in node.args[1 if kind in ("getattr", "setattr") else 0:][:1]]
        if not names or None in names:
            return   # a computed name: the function itself is noted as dynamic access
        self.done.add(id(node.func))
        if kind in ("getattr", "setattr"):
            self.operands.add(id(node.args[0]))
        if kind in ("import", "__import__"):
            self._check_module(names[0], node)
        elif kind == "getattr":
            self._check_path(self.path(node), node)
        elif kind == "setattr":
            owner = self.path(node.args[0])
            if owner.split(".")[0] in self.roots:
                self.note(node, f"={owner}.{names[0]}", f"changes {owner}.{names[0]}, a "
                                                        f"library's own attribute")
        else:
            for name in names:   # a getter, wherever it is applied: the names it can reach
                self._check_ending(name, node, method=kind == "methodcaller")

    def _check_reference(self, node: ast.Name | ast.Attribute | ast.Subscript) -> None:
        path = self.path(node)
        if isinstance(node.ctx, ast.Store | ast.Del):
            root = path.split(".")[0]
            if isinstance(node, ast.Name):
                if node.id in self.names.imported:
                    self.note(node, "=" + node.id, f"rebinds `{node.id}`, which an import "
                                                   f"bound to {self.names.bound[node.id]}")
            elif root in self.roots:
                self.note(node, "=" + path, f"changes {path}, a library's own attribute")
            return
        if path == "?":
            return
        self._check_path(path, node)
        holder = self.holders.get(path)
        key = id(node)
        if holder and path.split(".")[0] in self.roots and key not in self.called \
                and key not in self.assigned and key not in self.operands:
            self.note(node, "value:" + path, f"uses the module {path} as a value, which "
                      f"reaches {holder} under another name (the tests forbid it: "
                      f"{self.forbidden[holder]})", self.FORBIDDEN)

    def _check_path(self, path: str, node: ast.AST) -> None:
        """Note `path` if the tests forbid it (or what holds it), if it is a forbidden
        Tensor method of a value, or if it reaches around the language."""
        parts = path.split(".")
        attr = parts[-1]
        if len(parts) > 1 and attr in self.methods and parts[0] not in self.roots:
            name = self.methods[attr]
            self.note(node, name, f"calls .{attr}(), i.e. {name} (the tests forbid it: "
                                  f"{self.forbidden[name]})", self.FORBIDDEN)
        if len(parts) > 1 and attr in DUNDER_ATTRIBUTES:
            self.note(node, attr, f"uses {attr} (reaches inside functions or objects)")
        if parts[0] not in self.firsts:
            return
        prefixes = [".".join(parts[:cut]) for cut in range(1, len(parts) + 1)]
        name = next((p for p in prefixes if p in self.forbidden), None)
        if name is not None:
            self.note(node, name, f"uses {name} (the tests forbid it: "
                                  f"{self.forbidden[name]})", self.FORBIDDEN)
            return
        name = next((p for p in prefixes if p in REACHING_AROUND), None)
        if name is not None:
            self.note(node, name, f"uses {path} ({REACHING_AROUND[name]})")

    def _check_ending(self, name: str, node: ast.AST, method: bool) -> None:
        """A getter's name, applied to something not known here: the forbidden functions
        whose paths end with it."""
        if method and name in self.methods:
            self._check_path("?." + name, node)
            return
        for forbidden in self.forbidden:
            if forbidden == name or forbidden.endswith("." + name):
                self.note(node, forbidden, f"looks up {name!r} by name, as in {forbidden} "
                          f"(the tests forbid it: {self.forbidden[forbidden]})", self.FORBIDDEN)
                return


def _assigned_name(node: ast.AST) -> str:
    """The plain name an assignment binds (`x = ...`, `(x := ...)`); '' for any other node."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 \
            and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
        return node.target.id
    return ""


def _has_fromlist(node: ast.Call) -> bool:
    """Whether __import__(...) names a fromlist (and so returns the last module, not the
    first of the dotted name)."""
    given = [k.value for k in node.keywords if k.arg == "fromlist"] + node.args[3:4]
    return any(not (isinstance(v, ast.Constant) and not v.value)
               and not (isinstance(v, ast.List | ast.Tuple) and not v.elts) for v in given)


def _read(source: str, forbidden: dict[str, str], hidden: tuple[str, ...],
          names: Names) -> tuple[Parsed, list[tuple[int, str]]]:
    """A cell's parse and its ranked notes; `names` is updated with what the cell binds."""
    parsed = _parse(source)
    if parsed.tree is None:
        return parsed, [(_CellReader.HIDDEN, parsed.problem)]
    reader = _CellReader(source, parsed, forbidden, hidden, names)
    try:
        reader.bind()
        reader.check()
    except Exception as err:  # noqa: BLE001 - a cell the flags cannot read stops no grading
        reader.notes.append((_CellReader.HIDDEN, f"this cell could not be checked to the end "
                                                 f"({type(err).__name__})"))
    return parsed, reader.notes


def flag_source(source: str, forbidden: dict[str, str], hidden_modules: Iterable[str] = (),
                names: Names | None = None) -> list[str]:
    """The notes for one cell's source. `names` carries what the earlier cells bound (their
    imports and assignments) and is updated with this cell's."""
    _, notes = _read(source, forbidden, tuple(hidden_modules),
                     Names() if names is None else names)
    return [text for _, text in notes]


def flag_notebook(nb: nbformat.NotebookNode, forbidden: dict[str, str],
                  hidden_modules: Iterable[str] = (),
                  instructor: Collection[str] | None = None) -> list[str]:
    """Notes for every cell of a submission that the student wrote or could edit, in
    notebook order (at most MAX_NOTES, the forbidden names first, then how many more).

    `instructor`: the grade_ids of the unit's instructor cells (`instructor_cells` of the
    source notebook); the first cell with each is the instructor's, and only its imports
    are read. Without it, the submission's own metadata says which cells are locked, which
    a student can forge."""
    names, hidden, claimed = Names(), tuple(hidden_modules), set()
    found: list[tuple[int, str]] = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id")
        if instructor is None:
            theirs = meta.get("locked") or (meta.get("grade") and not meta.get("solution"))
        else:
            theirs = grade_id in instructor and grade_id not in claimed
            claimed.add(grade_id)
        if theirs:
            _read(cell.source, {}, (), names)   # only its imports count
            continue
        label = grade_id or f"#{index + 1}"
        parsed, notes = _read(cell.source, forbidden, hidden, names)
        found += [(rank, f"cell {label}, {text}") for rank, text in notes]
        if parsed.magic:
            found.append((_CellReader.OTHER, f"cell {label}: runs IPython magics or shell "
                                             f"commands"))
    if len(found) <= MAX_NOTES:
        return [text for _, text in found]
    kept = sorted(sorted(range(len(found)), key=lambda i: found[i][0])[:MAX_NOTES])
    return [found[i][1] for i in kept] + [f"... and {len(found) - MAX_NOTES} more"]
