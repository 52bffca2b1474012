"""`make bench`: wall time and peak memory of a full execution of every notebook.

Each notebook runs in a fresh kernel, started by a fresh runner process so that the peak
resident memory of that kernel (the largest child the runner waited for) is measured alone.
Prints a table and the suite total; it asserts nothing (budgets are read, not tested).

    python .ci/benchmark_notebooks.py [NOTEBOOK ...]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BUDGET_SECONDS = 90


def run_one(path: Path) -> dict:
    """Execute one notebook in a new kernel; return its wall time and the kernel's peak RSS."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    seconds = time.perf_counter() - start
    errors = [o.get("ename") for c in nb.cells for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    # On Linux ru_maxrss is in KiB; the kernel is the only child this process waited for.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"seconds": seconds, "peak_mib": peak_kib / 1024, "errors": errors}


def main(paths: list[Path]) -> None:
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ, MPLBACKEND="Agg", PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    rows, total = [], 0.0
    print(f"{'notebook':<62} {'wall s':>8} {'peak MiB':>9}  budget", flush=True)
    for path in paths:
        proc = subprocess.run([sys.executable, __file__, "--one", str(path)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{path.relative_to(ROOT)!s:<62} FAILED\n{proc.stderr[-2000:]}", flush=True)
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        total += result["seconds"]
        verdict = "ok" if result["seconds"] <= BUDGET_SECONDS else f"OVER {BUDGET_SECONDS} s"
        if result["errors"]:
            verdict += f" (errors: {result['errors']})"
        rows.append((path, result))
        print(f"{path.relative_to(ROOT)!s:<62} {result['seconds']:8.1f} "
              f"{result['peak_mib']:9.0f}  {verdict}", flush=True)
    print(f"{'total (' + str(len(rows)) + ' notebooks)':<62} {total:8.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(run_one(Path(sys.argv[2]))))
    else:
        chosen = [Path(p).resolve() for p in sys.argv[1:]] or sorted(
            list(ROOT.glob("lectures/*.ipynb")) + list(ROOT.glob("solutions/*/*.ipynb")))
        main(chosen)
