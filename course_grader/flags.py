"""Notes for the instructor about what a submission's code uses, read from its source.

The tests block ready-made functions while they call a student's code (`grading.forbidden`),
but a student's kernel is the student's: a name can be reached in ways no block foresees.
So the grader also reads the student's cells, without running them, and notes

* every use of a name that the unit's tests forbid (torch.softmax, F.cross_entropy, ...),
  through an alias (`import torch.nn.functional as F`), an import or a method (`x.softmax`);
* every import of a course_utils module that holds reference code, which the sandbox hides;
* code that reaches around the language: dynamic imports and attribute lookups, exec/eval,
  frames, code objects, the kernel itself, files, processes and the network.

A note is not a verdict; scores come from the tests alone. Notes go to the status file and
the class report, where the instructor decides. Code hidden well enough (a string decoded at
run time and passed to getattr, say) is flagged only as dynamic access, not by name.

    flags.forbidden_names(solution_notebook)     -> {"torch.softmax": "use exp, max and sum"}
    flags.flag_notebook(autograded_nb, forbidden, reachable)  -> ["cell softmax_solution, ..."]
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

import nbformat

from course_utils import grading

# Names whose use says the code reaches around the language or out of the notebook.
REACHING_AROUND = {
    "__import__": "a dynamic import", "importlib": "a dynamic import",
    "exec": "exec", "eval": "eval", "compile": "compiled code",
    "getattr": "an attribute looked up by a computed name",
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
MAX_CELLS, MAX_SOURCE, MAX_NOTES = 500, 200_000, 40
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
    trees = [_parse(c.source) for c in nb.cells if c.cell_type == "code"]
    trees = [t for t in trees if t is not None]
    tuples: dict[str, tuple[str, ...]] = {}
    for tree in trees:
        tuples.update(_string_tuples(tree))
    names: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _dotted(node.func, {}).split(".")[-1]
                    == "forbidden"):
                continue
            reason = next((k.value.value for k in node.keywords if k.arg == "reason"
                           and isinstance(k.value, ast.Constant)), "")
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.setdefault(arg.value, reason)
                elif isinstance(arg, ast.Starred):
                    key = _dotted(arg.value, {}).split(".")[-1]
                    for name in tuples.get(key, ()):
                        names.setdefault(name, reason)
    return names


def transform_ipython(source: str) -> str:
    """`source` as IPython runs it: magics (`x = %time f()`), shell escapes and `?` help
    turned into the plain Python calls they stand for (`get_ipython().run_line_magic(...)`)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - IPython cannot read it either; parse it as it is
        return source


