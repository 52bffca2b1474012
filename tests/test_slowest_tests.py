""".ci/slowest_tests.py, which `make bench` starts with: the slowest tests and files of the last
`make test`, by wall time, with the CPU time that tests/conftest.py records for each test."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.a" name="test_one" time="10.0">
  <properties><property name="cpu_seconds" value="4.5"/></properties></testcase>
<testcase classname="tests.a" name="test_two" time="2.0">
  <properties><property name="cpu_seconds" value="1.5"/></properties></testcase>
<testcase classname="tests.b" name="test_three" time="7.0"/>
</testsuite></testsuites>"""


def run(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "slowest_tests.py"), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_slowest_tests_and_files_with_their_cpu_time(tmp_path):
    report = tmp_path / "durations.xml"
    report.write_text(REPORT)
    lines = run("--top", "2", str(report)).splitlines()
    assert lines[1:3] == ["     10.0 s  tests.a::test_one", "      7.0 s  tests.b::test_three"]
    files = lines[lines.index(next(x for x in lines if x.startswith("slowest 2 files"))) + 1:]
    assert files[0].split() == ["12.0", "s", "6.0", "CPU-s", "tests.a"]
    assert files[1].split() == ["7.0", "s", "0.0", "CPU-s", "tests.b"]
    assert files[2] == "sum of all durations: 19 s (0.3 min); CPU: 0.1 CPU-min"


def test_a_missing_report_says_what_to_run(tmp_path):
    assert "run `make test` first" in run(str(tmp_path / "nowhere.xml"))
