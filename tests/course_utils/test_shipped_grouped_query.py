"""The shipped translators of unit 09: the file holds today's recipe and data, the recipe is the
one lecture 06 trains its Transformer with, each model has the key/value heads its name says
and translates as lecture 09 says, and the loader refuses anything else with a clear error."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, read

from course_utils import shipped_grouped_query as unit09
from course_utils import shipped_translators
from course_utils.data import translation
from course_utils.translator import evaluate


@pytest.fixture(scope="module")
def task():
    return unit09.make_task()


def test_the_file_holds_todays_recipe_data_and_every_variant():
    metadata = unit09.shipped_metadata()
    assert metadata["recipe"] == json.loads(json.dumps(
        {"task": unit09.TASK, "sizes": unit09.SIZES, "recipe": unit09.RECIPE,
         "variants": unit09.VARIANTS, "seed": 0}))
    assert metadata["data_sha256"] == shipped_translators.data_digest(unit09.make_task())
    assert set(metadata["results"]) == set(unit09.VARIANTS)
    assert oct(unit09.SHIPPED.stat().st_mode & 0o777) == "0o644"


def test_the_recipe_is_the_one_lecture_06_trains_its_transformer_with():
    code = re.sub(r"\s+", " ", "\n".join(
        c.source for c in read(ROOT / "lectures" / "06_transformer.ipynb").cells
        if c.cell_type == "code"))
    assert unit09.TASK == shipped_translators.TASK  # lecture 06's pairs are unit 03's
    assert "d_model, n_heads, d_ff = 48, 4, 96" in code
    sizes = {**unit09.SIZES, "d_model": "d_model", "n_heads": "n_heads", "d_ff": "d_ff"}
    written = ", ".join(f'"{k}": {v}' for k, v in sizes.items())
    assert f"SIZES = {{{written}}}" in code
    assert (unit09.SIZES["d_model"], unit09.SIZES["n_heads"], unit09.SIZES["d_ff"]) == (48, 4, 96)
    assert f"EPOCHS = {unit09.RECIPE['epochs']}" in code
    assert '"Transformer": {"batch_size": 64, "lr": 5e-3}' in code
    assert (unit09.RECIPE["batch_size"], unit09.RECIPE["lr"]) == (64, 5e-3)
    assert 'schedule="linear"' in code and unit09.RECIPE["schedule"] == "linear"


@pytest.mark.parametrize("name", list(unit09.VARIANTS))
def test_each_shipped_model_has_its_key_value_heads_and_translates_as_lecture_09_says(task,
                                                                                     name):
    model, history = unit09.load(name, task)
    assert not model.training
    assert model.config.n_kv_heads == unit09.VARIANTS[name]  # chosen by the config
    for layer in model.decoder:
        for attention in (layer.self_attn, layer.cross_attn):
            assert attention.n_kv_heads == unit09.VARIANTS[name]
            assert attention.w_k.weight.shape == (unit09.VARIANTS[name] * 12, 48)  # d_k = 12
    for layer in model.encoder:  # the encoder is never cached: multi-head as in unit 06
        assert layer.self_attn.n_kv_heads == unit09.SIZES["n_heads"]
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    exact = float(evaluate(model, data).float().mean())
    assert exact >= 0.985  # lecture 09: about 99% or more for each
    measured = unit09.shipped_metadata()["results"][name]["exact_match"]
    assert exact == pytest.approx(measured, abs=0.005)
    assert history.steps_per_epoch == 94  # 6,000 pairs in batches of 64
    assert len(history.loss) == unit09.RECIPE["epochs"] * 94
    assert history.epoch_loss()[-1] < history.epoch_loss()[0]


def test_write_and_load_round_trip_and_refusals(tmp_path, monkeypatch):
    """A file written by write_shipped (one pass over 512 pairs, one variant, to keep it quick)
    loads back exactly; a changed recipe, other pairs, an unknown or unwritten name and a
    missing file are refused with what to do."""
    monkeypatch.setattr(unit09, "TASK", {**unit09.TASK, "n_train": 512, "n_test": 8})
    monkeypatch.setitem(unit09.RECIPE, "epochs", 1)
    monkeypatch.setattr(unit09, "VARIANTS", {"multi-query": 1})
    path = tmp_path / "grouped_query.safetensors"
    results = unit09.write_shipped(path, progress=False)
    assert set(results) == {"multi-query"} and results["multi-query"]["steps_per_epoch"] == 8
    small = unit09.make_task()
    model, history = unit09.load("multi-query", small, path)
    again, _ = unit09.load("multi-query", small, path)
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert a.equal(b)
    assert len(history.loss) == 8 and history.seconds == results["multi-query"]["seconds"]

    with pytest.raises(ValueError, match="^name must be .multi-query.; got .multi-head."):
        unit09.load("multi-head", small, path)  # not a variant of this (patched) recipe
    with pytest.raises(ValueError, match="other pairs .*make translators"):
        unit09.load("multi-query", translation.make_task(n_train=100, n_test=10, seed=1,
                                                         max_numbers=8), path)
    monkeypatch.setattr(unit09, "VARIANTS", {"multi-query": 1, "multi-head": 4})
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit09.load("multi-query", small, path)
    monkeypatch.setattr(unit09, "VARIANTS", {"multi-query": 1})
    monkeypatch.setitem(unit09.RECIPE, "lr", 1e-3)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit09.load("multi-query", small, path)
    monkeypatch.setitem(unit09.RECIPE, "lr", 5e-3)
    with pytest.raises(FileNotFoundError, match="make translators"):
        unit09.load("multi-query", small, tmp_path / "missing.safetensors")
