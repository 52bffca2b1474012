"""LMS in and out, end to end: a Canvas "Download Submissions" zip -> `make collect-zip`
(nbgrader zip_collect with course_grader.lms.CanvasCollector) -> `nbgrader autograde` ->
`nbgrader export` (course_grader.lms.LmsGradesExporter) -> reports/grades.csv.

The zip, named as Canvas names its files (<name>_[late_]<user id>_<file id>_<file>):

    smithalice_1001_5001_00_attention_as_lookup.ipynb   everything solved          -> 1001
    smithalice_1001_5002_scratch.ipynb                  a second notebook          not collected
    smithalice_1001_5003_screenshot.png                 not a notebook             not collected
    jonesbob_1002_5004_00_attention_as_lookup-1.ipynb   softmax only, renamed      -> 1002
    leecarol_late_1003_5005_my attention.ipynb          late, softmax and average  -> 1003
    nguyendan_1004_5006_part1.ipynb                     two notebooks, neither     not collected
    nguyendan_1004_5007_part2.ipynb                       named as the unit's      not collected
    notes_for_the_grader.ipynb                          not Canvas's pattern       not collected

Canvas's ids are digits, so a student id that is a formula (`=cmd`) or a signed number
(`-1e3`) cannot come from its zip; such ids are added to the gradebook directly (nbgrader does
not check ids) to test the CSV.

A second, hostile zip (`hostile_course`) has one student per attack next to that student's own
notebook: a zip naming another student inside, duplicates, `.gz` files, `..` and absolute
paths, links, a nested zip bomb, 10,000 members, broken archives, files over the limits and a
name that forges a log line; `make collect-zip` must finish, collect each student's own
notebook (and nobody else's) and name every file it leaves out, writing nothing outside
`submitted/` and `downloaded/`.
"""

from __future__ import annotations

import csv
import functools
import glob
import gzip
import io
import logging
import random
import re
import shutil
import stat
import subprocess
import warnings
import zipfile

import nbformat
import pytest
from conftest import BIN, ROOT, nbgrader_meta, read, run_nbgrader, solved, tool_env
from nbgrader.api import Gradebook
from nbgrader.apps.autogradeapp import AutogradeApp
from sqlalchemy.exc import SAWarning
from traitlets.config import Configurable

from course_grader.lms import (
    CANVAS_PATTERN,
    CanvasCollector,
    CanvasExtractor,
    parse_canvas_name,
    student_id_problem,
)

UNIT = "00_attention_as_lookup"
NOTEBOOK = f"{UNIT}.ipynb"
VENV = BIN.parent
FORMULA_ID = "=cmd|' /C calc'!A0"
# ids that are not Canvas's, added to the gradebook directly -> their cell in the CSV: text
# that a spreadsheet would read as a formula or a signed number, whatever Python's float() says
GUARDED_IDS = {" -2": "' -2", "+1_000": "'+1_000", "-1e3": "'-1e3", "-inf": "'-inf",
               FORMULA_ID: "'" + FORMULA_ID, "@SUM(1)": "'@SUM(1)"}
SOLVED = {  # zip entry -> solution cells filled in (None: all, set(): none)
    f"smithalice_1001_5001_{NOTEBOOK}": None,
    "smithalice_1001_5002_scratch.ipynb": set(),
    f"jonesbob_1002_5004_{UNIT}-1.ipynb": {"softmax_solution"},
    "leecarol_late_1003_5005_my attention.ipynb": {"softmax_solution",
                                                   "weighted_average_solution"},
    "nguyendan_1004_5006_part1.ipynb": None,
    "nguyendan_1004_5007_part2.ipynb": None,
    "notes_for_the_grader.ipynb": None,
}
COLLECTED = {"1001": f"smithalice_1001_5001_{NOTEBOOK}",
             "1002": f"jonesbob_1002_5004_{UNIT}-1.ipynb",
             "1003": "leecarol_late_1003_5005_my attention.ipynb"}
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def _notebook(course, solve: set[str] | None) -> str:
    return nbformat.writes(solved(course / "exercises" / UNIT / NOTEBOOK, UNIT, solve))


