"""`ruff check` is clean on the package, the tests, the configuration and every notebook."""

import subprocess

from conftest import BIN, ROOT


def test_ruff_check_is_clean():
    targets = ["course_utils", "tests", "nbgrader_config.py", "lectures", "solutions", "exercises"]
    proc = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", *targets], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All checks passed" in proc.stdout
