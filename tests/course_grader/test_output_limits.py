"""The output a graded cell may keep (`nbgrader_hooks.clip_output`): cut to the budget,
cleaned of control characters, and cheap for a huge line."""

from __future__ import annotations

from course_grader import nbgrader_hooks
from course_grader.nbgrader_hooks import clip_output


def test_a_stream_within_the_budget_is_kept_and_cleaned():
    text = "ok\x00\x07\x1b[2J\udcff end\n"
    content = {"name": "stdout", "text": text}
    assert clip_output("stream", content, budget=100, limit=100) == len(text)
    assert content["text"] == "ok\ufffd\ufffd\x1b[2J\ufffd end\n"  # ESC stays: ANSI colours


def test_a_stream_over_the_budget_is_cut_then_cleaned_and_says_so():
    content = {"name": "stdout", "text": "a\x00b" * 10}
    assert clip_output("stream", content, budget=5, limit=20) == 5
    kept, note = content["text"][:5], content["text"][5:]
    assert kept == "a\ufffdba\ufffd"
    assert "output cut here" in note and "at most 20 characters" in note


def test_a_huge_line_is_cut_before_it_is_cleaned(monkeypatch):
    """The cleaning pass reads only what is kept. Cleaning all of a 50 MB line first (a third
    of a second on an idle machine, in the grader, which also relays the line to the
    checker) made the cell outlive a 20 s limit under load: 2 of 4 such submissions graded
    four at a time beside two busy processes on 2 cores, against 0 of 8 when cut first."""
    cleaned = []
    pattern = nbgrader_hooks._CONTROL

    class Recording:
        def sub(self, repl, text):
            cleaned.append(len(text))
            return pattern.sub(repl, text)

    monkeypatch.setattr(nbgrader_hooks, "_CONTROL", Recording())
    content = {"name": "stdout", "text": "x" * 50_000_000}
    assert clip_output("stream", content, budget=20_000, limit=20_000) == 20_000
    assert content["text"].startswith("x" * 20_000) and len(content["text"]) < 20_200
    assert cleaned == [20_000]


def test_display_data_over_the_budget_is_replaced_by_the_note():
    content = {"data": {"text/plain": "y" * 1000, "image/png": "z" * 5000}, "metadata": {"a": 1}}
    assert clip_output("display_data", content, budget=100, limit=100) == 100
    assert list(content["data"]) == ["text/plain"]
    assert "output cut here" in content["data"]["text/plain"]
    assert content["metadata"] == {}


def test_an_error_keeps_its_name_and_as_many_traceback_lines_as_fit():
    content = {"ename": "Value\x00Error", "evalue": "bad",
               "traceback": ["l1" * 10, "l2" * 10, "l3" * 10]}
    clip_output("error", content, budget=45, limit=45)
    assert content["ename"] == "Value\ufffdError"
    assert content["traceback"][:2] == ["l1" * 10, "l2" * 10]
    assert "output cut here" in content["traceback"][2]
