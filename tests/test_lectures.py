"""Every lecture, executed on two CPU code paths: exact outputs strictly, results of training
within bands.

Outputs come in two kinds (README, "Exact and machine-dependent outputs"):

* **exact**: shapes, formulas, data, untrained computations. Compared character for character
  by `pytest --nbval`, on this machine's native PyTorch CPU code path *and* on the portable one
  (`ATEN_CPU_CAPABILITY=default`), so an output that depends on the CPU fails here, on every
  contributor's machine, and not only on a student's.
* **machine-dependent**: results of training (losses, accuracies, which example comes out
  right, timings). Their cells carry the tag `nbval-ignore-output`: nbval runs them but does
  not compare what they print. Instead, every claim the lecture's text makes about them is
  listed below with a band, and checked on the values that each run computed.

One run per lecture and code path does both jobs. The values are read out of the lecture's own
kernel by an IPython start-up hook that this module writes into a private IPYTHONDIR: after the
lecture's last code cell has run, it evaluates the claims' expressions (reads of the
lecture's variables) and stores the results as JSON. Nothing is added to the lecture, and
nothing is printed.
The two runs of a lecture go side by side (lectures train on one thread; the machine has two).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, notebooks, read

LECTURES = notebooks("lectures")
CODE_PATHS = {"native": None, "default": "default"}  # value of ATEN_CPU_CAPABILITY
IGNORE_TAG = "nbval-ignore-output"


@dataclass(frozen=True)
class Claim:
    """A sentence of the lecture about a result of training, as a band on an expression.

    `expression` is evaluated in the lecture's namespace once, after the last cell (keep it
    free of side effects that matter: no training); its value must lie in [low, high]. Next
    to each claim, a comment gives the values measured when the band was set (seeds and code
    paths), so that a band can be judged: wide enough for any CPU, narrow enough to catch a
    real regression."""

    text: str
    expression: str
    low: float = -math.inf
    high: float = math.inf


def exact_match(name: str) -> str:
    return f"float(correct[{name!r}].float().mean())"


def share(name: str, bucket: str) -> str:
    return f"results[{name!r}][{bucket!r}][0]"


PARAMETER_FREE = ("dot", "scaled_dot", "cosine")  # lecture 04's score functions without weights
LEARNED = ("additive", "multiplicative")

# Each claim: the sentence of the lecture it checks, and next to it the values measured when
# the band was set (native AVX-512 path / ATEN_CPU_CAPABILITY=default, seed 0).
CLAIMS: dict[str, list[Claim]] = {
    "03_attention_seq2seq": [
        # 0.994 / ...
        Claim("attention: about 99% of held-out lists right", exact_match("attention"), 0.985),
        # 0.153 / ...
        Claim("no attention (same recipe): a minority right", exact_match("no attention"),
              high=0.40),
        Claim("attention beats no attention by at least 60 points",
              f"{exact_match('attention')} - {exact_match('no attention')}", 0.60),
        # 0.986 / ...
        Claim("a forward encoder translates nearly as well", exact_match(
            "attention, forward encoder"), 0.95),
        # 0.0 / ...
        Claim("no attention: none right from 21 words on", share("no attention", "21-30"),
              high=0.02),
        # 0.077 / ...
        Claim("no attention: few of the middle lengths", share("no attention", "11-20"),
              high=0.30),
        # 0.52 / ...
        Claim("no attention: some of the short lists right", share("no attention", "5-10"),
              0.15),
        # 0.988 / ...
        Claim("attention: flat near the top up to 30 words",
              f"min({share('attention', '5-10')}, {share('attention', '11-20')}, "
              f"{share('attention', '21-30')})", 0.95),
        # 0.950 / ...
        Claim("bidirectional: the peak is on the true word for around 95% of digits",
              "hit_rate['attention']['digits']", 0.88),
        # 0.92 / ...
        Claim("bidirectional: digit misses mostly one word to the left",
              "offsets['attention']['digits'].get(-1, 0)"
              " / (1 - offsets['attention']['digits'].get(0, 0))", 0.5),
        # 0.58 / ...
        Claim("forward encoder: far fewer digit peaks on the true word",
              "hit_rate['attention']['digits'] - hit_rate['attention, forward encoder']['digits']",
              0.15),
        # 0.42 / 0.42 of 0.42 misses ...
        Claim("forward encoder: most misses one word to the right",
              "offsets['attention, forward encoder']['digits'].get(1, 0)"
              " / (1 - offsets['attention, forward encoder']['digits'].get(0, 0))", 0.5),
        # 0.013 / ...
        Claim("attention: training loss falls far lower than without",
              "history['attention'].epoch_loss()[-1] / history['no attention'].epoch_loss()[-1]",
              high=0.2),
    ],
    "04_attention_variants": [
        # 0.990 / ...
        Claim("additive: more than 95% exact match", "results['additive']['exact match']", 0.95),
        # 0.984 / ...
        Claim("multiplicative: more than 95% exact match",
              "results['multiplicative']['exact match']", 0.95),
        # 0.220 / ...
        Claim("parameter-free scores: fewer than two lists in five",
              f"max(results[s]['exact match'] for s in {PARAMETER_FREE})", high=0.40),
        # 0.764 / ...
        Claim("parameter-free scores: more than 50 points behind the learned maps",
              f"min(results[s]['exact match'] for s in {LEARNED})"
              f" - max(results[s]['exact match'] for s in {PARAMETER_FREE})", 0.50),
        # 0.411 / ...
        Claim("parameter-free scores: token accuracy over 20 points above exact match",
              f"min(results[s]['token accuracy'] - results[s]['exact match']"
              f" for s in {PARAMETER_FREE})", 0.20),
        # 14.8 / ...
        Claim("parameter-free scores: last-epoch loss at least 5 times the learned maps'",
              f"min(results[s]['last-epoch loss'] for s in {PARAMETER_FREE})"
              f" / max(results[s]['last-epoch loss'] for s in {LEARNED})", 5.0),
        # -0.035 / ...
        Claim("scaling the dot product does not help inside the GRU model",
              "results['scaled_dot']['exact match'] - results['dot']['exact match']",
              high=0.05),
        # 0.58 / ...
        Claim("dot model: encoder states' root mean square well below 1",
              "real_states.pow(2).mean().sqrt().item()", high=0.8),
        # 14.6 / ...
        Claim("dot: scores span more than five units per row",
              "attention_stats['dot'][0]", 5.0),
        # 0.68 / ...
        Claim("dot: the softmax is sharp but not saturated", "attention_stats['dot'][1]",
              0.3, 0.95),
        # 0.145 / ...
        Claim("scaled dot: scores several times narrower than dot's",
              "attention_stats['scaled_dot'][0] / attention_stats['dot'][0]", high=0.4),
        # 0.19 / ...
        Claim("scaled dot: largest weight below a third", "attention_stats['scaled_dot'][1]",
              high=0.33),
        # 0.51 / ...
        Claim("cosine: the learned scale g went down, below 1", "g", high=1.0),
        # 0.23 / ...
        Claim("cosine: a row of scores spans a fraction of a unit",
              "attention_stats['cosine'][0]", high=1.0),
        # 0.01 / ...
        Claim("cosine: largest weight within a few hundredths of uniform",
              "attention_stats['cosine'][1] - uniform.item()", high=0.05),
        # 1.34 / ...
        Claim("no score makes a training step twice as expensive as another",
              "max(step_seconds.values()) / min(step_seconds.values())", high=2.0),
        # 4.8 / ... (timings: only margins far larger than the noise of a busy machine)
        Claim("PyTorch's attention clearly faster than the course's on long sequences",
              "seconds['course_utils SDPA'][-1] / seconds['torch SDPA'][-1]", 1.5),
        # 60 / ...
        Claim("additive scores cost more than 10 times the matrix form at T = 512",
              "seconds['additive scores'][-1] / seconds['course_utils SDPA'][3]", 10.0),
    ],
}


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
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env",
         "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"),
         "-p", "no:cacheprovider", "-q", "--no-header", "-rf", str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )
    values = json.loads(values_file.read_text()) if values_file.exists() else {}
    return Run(proc.returncode, proc.stdout[-6000:] + proc.stderr[-2000:], values)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[tuple[str, str], Run]:
    """Every selected lecture on every selected code path, two runs at a time (one thread
    each)."""
    wanted = {(item.callspec.params["path"], item.callspec.params.get("code_path"))
              for item in request.session.items
              if item.module is sys.modules[__name__] and "runs" in item.fixturenames}
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
        f"lecture's claim about it as a band in tests/test_lectures.py.\n{run.report}")


@pytest.mark.parametrize("code_path", CODE_PATHS)
@pytest.mark.parametrize("path", LECTURES, ids=_id)
def test_claims_about_training_hold(runs, path, code_path):
    values = runs[path.stem, code_path].values
    failures = []
    for claim in CLAIMS.get(path.stem, []):
        value = values.get(claim.text)
        if not isinstance(value, float):
            failures.append(f"{claim.text}: `{claim.expression}` gave no number ({value})")
        elif not claim.low <= value <= claim.high:
            failures.append(f"{claim.text}: {value:.4g} outside [{claim.low}, {claim.high}]")
    assert not failures, f"{path.name} ({code_path}):\n  " + "\n  ".join(failures)


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
