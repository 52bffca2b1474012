"""README and the guides in course_publish/guides/: README stays short and points to every
guide by its path, its PyTorch advice comes before the first `make lab`, and the limits the
instructors' guide quotes are the ones the grader's code and configuration set."""

from __future__ import annotations

import re

from conftest import ROOT
from traitlets.config.loader import PyFileConfigLoader

from course_grader import autograde, checker, nbgrader_hooks, sandbox
from course_grader.lms import CanvasExtractor
from course_publish.site import GUIDES, guides

README = (ROOT / "README.md").read_text()
GiB, MiB = 1024**3, 1024**2


def test_readme_is_a_five_minute_read_that_points_to_every_guide_by_its_path():
    assert len(README.splitlines()) <= 250
    linked = set(re.findall(r"\]\((course_publish/guides/[^)]+)\)", README))
    assert linked == {str(path.relative_to(ROOT)) for path in guides()}
    assert len(linked) >= 3


def test_the_cpu_only_pytorch_advice_comes_before_the_first_make_lab():
    blocks = re.findall(r"^```bash\n(.*?)^```", README, flags=re.M | re.S)
    first = next(block for block in blocks if "make lab" in block)
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu make lab" in first


def limits_table() -> dict[str, list[float]]:
    """The instructors' guide's table | what | limit | set by |: the numbers of each row's
    limit, keyed by the first name its last column gives in backticks."""
    text = (GUIDES / "instructors.md").read_text()
    table = re.search(r"^\| what \| limit \| set by \|\n\|[-|]+\|\n((?:\|.*\n)+)", text,
                      flags=re.M)
    assert table, "the instructors' guide has no table of limits"
    rows = {}
    for row in table.group(1).splitlines():
        _, limit, where = (cell.strip() for cell in row.strip("|").split("|"))
        name = re.search(r"`([^`]+)`", where).group(1).split(" ")[0]
        rows[name] = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", limit)]
    return rows


def setting(config, cls, name: str):
    """What nbgrader_config.py sets for `cls.name`, or the trait's default."""
    section = config[cls.__name__]
    return section[name] if name in section else cls.class_traits()[name].default_value


def code_limits() -> dict[str, list[float]]:
    """The same limits as nbgrader_config.py and the grader's code set them, in the guide's
    units (GiB, MiB)."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    execute, canvas = nbgrader_hooks.SafeExecute, CanvasExtractor
    kernel, check = sandbox.Limits(), nbgrader_hooks.CHECKER_LIMITS
    return {
        "c.Execute.timeout": [config.Execute.timeout],
        "c.SafeExecute.backstop_factor": [setting(config, execute, "backstop_factor")],
        "c.SafeExecute.max_replays": [setting(config, execute, "max_replays")],
        "c.SafeExecute.max_output_chars": [setting(config, execute, "max_output_chars")],
        "sandbox.Limits": [kernel.cpu_seconds, kernel.wall_seconds, kernel.memory_bytes / GiB,
                           kernel.processes],
        "nbgrader_hooks.CHECKER_LIMITS": [check["cpu_seconds"], check["wall_seconds"],
                                          check["memory_bytes"] / GiB],
        "checker.MAX_CALLBACK_GRAPH_BYTES": [checker.MAX_CALLBACK_GRAPH_BYTES / MiB],
        "autograde.MAX_FILES": [autograde.MAX_FILES, autograde.MAX_FILE_BYTES / MiB,
                                autograde.MAX_TOTAL_BYTES / MiB],
        "autograde.ATTEMPTS": [autograde.ATTEMPTS],
        "c.CanvasExtractor.max_depth": [
            setting(config, canvas, "max_depth"), setting(config, canvas, "max_members"),
            setting(config, canvas, "max_file_bytes") / MiB,
            setting(config, canvas, "max_student_bytes") / MiB,
            setting(config, canvas, "max_ratio")],
    }


def test_the_instructors_guide_quotes_the_graders_limits_as_the_code_sets_them():
    assert limits_table() == code_limits()


def test_a_limit_changed_in_the_code_no_longer_matches_the_guide(monkeypatch):
    """A control: the comparison reads every number (a checker's CPU limit of 1,801 s)."""
    monkeypatch.setitem(nbgrader_hooks.CHECKER_LIMITS, "cpu_seconds", 1801)
    assert limits_table() != code_limits()
