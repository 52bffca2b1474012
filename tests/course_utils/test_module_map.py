"""The module map of course_utils (its package docstring): every module listed exists, the
teaching modules import each other without cycles, and only at the top of the file."""

import ast
import re
from pathlib import Path

import course_utils

PACKAGE = Path(course_utils.__file__).parent
# Every module of the package but the check convention (`grading`, which imports lazily on
# purpose: the sandbox starts it without PyTorch): derived, so that a new module is covered.
TEACHING = sorted(
    ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    for path in PACKAGE.rglob("*.py")
    if path.name != "__init__.py" and path.relative_to(PACKAGE).parts[0] != "grading")


def path_of(module: str) -> Path:
    return PACKAGE.joinpath(*module.split(".")).with_suffix(".py")


def imports(module: str) -> tuple[set[str], list[int]]:
    """The course_utils modules `module` imports at the top, and the lines of any import
    inside a function or class."""
    tree = ast.parse(path_of(module).read_text())
    # a module-level try: (an optional package) is still the top of the file
    at_top = list(tree.body) + [n for t in tree.body if isinstance(t, ast.Try)
                                for n in [*t.body, *(s for h in t.handlers for s in h.body)]]
    top, nested = set(), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        if isinstance(node, ast.ImportFrom) and node.module == "course_utils":
            names = [f"course_utils.{a.name}" for a in node.names]
        ours = {n.removeprefix("course_utils.") for n in names
                if n and n.startswith("course_utils")}
        if node in at_top:
            top |= {n for n in ours if path_of(n).exists()}
        else:
            nested.append(node.lineno)
    return top, nested


def test_every_module_of_the_map_exists_and_every_teaching_module_is_in_it():
    doc = course_utils.__doc__
    listed = re.findall(r"^    (\w+) ", doc, flags=re.MULTILINE)
    for name in listed:
        assert path_of(name).exists() or (PACKAGE / name / "__init__.py").exists(), name
    for module in TEACHING:
        assert module.split(".")[0] in listed, f"{module} is missing from the module map"


def test_teaching_modules_import_at_the_top_only_and_without_cycles():
    graph = {}
    for module in TEACHING:
        top, nested = imports(module)
        assert not nested, f"course_utils/{module}.py imports inside a function: lines {nested}"
        graph[module] = top & set(TEACHING)
    done, visiting = set(), []

    def visit(module):
        assert module not in visiting, "import cycle: " + " -> ".join([*visiting, module])
        if module in done:
            return
        visiting.append(module)
        for dep in graph[module]:
            visit(dep)
        visiting.pop()
        done.add(module)

    for module in TEACHING:
        visit(module)
    # the split of units 02-03: the parts do not import the assembled model
    assert "translator" not in graph["seq2seq"] | graph["attention_decoder"]
    assert "attention_decoder" not in graph["seq2seq"]
    assert {"seq2seq", "attention_decoder", "training"} <= graph["translator"]


# The models at the bottom of the stack take and return tensors: they reach only each other,
# the argument checks and the special ids; no GRU-era module, no tokenizer, no data set, no
# pipeline (recipes, shipped weights, training). Derived: a new module is "above" unless
# it is added here.
MODELS = ["sequence", "attention", "long_inputs", "multihead", "positional", "transformer",
          "bert"]
BELOW_THE_MODELS = ["_checks", "data.vocab"]
ABOVE_THE_MODELS = sorted(set(TEACHING) - set(MODELS) - set(BELOW_THE_MODELS))


def reachable(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        for dep in imports(todo.pop())[0] & set(TEACHING):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_models_import_nothing_above_them():
    assert {"seq2seq", "tokenization", "data.translation", "data.stories", "training",
            "bert_pretraining", "tiny_bert", "shipped_tiny_bert", "fine_tuning",
            "translator", "shipped_translators"} <= set(ABOVE_THE_MODELS)
    for model in MODELS:
        above = reachable(model) & set(ABOVE_THE_MODELS)
        assert not above, f"{model} reaches {sorted(above)}"
    # BERT reaches the attention layers without passing through unit 02's GRU code
    assert "seq2seq" not in reachable("bert") and "sequence" in reachable("transformer")
    # the pipelines sit above the models, one job each
    assert "bert" in reachable("bert_pretraining") and "tokenization" in reachable("tiny_bert")
    assert "tiny_bert" in reachable("shipped_tiny_bert")
    assert "tiny_bert" not in reachable("fine_tuning") | reachable("bert_pretraining")
