"""`make similarity UNIT=...` (course_grader/similarity.py) on a class of exercise 09: a copy of
the course's own tiled_attention with every name changed is found, a copy of another student's
notebook is found, and independent correct solutions (written in other styles by other hands:
test_exercise_09_mistakes.py's) stay below the threshold, with each other and with the
references. The report is a static page: a student's code in it is text, never markup."""

from __future__ import annotations

import csv
import json
import re
import shutil

import nbformat
import pytest
from conftest import ROOT, solved
from test_exercise_09_mistakes import LOGSUMEXP, QUERY_BLOCKS_FLOAT64, TWO_PASS

from course_grader import report, similarity

UNIT = "09_attention_at_scale"
RELEASE = ROOT / "exercises" / UNIT / f"{UNIT}.ipynb"

# course_utils.tiled_attention's loop, every name changed, no comments, no checks: a copy.
RENAMED_COPY = '''def tiled_attention(Q, K, V, bs, causal=False):
    Q = Q * (1.0 / math.sqrt(Q.shape[-1]))
    n_q, n_k = Q.shape[-2], K.shape[-2]
    result = Q.new_empty(*Q.shape[:-1], V.shape[-1])
    for a in range(0, n_q, max(n_q, 1)):
        b = min(a + max(n_q, 1), n_q)
        qq = Q[:, :, a:b]
        mx = qq.new_full((*qq.shape[:-1], 1), float("-inf"))
        tot = qq.new_zeros(mx.shape)
        acc = qq.new_zeros(*qq.shape[:-1], V.shape[-1])
        stop = min(n_k, b) if causal else n_k
        for c in range(0, stop, bs):
            d = min(c + bs, n_k)
            sc = qq @ K[:, :, c:d].transpose(-2, -1)
            if causal and d - 1 > a:
                rr = torch.arange(a, b)
                cc = torch.arange(c, d)
                sc = sc.masked_fill(~(cc[None, :] <= rr[:, None]), float("-inf"))
            nm = torch.maximum(mx, sc.amax(dim=-1, keepdim=True))
            sh = torch.where(torch.isfinite(nm), nm, torch.zeros_like(nm))
            pp = (sc - sh).exp()
            fx = (mx - sh).exp()
            tot = tot * fx + pp.sum(dim=-1, keepdim=True)
            acc = acc * fx + pp @ V[:, :, c:d]
            mx = nm
        result[:, :, a:b] = acc / tot.clamp_min(torch.finfo(Q.dtype).tiny)
    return result
'''


def submission(answers: dict[str, str]) -> nbformat.NotebookNode:
    """The release with every task solved by the reference, then the cells in `answers`."""
    nb = solved(RELEASE, UNIT)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    class_ = {"two_pass": TWO_PASS, "logsumexp": LOGSUMEXP, "blocks": QUERY_BLOCKS_FLOAT64,
              "copier": {"tiled_solution": RENAMED_COPY},
              "=cmd|'calc'!A0": {"tiled_solution": "<script>alert(1)</script>\n"
                                      + LOGSUMEXP["tiled_solution"]}}
    for student, answers in class_.items():
        folder = course / "submitted" / student / UNIT
        folder.mkdir(parents=True)
        nbformat.write(submission(answers), folder / f"{UNIT}.ipynb")
    twin = course / "submitted" / "twin" / UNIT
    twin.mkdir(parents=True)
    shutil.copy(course / "submitted" / "two_pass" / UNIT / f"{UNIT}.ipynb", twin)
    return course


@pytest.fixture(scope="module")
def pairs(course):
    return similarity.compare(course, UNIT)


def best(pairs, student, task, other=None) -> float:
    return max((p.share for p in pairs if p.student == student and p.task == task
                and (other is None or re.fullmatch(other, p.other))), default=0.0)


def test_shares_of_every_pair_are_printed_for_the_record(pairs):
    for p in sorted(pairs, key=lambda p: -p.share):
        if p.task == "tiled_solution":
            print(f"{p.student:>12} {p.task} {p.share:.2f} {p.other}")
    assert pairs


def test_a_renamed_copy_of_the_reference_code_is_found(pairs):
    assert best(pairs, "copier", "tiled_solution", r"course_utils/tiled_attention\.py") \
        >= similarity.THRESHOLD


def test_a_copied_notebook_is_found_both_ways(pairs):
    for a, b in (("twin", "two_pass"), ("two_pass", "twin")):
        assert best(pairs, a, "tiled_solution", b) > 0.9


def test_independent_correct_solutions_stay_below_the_threshold(pairs):
    independent = ("two_pass", "logsumexp", "blocks")
    for student in independent:
        for other in (*[o for o in independent if o != student], r"course_utils/.*",
                      r"solutions/.*"):
            assert best(pairs, student, "tiled_solution", other) < similarity.THRESHOLD, (
                student, other)


def test_the_report_is_static_and_escapes_what_students_wrote(course, tmp_path):
    assert similarity.main([UNIT, "--course", str(course), "--out", str(tmp_path)]) == 0
    page = (tmp_path / f"similarity_{UNIT}.html").read_text()
    assert "<script" not in page and "&lt;script&gt;" in page
    assert not re.search(r"(src|href)=", page), "the page must load nothing"
    rows = list(csv.reader((tmp_path / f"similarity_{UNIT}.csv").open()))
    assert rows[0] == ["student", "task", "other", "share", "other_share", "tokens"]
    assert all(not r[0].startswith("=") for r in rows[1:])   # formula-safe
    flags = json.loads((course / "similarity" / f"{UNIT}.json").read_text())
    assert "copier" in flags and "two_pass" in flags and "blocks" not in flags
    assert report.similarity_flags(course, UNIT) == flags


def test_report_adds_the_similarity_notes_to_the_students_flags(course, tmp_path):
    similarity.main([UNIT, "--course", str(course), "--out", str(tmp_path)])
    notes = report.similarity_flags(course, UNIT)
    assert any("course_utils/tiled_attention.py" in n for n in notes["copier"])
    assert any("two_pass" in n for n in notes["twin"])
    (course / "similarity" / "bad.json").write_text("[1, 2")   # unreadable: no notes
    assert report.similarity_flags(course, "bad") == {}


def test_no_submission_says_so(tmp_path):
    assert similarity.main([UNIT, "--course", str(tmp_path), "--out", str(tmp_path)]) == 2