def _points(*solved: str) -> float:
    """Points of the test cells whose grade id starts with one of `solved` (all if none)."""
    nb = read(ROOT / "solutions" / UNIT / NOTEBOOK)
    return sum(nbgrader_meta(c).get("points") or 0 for c in nb.cells
               if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")
               and (not solved or nbgrader_meta(c)["grade_id"].startswith(solved)))


def collect_zip(course, download) -> subprocess.CompletedProcess:
    """`make collect-zip`, the Makefile's own target, run in the course copy with this venv
    (no set-up step)."""
    return subprocess.run(
        ["make", "-f", str(ROOT / "Makefile"), "-o", str(VENV / ".setup-done"),
         f"VENV={VENV}", "collect-zip", f"ZIP={download}", f"UNIT={UNIT}"],
        cwd=course, env=tool_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def lms_course(fresh_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("lms")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    download = course / "attention-00_attention_as_lookup_submissions.zip"
    with zipfile.ZipFile(download, "w") as z:
        for name, solve in SOLVED.items():
            z.writestr(name, _notebook(course, solve))
        z.writestr("smithalice_1001_5003_screenshot.png", b"\x89PNG")
    proc = collect_zip(course, download)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (course / "collect.log").write_text(proc.stdout + proc.stderr)
    run_nbgrader("autograde", UNIT, "--force", cwd=course)
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        warnings.filterwarnings("ignore", "Object of type", SAWarning)
        for student in GUARDED_IDS:
            gb.add_student(student, last_name="+1")
            gb.add_submission(UNIT, student)  # nothing graded: scores 0
    exported = run_nbgrader("export", cwd=course)
    (course / "export.log").write_text(exported.stdout + exported.stderr)
    return course


def test_canvas_file_names_are_read_as_canvas_writes_them():
    assert parse_canvas_name(f"smithalice_1001_5001_{NOTEBOOK}") == {
        "name": "smithalice", "late": None, "student_id": "1001", "file_number": "5001",
        "file_id": NOTEBOOK}
    late = parse_canvas_name("/any/folder/leecarol_late_1003_5005_my attention.ipynb")
    assert (late["late"], late["student_id"], late["file_id"]) == (
        "late", "1003", "my attention.ipynb")
    # a name keeps `_` (never `_<digits>_`) and letters of any script; the file keeps its own
    assert parse_canvas_name("o_brienpat_7_8_a_b.ipynb")["student_id"] == "7"
    assert parse_canvas_name("müllerjörg2_7_8_x.ipynb")["name"] == "müllerjörg2"
    # no name (anonymous grading), no ids, or a file added by hand: not Canvas's pattern
    # ids are ASCII digits: another script's digits are no Canvas id
    for name in ["1001_5001_00_attention_as_lookup.ipynb", "smithalice_00_x.ipynb",
                 NOTEBOOK, "notes_for_the_grader.ipynb", "smithalice_\u0661\u0662_5_x.ipynb"]:
        assert parse_canvas_name(name) is None, name
    assert re.compile(CANVAS_PATTERN).groupindex.keys() >= {"student_id", "file_id"}


def test_each_student_lands_under_the_canvas_id_with_the_units_notebook_name(lms_course):
    submitted = lms_course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted(COLLECTED)
    with zipfile.ZipFile(lms_course / "attention-00_attention_as_lookup_submissions.zip") as z:
        for student, entry in COLLECTED.items():
            folder = submitted / student / UNIT
            assert sorted(p.name for p in folder.iterdir()) == [NOTEBOOK], student
            assert (folder / NOTEBOOK).read_bytes() == z.read(entry), student


def test_every_file_not_collected_is_named_with_its_reason(lms_course):
    log = (lms_course / "collect.log").read_text()
    for expected in [
        "Not collected: smithalice_1001_5002_scratch.ipynb (student 1001 also sent "
        f"smithalice_1001_5001_{NOTEBOOK})",
        "Not collected: smithalice_1001_5003_screenshot.png (student 1001: not a notebook)",
        "Not collected: nguyendan_1004_5006_part1.ipynb (student 1004 sent 2 notebooks, "
        f"none named {NOTEBOOK}",
        "Not collected: nguyendan_1004_5007_part2.ipynb",
        "Not collected: notes_for_the_grader.ipynb (its name is not Canvas's",
        f"Student 1002: {UNIT}-1.ipynb collected as {NOTEBOOK}",
        f"Student 1003: my attention.ipynb collected as {NOTEBOOK}",
        "Student 1003: late by Canvas's mark",
        "3 files collected, 3 files skipped",
        f"{UNIT}: 3 submissions in submitted/, 5 files not collected",
    ]:
        assert expected in log, (expected, log)


def test_a_late_file_gets_no_invented_time(lms_course):
    """Canvas's zip says `late` but not when: no timestamp.txt, no time in the gradebook."""
    assert not (lms_course / "submitted" / "1003" / UNIT / "timestamp.txt").exists()
    with Gradebook(f"sqlite:///{lms_course / 'gradebook.db'}") as gb:
        submission = gb.find_submission(UNIT, "1003")
        assert submission.timestamp is None and submission.late_submission_penalty in (0, None)


def test_grades_csv_has_one_row_per_student_and_unit_with_the_gradebooks_scores(lms_course):
    with (lms_course / "reports" / "grades.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    full = _points()
    assert full == 9
    scores = {"1001": full, "1002": _points("softmax"),
              "1003": _points("softmax", "weighted_average"), **dict.fromkeys(GUARDED_IDS, 0)}
    assert rows == [["student_id", "unit", "score", "max_score"]] + [
        [GUARDED_IDS.get(student, student), UNIT, f"{scores[student]:g}", f"{full:g}"]
        for student in sorted(scores)]   # the gradebook's order
    with Gradebook(f"sqlite:///{lms_course / 'gradebook.db'}") as gb:
        for student in ["1001", "1002", "1003"]:
            submission = gb.find_submission(UNIT, student)
            assert (scores[student], full) == (submission.score, submission.max_score)
    assert "Wrote 9 rows" in (lms_course / "export.log").read_text()


def test_no_cell_of_the_grades_csv_starts_a_formula(lms_course):
    with (lms_course / "reports" / "grades.csv").open(newline="", encoding="utf-8") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert cells and not [c for c in cells if c.lstrip().startswith(FORMULA_START)]


# ---- hostile uploads -------------------------------------------------------------------------

MIB = 1024 * 1024
LIMITS = {"max_file_bytes": 2 * MIB, "max_student_bytes": 5 * MIB}   # the course copy's
OWN = {  # student -> the own notebook Canvas named for them, which must be the one collected
    "1234": f"smithalice_1234_6002_{NOTEBOOK}", "1236": f"leecarol_1236_6001_{NOTEBOOK}",
    "1241": f"nguyendan_1241_6021_again.zip/{NOTEBOOK}", "1242": f"patelraj_1242_6031_{NOTEBOOK}",
    "1243": f"garciamia_1243_6040_{NOTEBOOK}", "1244": f"kimsoo_1244_6050_{NOTEBOOK}",
    "1245": f"wangli_1245_6060_{NOTEBOOK}", "1246": f"brownsam_1246_6070_{NOTEBOOK}",
    "1247": f"millerjo_1247_6080_{NOTEBOOK}", "1248": f"davisamy_1248_6090_{NOTEBOOK}",
    "1249": f"obrienpat_1249_6100_{NOTEBOOK}", "1250": f"zhaoyu_1250_6110_{NOTEBOOK}",
    # the notebook inside his upload is named like 1236's: it is his, as his only notebook
    "1240": f"jonesbob_1240_6010_notes.zip/leecarol_1236_6001_{NOTEBOOK}",
}
BAD_TOP = "davisamy_1248_6093_bad.ipynb"
FORGED = f"evil\n[ZipCollectApp | WARNING] Student 1236: collected {NOTEBOOK}"
SKIPPED = {  # attack -> the lines that name what was left out (student and reason)
    "impersonation": [
        f"Not collected: smithalice_1234_6003_leecarol_1236_6001_{NOTEBOOK} (student 1234 "
        f"also sent smithalice_1234_6002_{NOTEBOOK})",
        f"Not collected: smithalice_1234_6003_leecarol_1236_6009_{NOTEBOOK} (student 1234 "
        f"also sent smithalice_1234_6002_{NOTEBOOK})"],
    "duplicates": [
        f"Not collected: nguyendan_1241_6020_{NOTEBOOK} (student 1241: a second file of this "
        "name (the first is kept))",
        f"Not collected: nguyendan_1241_6021_again.zip: copy/{NOTEBOOK} (student 1241: a "
        f"second nguyendan_1241_6021_{NOTEBOOK} (the first, nguyendan_1241_6021_again.zip: "
        f"{NOTEBOOK}, is kept))",
        f"Not collected: nguyendan_1241_6020_{NOTEBOOK} (student 1241 also sent "
        f"nguyendan_1241_6021_{NOTEBOOK}, uploaded later)"],
    "gz": [
        "Not collected: patelraj_1242_6030_data.csv.gz (student 1242: not a notebook)",
        "Not collected: patelraj_1242_6032_more.zip: data.csv.gz (student 1242: not a notebook)",
        "Not collected: patelraj_1242_6032_more.zip: results.tar.gz (student 1242: not a "
        "notebook)"],
    "traversal": [
        "Not collected: garciamia_1243_6041_evil.zip: ../../../escaped.ipynb (student 1243: a "
        "path that leaves its folder (..))",
        f"Not collected: garciamia_1243_6041_evil.zip: ../{NOTEBOOK} (student 1243: a path "
        "that leaves its folder (..))",
        "Not collected: garciamia_1243_6041_evil.zip: a/../../escaped2.ipynb (student 1243: a "
        "path that leaves its folder (..))",
        "Not collected: ../garciamia_1243_6042_escaped3.ipynb (student 1243: a path that "
        "leaves its folder (..))"],
    "absolute": [
        "Not collected: kimsoo_1244_6051_abs.zip: {target}/abs.ipynb (student 1244: an "
        "absolute path)",
        "Not collected: {target}/kimsoo_1244_6052_abs.ipynb (student 1244: an absolute path)"],
    "links": [
        "Not collected: wangli_1245_6061_links.zip: link.ipynb (student 1245: a link)",
        f"Not collected: wangli_1245_6061_links.zip: {NOTEBOOK} (student 1245: a link)",
        "Not collected: wangli_1245_6062_top.ipynb (student 1245: a link)"],
    "bomb": [
        "Not collected: brownsam_1246_6071_bomb.zip: big.ipynb (student 1246: more than 2 MiB "
        "unpacked (CanvasExtractor.max_file_bytes))",
        "Not collected: brownsam_1246_6071_bomb.zip: dense.ipynb (student 1246: unpacks to "
        "over 100 times its compressed size (CanvasExtractor.max_ratio): a zip bomb?)",
        "Not collected: brownsam_1246_6071_bomb.zip: deeper.zip: big.ipynb (student 1246: "
        "more than 2 MiB unpacked",
        "Not collected: brownsam_1246_6071_bomb.zip: deeper.zip: dense.ipynb (student 1246: "
        "unpacks to over 100 times",
        "Not collected: brownsam_1246_6071_bomb.zip: deeper.zip: deeper.zip (student 1246: an "
        "archive more than 2 deep (CanvasExtractor.max_depth))"],
    "10,000 members": [
        "Not collected: millerjo_1247_6081_many.zip (student 1247: an archive of up to 10000 "
        "members, more than the 1000 left of the student's CanvasExtractor.max_members "
        "(1000))"],
    "broken": [
        "Not collected: davisamy_1248_6091_broken.zip (student 1248: not a readable zip "
        "(BadZipFile: ",
        "Not collected: davisamy_1248_6092_crc.zip: x.ipynb (student 1248: unreadable "
        "(BadZipFile: Bad CRC-32 for file 'x.ipynb'))",
        "Not collected: davisamy_1248_6093_bad.ipynb (student 1248: unreadable (BadZipFile: "
        "Bad CRC-32 for file 'davisamy_1248_6093_bad.ipynb'))",
        "Not collected: davisamy_1248_6092_y.ipynb (student 1248 also sent "
        f"davisamy_1248_6090_{NOTEBOOK})"],
    "over the limits": [
        "Not collected: obrienpat_1249_6101_huge.ipynb (student 1249: more than 2 MiB unpacked "
        "(CanvasExtractor.max_file_bytes))",
        "Not collected: obrienpat_1249_6104_c.ipynb (student 1249: the student's files pass "
        "5 MiB unpacked (CanvasExtractor.max_student_bytes))",
        "Not collected: obrienpat_1249_6102_a.ipynb (student 1249 also sent "
        f"obrienpat_1249_6100_{NOTEBOOK})",
        "Not collected: obrienpat_1249_6103_b.ipynb (student 1249 also sent "
        f"obrienpat_1249_6100_{NOTEBOOK})"],
    "forged log line": [
        f"Not collected: {ascii(f'zhaoyu_1250_6111_ctl.zip: {FORGED}.ipynb')} (student 1250: "
        "a control character in its name)"],
}


def _marked(course, label: str) -> bytes:
    """A solved notebook that says whose it is (`label`), so each copy can be told apart."""
    nb = solved(course / "exercises" / UNIT / NOTEBOOK, UNIT)
    nb.metadata["handed_in_as"] = label
    return nbformat.writes(nb).encode()


def _zip(*members, compression=zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of (name or ZipInfo, bytes) members, built in memory."""
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", compression) as z:
        warnings.filterwarnings("ignore", "Duplicate name", UserWarning)
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def _link(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    """A member that unzip and nbgrader's extractor would make a symbolic link to `target`."""
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def _corrupt(data: bytes, name: str) -> bytes:
    """`data`, a zip, with one byte of member `name`'s stored content changed (its CRC then
    fails)."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(name)
    header = info.header_offset
    start = header + 30 + int.from_bytes(data[header + 26:header + 28], "little") \
        + int.from_bytes(data[header + 28:header + 30], "little")
    spot = start + info.compress_size // 2
    return data[:spot] + bytes([data[spot] ^ 0xFF]) + data[spot + 1:]


@functools.cache
def _bomb(levels: int) -> bytes:
    """A zip nested `levels` deep: at each level a notebook of 20 MiB of zeros (over the
    file limit), one of 1.5 MiB (under it, but 1,000 times its compressed size) and the next
    level as deeper.zip; about 130 MiB unpacked from a few tens of KB."""
    inner = b""
    for _ in range(levels):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            with z.open("big.ipynb", "w") as f:
                for _ in range(20):
                    f.write(bytes(MIB))
            z.writestr("dense.ipynb", bytes(3 * MIB // 2))
            if inner:
                z.writestr("deeper.zip", inner)
        inner = buf.getvalue()
    return inner


def _hostile_members(course, target) -> list:
    """Canvas's zip: each attacker's own notebook first, then the attack (`target`: a folder
    that must not come to exist)."""
    nb = lambda label: _marked(course, label)  # noqa: E731
    noise = random.Random(39)
    members = [
        (f"leecarol_1236_6001_{NOTEBOOK}", nb(f"leecarol_1236_6001_{NOTEBOOK}")),
        (f"smithalice_1234_6002_{NOTEBOOK}", nb(f"smithalice_1234_6002_{NOTEBOOK}")),
        ("smithalice_1234_6003_notes.zip", _zip(
            (f"leecarol_1236_6001_{NOTEBOOK}", nb("forged by 1234")),
            (f"sub/leecarol_1236_6009_{NOTEBOOK}", nb("forged by 1234 in a folder")))),
        ("jonesbob_1240_6010_notes.zip", _zip(
            (f"leecarol_1236_6001_{NOTEBOOK}", nb(OWN["1240"])))),
        (f"nguyendan_1241_6020_{NOTEBOOK}", nb("1241 first")),
        (f"nguyendan_1241_6020_{NOTEBOOK}", nb("1241 the same name again")),
        ("nguyendan_1241_6021_again.zip", _zip(
            (NOTEBOOK, nb(OWN["1241"])), (f"copy/{NOTEBOOK}", nb("1241 a copy")))),
        ("patelraj_1242_6030_data.csv.gz", gzip.compress(b"a,b\n1,2\n")),
        (f"patelraj_1242_6031_{NOTEBOOK}", nb(OWN["1242"])),
        ("patelraj_1242_6032_more.zip", _zip(("data.csv.gz", gzip.compress(b"a\n")),
                                             ("results.tar.gz", gzip.compress(b"x" * 512)))),
        (f"garciamia_1243_6040_{NOTEBOOK}", nb(OWN["1243"])),
        ("garciamia_1243_6041_evil.zip", _zip(
            ("../../../escaped.ipynb", nb("up")), (f"../{NOTEBOOK}", nb("up one")),
            ("a/../../escaped2.ipynb", nb("up two")))),
        ("../garciamia_1243_6042_escaped3.ipynb", nb("up from the top")),
        (f"kimsoo_1244_6050_{NOTEBOOK}", nb(OWN["1244"])),
        ("kimsoo_1244_6051_abs.zip", _zip((f"{target}/abs.ipynb", nb("absolute")))),
        (f"{target}/kimsoo_1244_6052_abs.ipynb", nb("absolute at the top")),
        (f"wangli_1245_6060_{NOTEBOOK}", nb(OWN["1245"])),
        ("wangli_1245_6061_links.zip", _zip(_link("link.ipynb", "/etc/passwd"),
                                            _link(NOTEBOOK, f"../../submitted/1236/{UNIT}"))),
        _link("wangli_1245_6062_top.ipynb", "/etc/shadow"),
        (f"brownsam_1246_6070_{NOTEBOOK}", nb(OWN["1246"])),
        ("brownsam_1246_6071_bomb.zip", _bomb(levels=6)),
        (f"millerjo_1247_6080_{NOTEBOOK}", nb(OWN["1247"])),
        ("millerjo_1247_6081_many.zip", _zip(*[(f"f{i}.ipynb", b"{}") for i in range(10_000)])),
        (f"davisamy_1248_6090_{NOTEBOOK}", nb(OWN["1248"])),
        ("davisamy_1248_6091_broken.zip", _zip((NOTEBOOK, nb("broken")))[:200]),
        ("davisamy_1248_6092_crc.zip", _corrupt(_zip(
            ("x.ipynb", nb("corrupt")), ("y.ipynb", nb("sound")),
            compression=zipfile.ZIP_STORED), "x.ipynb")),
        (f"obrienpat_1249_6100_{NOTEBOOK}", nb(OWN["1249"])),
        ("obrienpat_1249_6101_huge.ipynb", noise.randbytes(3 * MIB)),
        *[(f"obrienpat_1249_{6102 + i}_{c}.ipynb", noise.randbytes(19 * MIB // 10))
          for i, c in enumerate("abc")],
        (zipfile.ZipInfo(BAD_TOP), b"x" * 4096),   # stored: _corrupt breaks its CRC
        (f"zhaoyu_1250_6110_{NOTEBOOK}", nb(OWN["1250"])),
        ("zhaoyu_1250_6111_ctl.zip", _zip((FORGED + ".ipynb", nb("forged line")))),
    ]
    return members


def _files(folder, *, leave_out=()) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.relative_to(folder).parts[0] not in leave_out}


@pytest.fixture(scope="module")
def hostile_course(fresh_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("hostile")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    with (course / "nbgrader_config.py").open("a") as f:
        f.writelines(f"c.CanvasExtractor.{k} = {v}\n" for k, v in LIMITS.items())
    target = tmp_path_factory.getbasetemp() / "absolute-target"
    download = tmp_path_factory.mktemp("canvas") / "hostile_submissions.zip"
    download.write_bytes(_corrupt(_zip(*_hostile_members(course, target)), BAD_TOP))
    before = _files(course)
    around = {p.name for p in course.parent.iterdir()}
    proc = collect_zip(course, download)
    return {"course": course, "proc": proc, "log": proc.stdout + proc.stderr, "before": before,
            "around": around, "target": target}


EXTRACTED = {  # what the extractor may write: Canvas's notebooks, uploads renamed as theirs
    f"leecarol_1236_6001_{NOTEBOOK}", f"smithalice_1234_6002_{NOTEBOOK}",
    f"smithalice_1234_6003_leecarol_1236_6001_{NOTEBOOK}",
    f"smithalice_1234_6003_leecarol_1236_6009_{NOTEBOOK}",
    f"jonesbob_1240_6010_leecarol_1236_6001_{NOTEBOOK}", f"nguyendan_1241_6020_{NOTEBOOK}",
    f"nguyendan_1241_6021_{NOTEBOOK}", f"patelraj_1242_6031_{NOTEBOOK}",
    f"garciamia_1243_6040_{NOTEBOOK}", f"kimsoo_1244_6050_{NOTEBOOK}",
    f"wangli_1245_6060_{NOTEBOOK}", f"brownsam_1246_6070_{NOTEBOOK}",
    f"millerjo_1247_6080_{NOTEBOOK}", f"davisamy_1248_6090_{NOTEBOOK}",
    "davisamy_1248_6092_y.ipynb", f"obrienpat_1249_6100_{NOTEBOOK}",
    "obrienpat_1249_6102_a.ipynb", "obrienpat_1249_6103_b.ipynb", f"zhaoyu_1250_6110_{NOTEBOOK}",
}


def test_a_hostile_download_is_collected_to_the_end(hostile_course):
    assert hostile_course["proc"].returncode == 0, hostile_course["log"]
    assert "Traceback" not in hostile_course["log"]


def test_each_student_gets_the_notebook_canvas_named_for_them_and_nobody_elses(hostile_course):
    submitted = hostile_course["course"] / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted(OWN)
    for student, label in OWN.items():
        folder = submitted / student / UNIT
        assert sorted(p.name for p in folder.iterdir()) == [NOTEBOOK], student
        assert read(folder / NOTEBOOK).metadata["handed_in_as"] == label, student


@pytest.mark.parametrize("attack", SKIPPED)
def test_every_file_left_out_is_named_with_the_student_and_the_reason(hostile_course, attack):
    log = hostile_course["log"]
    for line in SKIPPED[attack]:
        line = line.format(target=hostile_course["target"])
        assert line in log, (line, log)


def test_one_line_per_file_left_out_and_none_forged(hostile_course):
    log = hostile_course["log"]
    skipped = sum(len(lines) for lines in SKIPPED.values())
    assert log.count("Not collected: ") == skipped
    assert (f"{UNIT}: {len(OWN)} submissions in submitted/, {skipped} files not collected"
            in log)
    # the name with a line break inside is shown escaped, on its own line
    assert not [line for line in log.splitlines()
                if line.startswith("[ZipCollectApp | WARNING] Student 1236")]


def test_nothing_is_written_outside_submitted_and_downloaded(hostile_course, tmp_path_factory):
    course = hostile_course["course"]
    assert _files(course, leave_out=("submitted", "downloaded")) == hostile_course["before"]
    assert {p.name for p in course.parent.iterdir()} == hostile_course["around"]
    assert not hostile_course["target"].exists()
    assert not list(tmp_path_factory.getbasetemp().rglob("escaped*"))
    extracted = course / "downloaded" / UNIT / "extracted"
    assert {p.name for p in extracted.iterdir()} == EXTRACTED
    for path in extracted.iterdir():
        assert path.is_file() and not path.is_symlink(), path
        assert path.stat().st_size <= LIMITS["max_file_bytes"], path


def test_the_bomb_is_small_on_disk_and_large_unpacked():
    """The bomb that the hostile course's student 1246 uploaded, measured: what unpacking it
    all would have written, against what it takes in Canvas's zip."""
    def unpacked(data: bytes, depth: int = 1) -> tuple[int, int]:
        size = deepest = 0
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                size += info.file_size
                if info.filename.endswith(".zip"):
                    inner, inner_depth = unpacked(z.read(info), depth + 1)
                    size, deepest = size + inner, max(deepest, inner_depth)
        return size, max(depth, deepest)

    size, depth = unpacked(_bomb(levels=6))
    assert len(_bomb(levels=6)) < 64 * 1024 and size > 120 * MIB and depth == 6


def _nbgrader_grades_only(student: str, course, monkeypatch) -> bool:
    """Whether `nbgrader autograde UNIT --student <student>`, as course_grader.worker calls
    it, reads the id and finds that student's folder alone in a course that also holds other
    students."""
    folders = {s: course / "submitted" / s / "u" for s in (student, "1234", "a1", "ab")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(course)
    app = AutogradeApp()
    try:
        app.initialize(["u", f"--student={student}"])
    except SystemExit:
        return False
    finally:
        app.clear_instance()
    found = glob.glob(app.coursedir.format_path("submitted", app.coursedir.student_id, "u"))
    return found == [str(folders[student])]


@pytest.mark.parametrize("student", ["1234", "0042", "a.b@example.org", "o'brien", "lee carol",
                                     "=1+1", "@SUM(1)", "+1_000", "1e3", "-x", "-1e3"])
def test_an_id_that_nbgrader_can_grade_passes(student, tmp_path, monkeypatch):
    assert student_id_problem(student) is None
    assert _nbgrader_grades_only(student, tmp_path, monkeypatch)


@pytest.mark.parametrize("student, reason, nbgrader_fails", [
    (" 1234", "white space", True), ("1234 ", "white space", True),
    ("a[1]", "glob character", True), ("a*", "glob character", True),
    ("a?", "glob character", True),
    # not folder names of their own, or too long for a PostgreSQL gradebook (varchar(128))
    ("", "empty", False), ("..", "'.' and '..'", False), ("a/b", "path separator", False),
    ("x" * 129, "128 characters", False), ("a\nb", "control character", False),
])
def test_an_id_that_nbgrader_cannot_grade_is_refused_with_the_reason(
        student, reason, nbgrader_fails, tmp_path, monkeypatch):
    assert reason in student_id_problem(student)
    if nbgrader_fails:
        assert not _nbgrader_grades_only(student, tmp_path, monkeypatch)


def test_the_collector_refuses_an_id_that_nbgrader_cannot_grade(caplog):
    """Canvas's ids are digits; an instructor's own pattern may take ids from elsewhere."""
    collector = CanvasCollector(named_regexp=r"(?P<student_id>.+?)__(?P<file_id>.+)")
    with caplog.at_level(logging.WARNING):
        assert collector.collect(f"/any/a[1]__{NOTEBOOK}") is None
        assert collector.collect(f"/any/ 1234__{NOTEBOOK}") is None
    assert (f"Not collected: a[1]__{NOTEBOOK} (student id 'a[1]' cannot be graded: it holds "
            "'['") in caplog.text
    assert (f"Not collected:  1234__{NOTEBOOK} (student id ' 1234' cannot be graded: white "
            "space") in caplog.text


def test_an_upload_that_the_instructors_pattern_would_give_another_student_is_refused(
        tmp_path, caplog):
    """With a greedy `named_regexp` of the instructor's, `bob-` + `alice-x.ipynb` would read
    as student `bob-alice`: the extractor checks each renamed notebook reads as its
    uploader's."""
    parent = Configurable()
    parent.collector_plugin_inst = CanvasCollector(
        named_regexp=r"(?P<student_id>.+)-(?P<file_id>.+)")
    archive, extracted = tmp_path / "archive", tmp_path / "extracted"
    archive.mkdir()
    extracted.mkdir()
    (archive / "download.zip").write_bytes(_zip(
        ("bob-notes.zip", _zip(("alice-x.ipynb", b"{}"), ("y.ipynb", b"{}")))))
    with caplog.at_level(logging.WARNING):
        CanvasExtractor(parent=parent).extract(str(archive), str(extracted))
    assert [p.name for p in extracted.iterdir()] == ["bob-y.ipynb"]
    assert ("Not collected: bob-notes.zip: alice-x.ipynb (student bob: renamed "
            "bob-alice-x.ipynb, it would not be the student's)") in caplog.text
