"""The shipped pointer models of unit 09: the file holds today's recipe and rows, the recipe is
lecture 05's pointer model trained longer on fresh rows, each model has the attention and the
layers its name says and answers as lecture 09 says, and the loader refuses anything else with a
clear error."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import ROOT, read

from course_utils import shipped_long_inputs as unit09
from course_utils.long_inputs import elu_feature_map
from course_utils.pointer_model import accuracy


@pytest.fixture(scope="module")
def sets():
    return unit09.make_data()


def test_the_file_holds_todays_recipe_rows_and_every_variant(sets):
    metadata = unit09.shipped_metadata()
    assert metadata["recipe"] == json.loads(json.dumps(
        {"data": unit09.DATA, "sizes": unit09.SIZES, "recipe": unit09.RECIPE,
         "variants": unit09.VARIANTS, "seed": 0}))
    assert metadata["data_sha256"] == unit09.data_digest(sets)
    assert set(metadata["results"]) == set(unit09.VARIANTS)
    assert oct(unit09.SHIPPED.stat().st_mode & 0o777) == "0o644"


def test_the_rows_are_fresh_at_every_step_and_the_far_ones_out_of_the_windows_reach(sets):
    assert len(sets.train) == unit09.RECIPE["n_steps"] * unit09.RECIPE["batch_size"]
    distance = sets.far.length - sets.far.target  # (N,)
    assert int(distance.min()) == unit09.DATA["window"] + 1
    assert int((sets.anywhere.length - sets.anywhere.target).min()) == 1


def test_the_recipe_is_lecture_05s_pointer_model_trained_five_times_longer():
    code = re.sub(r"\s+", " ", "\n".join(
        c.source for c in read(ROOT / "lectures" / "05_self_attention.ipynb").cells
        if c.cell_type == "code"))
    written = ", ".join(f'"{k}": {v}' for k, v in {**unit09.SIZES, "n_layers": 1}.items())
    assert f"SIZES = {{{written}}}" in code
    assert 'RECIPE = {"n_steps": 600, "batch_size": 64, "lr": 1e-2}' in code
    assert unit09.RECIPE == {"n_steps": 5 * 600, "batch_size": 64, "lr": 1e-2}


WINDOW = unit09.DATA["window"]
EXPECTED = {  # name -> (window, feature_map, layers, far pointers answered: low, high)
    "full": (None, None, 1, 0.95, 1.0),
    "window": (WINDOW, None, 1, 0.0, 0.1),
    "window, 4 layers": (WINDOW, None, 4, 0.0, 1.0),
    "linear": (None, elu_feature_map, 1, 0.9, 1.0),
}


@pytest.mark.parametrize("name", list(unit09.VARIANTS))
def test_each_shipped_model_has_its_attention_and_answers_as_lecture_09_says(sets, name):
    model, history = unit09.load(name, sets)
    window, feature_map, n_layers, low, high = EXPECTED[name]
    assert not model.training and len(model.blocks) == n_layers
    assert (model.config.window, model.config.feature_map) == (window, feature_map)
    for block in model.blocks:  # every block built with the config's attention
        attention = block.attention
        assert (attention.window, attention.feature_map) == (window, feature_map)
        assert attention.n_kv_heads == attention.n_heads and not attention.causal
    far = accuracy(model, sets.far)
    assert low <= far <= high
    assert far == pytest.approx(unit09.shipped_metadata()["results"][name]["far"], abs=0.005)
    assert len(history.loss) == unit09.RECIPE["n_steps"]
    assert history.running_loss(100)[1][-1] < history.running_loss(100)[1][0]


def test_write_and_load_round_trip_and_refusals(tmp_path, monkeypatch):
    """A file written by write_shipped (20 steps on 640 rows, one variant, to keep it quick)
    loads back exactly; a changed recipe, other rows, an unknown or unwritten name and a
    missing file are refused with what to do."""
    monkeypatch.setitem(unit09.DATA, "n_train", 640)
    monkeypatch.setitem(unit09.DATA, "n_test", 50)
    monkeypatch.setitem(unit09.RECIPE, "n_steps", 20)
    monkeypatch.setattr(unit09, "VARIANTS", {"linear": ("linear", 1)})
    path = tmp_path / "long_inputs.safetensors"
    results = unit09.write_shipped(path, progress=False)
    assert set(results) == {"linear"} and results["linear"]["steps_per_epoch"] == 10
    small = unit09.make_data()
    model, history = unit09.load("linear", small, path)
    again, _ = unit09.load("linear", small, path)
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert a.equal(b)
    assert len(history.loss) == 20 and history.seconds == results["linear"]["seconds"]
    assert accuracy(model, small.far) == pytest.approx(results["linear"]["far"], abs=1e-4)

    with pytest.raises(ValueError, match="^name must be .linear.; got .full."):
        unit09.load("full", small, path)  # not a variant of this (patched) recipe
    other = unit09.PointerSets(small.anywhere, small.far, small.anywhere)
    with pytest.raises(ValueError, match="other rows .*make translators"):
        unit09.load("linear", other, path)
    monkeypatch.setattr(unit09, "VARIANTS", {"linear": ("linear", 1), "full": ("full", 1)})
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit09.load("linear", small, path)
    monkeypatch.setattr(unit09, "VARIANTS", {"linear": ("linear", 1)})
    monkeypatch.setitem(unit09.RECIPE, "lr", 3e-3)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit09.load("linear", small, path)
    monkeypatch.setitem(unit09.RECIPE, "lr", 1e-2)
    with pytest.raises(FileNotFoundError, match="make translators"):
        unit09.load("linear", small, tmp_path / "missing.safetensors")


def test_a_feature_map_is_refused_for_a_variant_without_linear_attention():
    rows = unit09.make_data(n_train=1000).train
    with pytest.raises(ValueError, match=r"^feature_map is linear attention's; variant "
                                         r"'window' has window attention"):
        unit09.build(rows, "window", feature_map=elu_feature_map)
    model = unit09.build(rows, "linear", feature_map=torch.exp)
    assert model.config.feature_map is torch.exp
