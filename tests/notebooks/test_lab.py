"""`make lab` serves JupyterLab with the nbgrader and widget extensions (started here headless)."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
from conftest import ROOT, UNITS, jupyter

TOKEN = "course-test-token"


def _get(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:  # localhost only
        return response.status, response.read().decode()


@pytest.fixture(scope="module")
def lab_url(tmp_path_factory):
    with jupyter("lab", ROOT, TOKEN, tmp_path_factory.mktemp("jupyter-runtime")) as base:
        yield base


def test_lab_lists_the_nbgrader_and_widget_extensions(lab_url):
    status, page = _get(f"{lab_url}/lab?token={TOKEN}")
    assert status == 200
    config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S)[1])
    names = {ext["name"] for ext in config["federated_extensions"]}
    assert "@jupyter/nbgrader" in names
    assert "@jupyter-widgets/jupyterlab-manager" in names
    assert not any("nbgrader" in d for d in config.get("disabledExtensions", []))


def test_formgrader_is_served_for_this_course(lab_url):
    status, page = _get(f"{lab_url}/formgrader/manage_assignments")
    assert status == 200 and "Manage Assignments" in page
    status, body = _get(f"{lab_url}/formgrader/api/assignments")
    assert status == 200
    names = {a["name"] for a in json.loads(body)}
    assert set(UNITS) <= names, f"formgrader sees {names}, not the course's units {UNITS}"


def test_lab_saves_widget_state_with_the_notebook(lab_url):
    """Without it, a lecture run and saved in JupyterLab reopens with "Error displaying
    widget: model not found" where its slider was (`make setup` writes the override)."""
    status, body = _get(f"{lab_url}/lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin")
    assert status == 200
    plugin = json.loads(body)  # overrides.json replaces the default in the schema
    assert plugin["schema"]["properties"]["saveState"]["default"] is True
