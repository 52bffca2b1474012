"""Staging a submission for grading is bounded: file count, file size, total size."""

from __future__ import annotations

import time
from pathlib import Path

import nbformat

from course_grader import autograde

NAME = "unit_nb"


def submission(tmp_path: Path) -> Path:
    folder = tmp_path / "submitted" / "alice" / "u"
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(nb, folder / f"{NAME}.ipynb")
    return folder


def stage(tmp_path: Path) -> tuple[list[str], Path]:
    notes = autograde.stage_submission(tmp_path, "u", "alice", [NAME], tmp_path / "stage")
    return notes, tmp_path / "stage" / "alice" / "u"


def test_a_few_small_files_are_staged_with_the_notebook(tmp_path):
    folder = submission(tmp_path)
    (folder / "data.csv").write_text("1,2\n")
    notes, staged = stage(tmp_path)
    assert notes == []
    assert sorted(p.name for p in staged.iterdir()) == ["data.csv", f"{NAME}.ipynb"]


def test_twenty_thousand_files_stage_only_the_notebook_and_fast(tmp_path):
    folder = submission(tmp_path)
    for i in range(20_000):
        (folder / f"junk{i:05d}.txt").write_text("x")
    start = time.monotonic()
    notes, staged = stage(tmp_path)
    elapsed = time.monotonic() - start
    print(f"staged a folder of 20,001 files in {elapsed:.3f} s")
    assert [p.name for p in staged.iterdir()] == [f"{NAME}.ipynb"]
    assert any(f"more than {autograde.MAX_FILES} files" in n for n in notes), notes


def test_an_oversized_file_or_notebook_is_left_out_and_said_so(tmp_path):
    folder = submission(tmp_path)
    with (folder / "big.bin").open("wb") as f:
        f.truncate(autograde.MAX_FILE_BYTES + 1)
    notes, staged = stage(tmp_path)
    assert not (staged / "big.bin").exists()
    assert any("ignored big.bin" in n for n in notes), notes
    with (folder / f"{NAME}.ipynb").open("ab") as f:
        f.truncate(autograde.MAX_FILE_BYTES + 1)
    notes, staged = stage(tmp_path)
    assert not (staged / f"{NAME}.ipynb").exists()
    assert any(f"no notebook {NAME}.ipynb submitted" in n for n in notes), notes


def test_files_beyond_the_total_size_are_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(autograde, "MAX_TOTAL_BYTES", 10)
    folder = submission(tmp_path)
    (folder / "a.txt").write_text("123456")
    (folder / "b.txt").write_text("123456")
    notes, staged = stage(tmp_path)
    assert (staged / "a.txt").exists() and not (staged / "b.txt").exists()
    assert any("ignored b.txt" in n for n in notes), notes


def test_links_and_folders_are_not_staged(tmp_path):
    folder = submission(tmp_path)
    (folder / "link").symlink_to("/etc/passwd")
    (folder / "sub").mkdir()
    (folder / "sub" / "f.txt").write_text("x")
    notes, staged = stage(tmp_path)
    assert sorted(p.name for p in staged.iterdir()) == [f"{NAME}.ipynb"]
    assert "ignored the symbolic link link" in notes
