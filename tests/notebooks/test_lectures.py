"""Every lecture, executed on two CPU code paths: exact outputs strictly, results of training
within bands.

Outputs come in two kinds (course_publish/guides/contributors.md, "Exact and machine-dependent
outputs"):

* **exact**: shapes, formulas, data, untrained computations. Compared character for character
  by `pytest --nbval`, on this machine's native PyTorch CPU code path *and* on the portable one
  (`ATEN_CPU_CAPABILITY=default`), so an output that depends on the CPU fails here, on every
  contributor's machine, and not only on a student's.
* **machine-dependent**: results of training (losses, accuracies, which example comes out
  right, timings). Their cells carry the tag `nbval-ignore-output`: nbval runs them but does
  not compare what they print. Instead, every claim the lecture's text makes about them is
  listed in its module of `lecture_specs` with a band, and checked on the values that each
  run computed.

Claims about **wall time** (a cache's speed-up, one model's step against another's) are
listed the same way but marked `timing(...)`: every run must compute them, and `make bench`
(which sets COURSE_TIMING_CLAIMS=1) asserts their bands, on a machine quiet enough to time;
the test suite, whose other tests run side by side with the lectures, only prints them.

One run per lecture and code path does both jobs. The values are read out of the lecture's own
kernel by an IPython start-up hook that this module writes into a private IPYTHONDIR: after the
lecture's last code cell has run, it evaluates the claims' expressions (reads of the
lecture's variables) and stores the results as JSON. Nothing is added to the lecture, and
nothing is printed.
The two runs of a lecture go side by side, each pinned to a core of its own (lectures train on
one thread, or, as lecture 07 does, on as many as they may use: here one).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, notebooks, read
from lecture_specs import spec

LECTURES = notebooks("lectures")
CODE_PATHS = {"native": None, "default": "default"}  # value of ATEN_CPU_CAPABILITY
IGNORE_TAG = "nbval-ignore-output"
# The cores that runs are pinned to, one run per core (None: no pinning where the system has
# no affinity, or fewer than two cores).
FREE_CPUS: queue.Queue = queue.Queue()
for _cpu in (sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity")
             and len(os.sched_getaffinity(0)) >= 2 else [None, None]):
    FREE_CPUS.put(_cpu)


# `make bench` sets it: the timing claims' bands are then asserted, not only printed.
TIMINGS = os.environ.get("COURSE_TIMING_CLAIMS") == "1"
# Each lecture's claims, in tests/notebooks/lecture_specs/lecture_NN.py.
CLAIMS = {path.stem: spec(path.stem).CLAIMS for path in LECTURES}


# ----------------------------------------------------------------------------- running

HOOK = textwrap.dedent('''
    def _course_claims_hook():
        import json, math, os
        expressions = json.loads(os.environ["COURSE_CLAIM_EXPRESSIONS"])
        path = os.environ["COURSE_CLAIM_FILE"]
        last_cell = os.environ["COURSE_CLAIM_LAST_CELL"].strip()
        shell = get_ipython()

        def record(result):
            if result.info.raw_cell.strip() != last_cell:
                return
            found = {}
            for name, expression in expressions.items():
                try:
                    value = float(eval(expression, shell.user_ns))
                except Exception as error:
                    found[name] = f"{type(error).__name__}: {error}"
                    continue
                found[name] = value if math.isfinite(value) else repr(value)
            with open(path, "w") as f:
                json.dump(found, f)

        shell.events.register("post_run_cell", record)

    _course_claims_hook()
    del _course_claims_hook
''')


@dataclass
class Run:
    returncode: int
    report: str
    values: dict[str, float]


def _run(path: Path, capability: str | None, workdir: Path) -> Run:
    ipython_dir = workdir / "ipython"
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-course-claims.py").write_text(HOOK)
    values_file = workdir / "values.json"
    claims = CLAIMS.get(path.stem, [])
    code = [cell.source for cell in read(path).cells
            if cell.cell_type == "code" and cell.source.strip()]
    env = dict(os.environ, IPYTHONDIR=str(ipython_dir), COURSE_CLAIM_FILE=str(values_file),
               COURSE_CLAIM_LAST_CELL=code[-1],
               COURSE_CLAIM_EXPRESSIONS=json.dumps({c.text: c.expression for c in claims}))
    env.pop("ATEN_CPU_CAPABILITY", None)
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend, as when a student runs it
    if capability:
        env["ATEN_CPU_CAPABILITY"] = capability
    cpu = FREE_CPUS.get()  # a core of its own: a lecture that takes every core it may run on
    try:                   # (training.available_cpus) then takes one
        pin = "" if cpu is None else f"os.sched_setaffinity(0, {{{cpu}}}); "
        proc = subprocess.run(
            [sys.executable, "-c", f"import os, sys, pytest; {pin}sys.exit(pytest.main())",
             "--nbval", "--nbval-current-env",
             "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"),
             "-p", "no:cacheprovider", "-q", "--no-header", "-rf", str(path)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
        )
    finally:
        FREE_CPUS.put(cpu)
    values = json.loads(values_file.read_text()) if values_file.exists() else {}
    return Run(proc.returncode, proc.stdout[-6000:] + proc.stderr[-2000:], values)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[tuple[str, str], Run]:
    """Every selected lecture on every selected code path, two runs at a time (each pinned to
    a core of its own)."""
    wanted = {(item.callspec.params["path"], item.callspec.params.get("code_path"))
              for item in request.session.items
              if getattr(item, "module", None) is sys.modules[__name__]
              and "runs" in item.fixturenames}  # (nbval's notebook cells have no module)
    jobs = [(path, name, capability) for path in LECTURES
            for name, capability in CODE_PATHS.items() if (path, name) in wanted]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {(path.stem, name): pool.submit(
            _run, path, capability, tmp_path_factory.mktemp(f"{path.stem}-{name}"))
            for path, name, capability in jobs}
        return {key: future.result() for key, future in futures.items()}


def _id(path: Path) -> str:
    return path.stem


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("code_path", CODE_PATHS)
@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_exact_outputs_are_reproduced(runs, path, code_path):
    run = runs[path.stem, code_path]
    assert run.returncode == 0, (
        f"{path.name} on the {code_path} CPU code path: an output that nbval compares came out "
        f"differently. If it is a result of training, tag its cell {IGNORE_TAG!r} and state the "
        f"lecture's claim about it as a band in tests/notebooks/test_lectures.py.\n{run.report}")


@pytest.mark.parametrize("code_path", CODE_PATHS)
@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_claims_about_training_hold(runs, path, code_path):
    values = runs[path.stem, code_path].values
    failures = []
    for claim in CLAIMS.get(path.stem, []):
        value = values.get(claim.text)
        print(f"{claim.text}: {value}")  # `pytest -rP` shows the values, to judge the bands
        if not isinstance(value, float):
            failures.append(f"{claim.text}: `{claim.expression}` gave no number ({value})")
        elif claim.timing and not TIMINGS:
            continue  # printed above; `make bench` asserts it
        elif not claim.low <= value <= claim.high:
            failures.append(f"{claim.text}: {value:.4g} outside [{claim.low}, {claim.high}]")
    assert not failures, f"{path.name} ({code_path}):\n  " + "\n  ".join(failures)


def test_every_claim_about_wall_time_is_marked_as_a_timing():
    """A band on seconds asserted in the suite fails when the machine is busy: any claim that
    reads a time must be a timing(...) claim, which `make bench` checks."""
    words = ("seconds", "speedup", "six_passes")
    for lecture, claims in CLAIMS.items():
        for claim in claims:
            if any(word in claim.expression for word in words):
                assert claim.timing, f"{lecture}: {claim.text!r} reads a time; use timing(...)"


@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_training_cells_are_not_compared_and_every_lecture_states_its_claims(path):
    """A lecture that trains has machine-dependent outputs: they must be tagged, and its text's
    claims about them must be listed here (a lecture with no training needs neither)."""
    cells = [c for c in read(path).cells if c.cell_type == "code"]
    trains = any("train(" in c.source or "fit(" in c.source or "train_lm(" in c.source
                 for c in cells)
    tagged = [c for c in cells if IGNORE_TAG in c.metadata.get("tags", [])]
    if trains:
        assert tagged, f"{path.name} trains models but tags no cell {IGNORE_TAG!r}"
        assert CLAIMS.get(path.stem), f"{path.name} trains models but lists no claims here"
