"""How notebooks are stored: clean sources, executed lectures, well-formed nbgrader cells."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import ROOT, is_graded_test, nbgrader_meta, notebooks, read

SOURCES = notebooks("solutions") + notebooks("exercises")
LECTURES = notebooks("lectures")
ALL = SOURCES + LECTURES


def _id(path):
    return str(path.relative_to(ROOT))


def test_there_is_something_to_check():
    assert LECTURES and notebooks("solutions") and notebooks("exercises")


@pytest.mark.parametrize("path", SOURCES, ids=_id)
def test_sources_and_releases_carry_no_outputs_or_execution_metadata(path):
    for index, cell in enumerate(read(path).cells):
        assert not cell.get("outputs"), f"cell {index} has outputs"
        assert not cell.get("execution_count"), f"cell {index} has an execution count"
        assert "execution" not in cell.metadata, f"cell {index} has execution timing metadata"


@pytest.mark.parametrize("path", SOURCES, ids=_id)
def test_grade_ids_are_unique_and_graded_cells_have_points(path):
    cells = [c for c in read(path).cells if nbgrader_meta(c)]
    ids = Counter(nbgrader_meta(c)["grade_id"] for c in cells)
    assert not [i for i, n in ids.items() if n > 1], f"duplicate grade ids: {ids}"
    graded = [c for c in cells if is_graded_test(c)]
    assert graded, "no graded test cells"
    for cell in graded:
        meta = nbgrader_meta(cell)
        assert meta.get("points", 0) > 0, f"{meta['grade_id']} is graded but has no points"
        assert meta.get("locked"), f"{meta['grade_id']} is a test cell and must be locked"


@pytest.mark.parametrize("path", notebooks("solutions"), ids=_id)
def test_every_solution_cell_marks_its_solution_and_hidden_tests_are_closed(path):
    for cell in read(path).cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution") and cell.cell_type == "code":
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source, (
                f"{meta['grade_id']}: a solution cell needs BEGIN/END SOLUTION markers"
            )
        begins = cell.source.count("### BEGIN HIDDEN TESTS")
        assert begins == cell.source.count("### END HIDDEN TESTS")
        if begins:
            assert is_graded_test(cell), "hidden tests belong in graded test cells"


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_lectures_are_stored_executed_top_to_bottom_without_errors(path):
    code = [c for c in read(path).cells if c.cell_type == "code" and c.source.strip()]
    assert code, "a lecture without code"
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), (
        f"execution counts {counts}: re-run the lecture top to bottom (`make lectures`)"
    )
    assert any(c.outputs for c in code), "a lecture is stored with its outputs"
    for cell in code:
        for out in cell.outputs:
            assert out.output_type != "error", f"stored error: {out.get('ename')}"
        assert "execution" not in cell.metadata, "timing metadata makes every re-run a diff"
    assert "widgets" not in read(path).metadata, (
        "stored widget state (random model ids) makes every re-run a diff: "
        "execute with `make lectures`, which does not store it"
    )


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_stored_lectures_show_no_widget_without_its_state_and_no_frozen_progress_bar(path):
    """A reader who opens a stored lecture sees finished outputs: a widget view whose state
    is not stored is an error box in JupyterLab ("model not found"), so `make lectures` keeps
    only the static fallback (an explorer's figure); progress bars end as one final line."""
    for index, cell in enumerate(read(path).cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert "application/vnd.jupyter.widget-view+json" not in data, (
                f"cell {index} stores a widget view without its state: run `make lectures`")
            text = "".join(data.get("text/plain", "")) + "".join(out.get("text", ""))
            assert not re.search(r"\b0/\d+\b", text) or "100%" in text, (
                f"cell {index} stores a progress bar frozen at 0: {text[:80]!r}")


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_lectures_are_seeded(path):
    source = "\n".join(c.source for c in read(path).cells if c.cell_type == "code")
    assert "seed_everything(" in source, "call course_utils.seed_everything before random numbers"


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_notebooks_use_the_python3_kernel_and_download_nothing(path):
    nb = read(path)
    assert nb.metadata.kernelspec.name == "python3"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not re.search(r"https?://|from_pretrained\(|torch\.hub|urlretrieve|urlopen", code), (
        "notebook code must not download anything: the course runs offline"
    )
