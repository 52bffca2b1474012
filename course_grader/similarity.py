"""A class-wide similarity report: each student's answers compared with everyone else's, with
the reference code of `course_utils` and with the unit's solutions.

    python -m course_grader.similarity UNIT [--course DIR] [--out DIR] [--threshold 0.5]
    make similarity UNIT=...

The comparison is copydetect's (PyPI): each answer is tokenised (names, strings and numbers
replaced by their kind, so renaming variables hides nothing), cut into overlapping runs of
characters, fingerprinted by winnowing, and two answers share what their fingerprints share.
An answer is what a student wrote in one solution cell (by the release's grade ids; any other
cell the student added counts as one more answer, `other`); what the release already holds
(signatures, docstrings, set-up) is boilerplate and never counts. A student's answer is
compared with the same task's answer of every other student, and with every reference file.

For every pair it writes `<out>/similarity_<unit>.csv` (student, task, other, the share of the
student's answer found in the other's and the reverse, tokens shared) and
`<out>/similarity_<unit>.html`, the pairs at or above the threshold with the shared code marked
(a static page: no script, nothing fetched, every text escaped). The pairs at or above the
threshold also go to `<course>/similarity/<unit>.json`, which `course_grader.report` adds to
each student's flags. Student ids come from folder names and never become file names here.

Exit code 0 on success, 2 when the unit has no release or no submission to compare.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from copydetect import CopyDetector

from course_grader.report import SIMILARITY_DIR, safe_cell

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.5
MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$", flags=re.M)


class SimilarityError(Exception):
    """What stops the report, said in one line."""


@dataclass(frozen=True)
class Pair:
    student: str
    task: str
    other: str          # another student's id, or a reference file (course_utils/x.py, ...)
    share: float        # of the student's answer found in the other's
    other_share: float  # of the other's code found in the student's answer
    tokens: int
    marked: str = ""    # the student's answer, escaped, the shared runs in <mark>
    other_marked: str = ""


def code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def answers(submission: nbformat.NotebookNode, release: nbformat.NotebookNode) -> dict[str, str]:
    """What the student wrote, by task: each release solution cell's grade id, and `other` for
    code cells the release does not have. Cells left as released are no answer."""
    released = {c.source.strip() for c in code_cells(release)}
    tasks = [c.metadata.get("nbgrader", {}).get("grade_id") for c in code_cells(release)
             if c.metadata.get("nbgrader", {}).get("solution")]
    found: dict[str, list[str]] = {}
    for cell in code_cells(submission):
        if cell.source.strip() in released or not cell.source.strip():
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        found.setdefault(grade_id if grade_id in tasks else "other", []).append(cell.source)
    return {task: "\n\n".join(parts) for task, parts in found.items()}


def references(unit: str, root: Path = ROOT) -> dict[str, str]:
    """The code a student may not hand in as theirs: course_utils' modules (the check
    convention and the data aside) and the unit's solution cells."""
    refs = {}
    for path in sorted((root / "course_utils").rglob("*.py")):
        rel = path.relative_to(root)
        if {"grading", "data"} & set(rel.parts) or path.name == "__init__.py":
            continue
        refs[str(rel)] = path.read_text(encoding="utf-8")
    for source in sorted((root / "solutions" / unit).glob("*.ipynb")):
        for cell in code_cells(nbformat.read(source, as_version=4)):
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("solution"):
                refs[f"solutions/{unit}/{meta['grade_id']}"] = MARKERS.sub("", cell.source)
    return refs


def submissions(course: Path, unit: str) -> dict[str, list[Path]]:
    """Each student's notebooks of `unit` in `<course>/submitted/` (links are not followed)."""
    found = {}
    for folder in sorted((course / "submitted").glob(f"*/{unit}")):
        if folder.is_symlink() or folder.parent.is_symlink() or not folder.is_dir():
            continue
        notebooks = [p for p in sorted(folder.glob("*.ipynb"))
                     if p.is_file() and not p.is_symlink()]
        if notebooks:
            found[folder.parent.name] = notebooks
    return found


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    return path


def _marked(code: str) -> str:
    """copydetect's highlight (escaped code, shared runs in a span) as <mark> elements."""
    return re.sub(r"<span class='highlight-(?:red|green)'>(.*?)</span>", r"<mark>\1</mark>",
                  code, flags=re.S)


def _detect(tests: Path, refs: Path, boilerplate: Path, threshold: float, *,
            same_task: bool) -> CopyDetector:
    detector = CopyDetector(test_dirs=[str(tests)], ref_dirs=[str(refs)],
                            boilerplate_dirs=[str(boilerplate)], extensions=["py"],
                            display_t=threshold, same_name_only=same_task,
                            ignore_leaf=same_task, autoopen=False, silent=True)
    detector.run()
    return detector


def _pairs(detector: CopyDetector, name_of: dict[str, tuple[str, str]],
           other_name: dict[str, str]) -> list[Pair]:
    """Every compared pair with something shared; the code marked for those above display_t."""
    marked = {(str(row[2]), str(row[3])): (row[4], row[5])
              for row in detector.get_copied_code_list()}
    pairs = []
    for i, test in enumerate(detector.test_files):
        for j, ref in enumerate(detector.ref_files):
            share, other_share = detector.similarity_matrix[i, j]
            if share <= 0 or str(test) == str(ref):
                continue
            student, task = name_of[str(test)]
            shown = marked.get((str(test), str(ref)), ("", ""))
            pairs.append(Pair(student, task, other_name[str(ref)], float(share),
                              float(other_share), int(detector.token_overlap_matrix[i, j]),
                              _marked(shown[0]), _marked(shown[1])))
    return pairs


