"""`make bench`: the slowest tests of the last `make test`, read from the durations it wrote.

    python .ci/slowest_tests.py [--top 15] [REPORT]

REPORT is the JUnit XML file that `make test` writes (.pytest-durations.xml). Prints the
slowest tests (a module's shared set-up counts in its first test), then the slowest files
(a file's tests run on one worker), then the sum of all
durations: with two workers the suite's wall time is about half that sum at best.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def durations(report: Path) -> list[tuple[float, str]]:
    """(seconds, test id) of every test case in a JUnit XML report, slowest first."""
    return sorted(((seconds, test_id) for seconds, _, test_id in measures(report)),
                  reverse=True)


def measures(report: Path) -> list[tuple[float, float, str]]:
    """(wall seconds, CPU seconds, test id) of every test case; the CPU seconds are the
    `cpu_seconds` property that tests/conftest.py records (0 where a case has none)."""
    cases = []
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        cpu = sum(float(p.get("value", 0)) for p in case.iter("property")
                  if p.get("name") == "cpu_seconds")
        cases.append((float(case.get("time", 0.0)), cpu, test_id))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", default=str(ROOT / ".pytest-durations.xml"))
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    report = Path(args.report)
    if not report.is_file():
        print(f"no test durations at {report}: run `make test` first")
        return 0
    cases = durations(report)
    print(f"slowest {args.top} of {len(cases)} tests (last make test, {report.name}):")
    for seconds, test_id in cases[:args.top]:
        print(f"  {seconds:7.1f} s  {test_id}")
    by_file, cpu_by_file = Counter(), Counter()
    for seconds, cpu, test_id in measures(report):
        by_file[test_id.split("::")[0]] += seconds  # the classname: the module (or notebook)
        cpu_by_file[test_id.split("::")[0]] += cpu
    print(f"slowest {min(args.top, len(by_file))} files (wall time; CPU time of the tests and "
          f"their processes):")
    for name, seconds in by_file.most_common(args.top):
        print(f"  {seconds:7.1f} s  {cpu_by_file[name]:7.1f} CPU-s  {name}")
    total = sum(seconds for seconds, _ in cases)
    print(f"sum of all durations: {total:.0f} s ({total / 60:.1f} min); CPU: "
          f"{sum(cpu_by_file.values()) / 60:.1f} CPU-min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