def _parse(source: str) -> ast.Module | None:
    text = source[:MAX_SOURCE]
    if text.lstrip().startswith("%%"):   # a cell magic (%%time, %%capture): read its body
        text = text.lstrip().partition("\n")[2]
    try:
        return ast.parse(transform_ipython(text))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str:
    """'torch.nn.functional.softmax' for F.softmax once `import torch.nn.functional as F`;
    '?.softmax' for a method of a value; '' for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(aliases.get(node.id, node.id))
    elif parts:
        parts.append("?")
    return ".".join(reversed(parts))


def flag_source(source: str, forbidden: dict[str, str], hidden_modules: Iterable[str] = (),
                aliases: dict[str, str] | None = None) -> list[str]:
    """The notes for one cell's source. `aliases` (name -> dotted module) carries the imports
    of earlier cells and is updated with this cell's."""
    tree = _parse(source)
    if tree is None:
        return ["this cell is not valid Python, even read as IPython reads it, so its code "
                "could not be checked"]
    aliases = {} if aliases is None else aliases
    hidden = tuple(hidden_modules)
    methods = {name.rsplit(".", 1)[-1]: name for name in forbidden if ".Tensor." in name}
    notes: list[str] = []
    seen: set[str] = set()

    def note(node: ast.AST, key: str, text: str) -> None:
        if key == "get_ipython" and key not in source:
            return   # IPython's own rewriting of a magic: noted once as a magic instead
        if key not in seen:  # one note per thing used, at its first line
            seen.add(key)
            notes.append(f"line {getattr(node, 'lineno', '?')}: {text}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            base = node.module if isinstance(node, ast.ImportFrom) else ""
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                aliases[alias.asname or alias.name.split(".")[0]] = (
                    full if alias.asname or base else alias.name.split(".")[0])
                if full.startswith("course_utils") and any(
                        full == h or full.startswith(h + ".") for h in hidden):
                    note(node, full, f"imports {full}, reference code the graded kernel "
                                     f"cannot see")
                else:
                    _check_name(full, node, forbidden, note)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            aliases.pop(node.name, None)   # the student's own softmax is not torch's
    modules = {v.split(".")[0] for v in aliases.values()} | {"torch", "builtins"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute | ast.Name) or _inner(node, tree):
            continue
        dotted = _dotted(node, aliases)
        root = dotted.split(".")[0]
        if isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node, ast.Attribute) and root in modules:
                note(node, "=" + dotted, f"changes {dotted}, a library's own attribute")
            elif isinstance(node, ast.Name) and node.id in aliases:
                note(node, "=" + node.id, f"rebinds `{node.id}`, which an import bound to "
                                          f"{aliases[node.id]}")
            continue
        attr = dotted.rsplit(".", 1)[-1]
        if isinstance(node, ast.Attribute) and attr in methods and root not in modules:
            note(node, methods[attr], f"calls .{attr}(), i.e. {methods[attr]} "
                                      f"(the tests forbid it: {forbidden[methods[attr]]})")
        _check_name(dotted, node, forbidden, note)
        if isinstance(node, ast.Attribute) and node.attr in DUNDER_ATTRIBUTES:
            note(node, node.attr, f"uses {node.attr} (reaches inside functions or objects)")
    return notes


def _inner(node: ast.AST, tree: ast.AST) -> bool:
    """True for the x.y of x.y.z: only whole attribute chains are looked at."""
    parents = getattr(tree, "_parents", None)
    if parents is None:
        parents = {child: parent for parent in ast.walk(tree)
                   for child in ast.iter_child_nodes(parent)}
        tree._parents = parents  # type: ignore[attr-defined]
    return isinstance(parents.get(node), ast.Attribute)


def _check_name(dotted: str, node, forbidden, note) -> None:
    if not dotted:
        return
    for name, reason in forbidden.items():
        if dotted == name or dotted.startswith(name + "."):
            note(node, name, f"uses {name} (the tests forbid it: {reason})")
            return
    for name, what in REACHING_AROUND.items():
        if dotted == name or dotted.startswith(name + "."):
            note(node, name, f"uses {dotted} ({what})")
            return


def flag_notebook(nb: nbformat.NotebookNode, forbidden: dict[str, str],
                  hidden_modules: Iterable[str] = ()) -> list[str]:
    """Notes for every cell of a submission that the student wrote or could edit (not the
    instructor's locked set-up and test cells), in notebook order."""
    aliases: dict[str, str] = {}
    notes = []
    hidden = list(hidden_modules)
    for index, cell in enumerate(nb.cells[:MAX_CELLS]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("locked") or (meta.get("grade") and not meta.get("solution")):
            flag_source(cell.source, {}, (), aliases)   # only its imports count
            continue
        name = meta.get("grade_id") or f"#{index + 1}"
        notes += [f"cell {name}, {n}" for n in flag_source(cell.source, forbidden, hidden,
                                                          aliases)]
        if transform_ipython(cell.source[:MAX_SOURCE]) != cell.source[:MAX_SOURCE] + (
                "" if cell.source.endswith("\n") else "\n"):
            notes.append(f"cell {name}: runs IPython magics or shell commands")
    if len(notes) > MAX_NOTES:
        notes[MAX_NOTES:] = [f"... and {len(notes) - MAX_NOTES} more"]
    return notes