def compare(course: Path, unit: str, threshold: float = THRESHOLD,
            root: Path = ROOT) -> list[Pair]:
    """Every pair of (student's answer, other answer or reference) that shares code."""
    release_path = course / "release" / unit / f"{unit}.ipynb"
    if not release_path.is_file():
        release_path = root / "exercises" / unit / f"{unit}.ipynb"
    if not release_path.is_file():
        raise SimilarityError(f"no release of {unit!r}: run `make release` first")
    release = nbformat.read(release_path, as_version=4)
    handed_in = submissions(course, unit)
    if not handed_in:
        raise SimilarityError(f"no submission of {unit!r} in {course / 'submitted'}")
    with tempfile.TemporaryDirectory(prefix="similarity-") as work:
        work = Path(work)
        name_of, other_name = {}, {}
        for number, (student, notebooks) in enumerate(sorted(handed_in.items())):
            folder = work / "students" / f"s{number:05d}"   # never a name a student chose
            for notebook in notebooks:
                try:
                    nb = nbformat.read(notebook, as_version=4)
                except Exception:  # noqa: BLE001 - an unreadable notebook has no answer
                    continue
                for task, text in answers(nb, release).items():
                    path = _write(folder, task, text)
                    name_of[str(path)] = (student, task)
                    other_name[str(path)] = student
        for number, (name, text) in enumerate(references(unit, root).items()):
            path = _write(work / "references", f"r{number:05d}", text)
            other_name[str(path)] = name
        _write(work / "boilerplate", "release",
               "\n\n".join(c.source for c in code_cells(release)))
        if not name_of:
            return []
        among = _detect(work / "students", work / "students", work / "boilerplate", threshold,
                        same_task=True)
        against = _detect(work / "students", work / "references", work / "boilerplate",
                          threshold, same_task=False)
        return _pairs(among, name_of, other_name) + _pairs(against, name_of, other_name)


def write_csv(pairs: list[Pair], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "task", "other", "share", "other_share", "tokens"])
        for p in sorted(pairs, key=lambda p: (-p.share, p.student, p.task, p.other)):
            writer.writerow([safe_cell(p.student), safe_cell(p.task), safe_cell(p.other),
                             round(p.share, 3), round(p.other_share, 3), p.tokens])


def write_html(pairs: list[Pair], unit: str, threshold: float, path: Path) -> None:
    shown = sorted((p for p in pairs if p.share >= threshold), key=lambda p: -p.share)
    rows = "".join(
        f"<section><h2>{html.escape(p.student)}, {html.escape(p.task)}: {p.share:.0%} found in "
        f"{html.escape(p.other)} ({p.tokens} tokens)</h2><div class='pair'>"
        f"<pre>{p.marked}</pre><pre>{p.other_marked}</pre></div></section>" for p in shown)
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Similarity, {html.escape(unit)}</title><style>"
        "body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:.5em;"
        "overflow:auto;flex:1}.pair{display:flex;gap:1em}mark{background:#fd9}</style>"
        f"</head><body><h1>Similarity, {html.escape(unit)}</h1><p>{len(shown)} answers share "
        f"{threshold:.0%} or more of their code with another student's answer or with the "
        "course's reference code (left: the student's answer, shared code marked; right: the "
        "other).</p>" + (rows or "<p>None.</p>") + "</body></html>\n")
    path.write_text(page, encoding="utf-8")


def write_flags(pairs: list[Pair], course: Path, unit: str, threshold: float) -> Path:
    """`<course>/similarity/<unit>.json`: per student, one note per pair at the threshold."""
    notes: dict[str, list[str]] = {}
    for p in sorted(pairs, key=lambda p: -p.share):
        if p.share >= threshold:
            notes.setdefault(p.student, []).append(
                f"similarity: {p.share:.0%} of {p.task} found in {p.other}")
    folder = course / SIMILARITY_DIR
    folder.mkdir(exist_ok=True)
    path = folder / f"{unit}.json"
    path.write_text(json.dumps(notes, indent=1, sort_keys=True), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.similarity",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("unit")
    parser.add_argument("--course", type=Path, default=Path.cwd())
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args(argv)
    if not 0 < args.threshold <= 1:
        parser.error(f"--threshold must be a share in (0, 1], got {args.threshold}")
    try:
        pairs = compare(args.course, args.unit, args.threshold)
    except SimilarityError as error:
        print(f"similarity: {error}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(pairs, args.out / f"similarity_{args.unit}.csv")
    write_html(pairs, args.unit, args.threshold, args.out / f"similarity_{args.unit}.html")
    write_flags(pairs, args.course, args.unit, args.threshold)
    flagged = sorted({p.student for p in pairs if p.share >= args.threshold})
    print(f"{args.unit}: {len(flagged)} student(s) with an answer {args.threshold:.0%} or more "
          f"shared: {', '.join(flagged) or 'none'}; see {args.out}/similarity_{args.unit}.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
