"""The shipped Transformer of unit 06: the file holds today's recipe and data, the recipe is the one
lecture 06 shows and reads the weights with, the model translates as lecture 06 says and is the
model lecture 09 ships as its multi-head variant, is_shipped tells the shipped recipe from any
other, and the loader refuses anything else with a clear error."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, read

from course_utils import shipped_grouped_query, shipped_translators
from course_utils import shipped_transformer as unit06
from course_utils.data import translation
from course_utils.transformer import Transformer
from course_utils.translator import evaluate


def lecture_code() -> str:
    return re.sub(r"\s+", " ", "\n".join(
        c.source for c in read(ROOT / "lectures" / "06_transformer.ipynb").cells
        if c.cell_type == "code"))


def test_the_file_holds_todays_recipe_and_data():
    metadata = unit06.shipped_metadata()
    assert metadata["recipe"] == json.loads(json.dumps(
        {"task": unit06.TASK, "sizes": unit06.SIZES, "recipe": unit06.RECIPE, "seed": 0}))
    assert metadata["data_sha256"] == shipped_translators.data_digest(unit06.make_task())
    assert set(metadata["results"]) == {unit06.NAME}
    assert oct(unit06.SHIPPED.stat().st_mode & 0o777) == "0o644"


def test_the_recipe_is_the_one_lecture_06_shows_and_reads_the_weights_with():
    code = lecture_code()
    assert unit06.TASK == shipped_translators.TASK  # lecture 06's pairs are unit 03's
    assert "d_model, n_heads, d_ff = 48, 4, 96" in code
    sizes = {**unit06.SIZES, "d_model": "d_model", "n_heads": "n_heads", "d_ff": "d_ff"}
    written = ", ".join(f'"{k}": {v}' for k, v in sizes.items())
    assert f"SIZES = {{{written}}}" in code
    assert f"EPOCHS = {unit06.RECIPE['epochs']}" in code
    assert '"Transformer": {"batch_size": 64, "lr": 5e-3}' in code
    assert 'schedule="linear"' in code and unit06.RECIPE["schedule"] == "linear"
    assert (unit06.RECIPE["batch_size"], unit06.RECIPE["lr"]) == (64, 5e-3)
    # the lecture reads the file only for this recipe, and trains with it otherwise
    assert ('unit06.is_shipped(SIZES, epochs=EPOCHS, schedule="linear", '
            '**RECIPES["Transformer"])') in code
    assert "unit06.load(task)" in code


def test_is_shipped_accepts_the_shipped_recipe_only():
    assert unit06.is_shipped(dict(unit06.SIZES), **unit06.RECIPE)
    assert not unit06.is_shipped({**unit06.SIZES, "norm_first": False}, **unit06.RECIPE)
    assert not unit06.is_shipped(unit06.SIZES, **{**unit06.RECIPE, "epochs": 2})
    assert not unit06.is_shipped(unit06.SIZES, **{**unit06.RECIPE, "schedule": "constant"})
    recipe = {k: v for k, v in unit06.RECIPE.items() if k != "schedule"}
    assert not unit06.is_shipped(unit06.SIZES, **recipe)


def test_the_shipped_model_translates_as_lecture_06_says_and_is_lecture_09s_multi_head():
    task = unit06.make_task()
    model, history = unit06.load(task)
    assert type(model) is Transformer and not model.training
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    exact = float(evaluate(model, data).float().mean())
    assert exact >= 0.99  # lecture 06: at least 99% of the held-out lists
    assert exact == pytest.approx(unit06.shipped_metadata()["results"][unit06.NAME]
                                  ["exact_match"], abs=0.005)
    assert history.steps_per_epoch == 94 and len(history.loss) == 6 * 94  # 6,000 pairs / 64
    assert history.epoch_loss()[-1] < 0.01 < history.epoch_loss()[0]
    # both files hold lecture 06's recipe from the same seed: the same weights
    multi_head, _ = shipped_grouped_query.load("multi-head", task)
    ours, theirs = model.state_dict(), multi_head.state_dict()
    assert set(ours) == set(theirs) and all(ours[k].equal(theirs[k]) for k in ours)


def test_write_and_load_round_trip_and_refusals(tmp_path, monkeypatch):
    """A file written by write_shipped (one pass over 512 pairs, to keep it quick) loads back
    exactly; a changed recipe, other pairs and a missing file are refused with what to do."""
    monkeypatch.setattr(unit06, "TASK", {**unit06.TASK, "n_train": 512, "n_test": 8})
    monkeypatch.setitem(unit06.RECIPE, "epochs", 1)
    path = tmp_path / "transformer.safetensors"
    results = unit06.write_shipped(path, progress=False)
    assert results[unit06.NAME]["steps_per_epoch"] == 8
    small = unit06.make_task()
    model, history = unit06.load(small, path)
    again, _ = unit06.load(small, path)
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert a.equal(b)
    assert len(history.loss) == 8 and history.seconds == results[unit06.NAME]["seconds"]
    trained, _ = unit06.train_transformer(small, progress=False)  # the same code, seed, data
    for a, b in zip(model.state_dict().values(), trained.state_dict().values(), strict=True):
        assert a.equal(b)

    with pytest.raises(ValueError, match="other pairs .*make translators"):
        unit06.load(translation.make_task(n_train=100, n_test=10, seed=1, max_numbers=8), path)
    monkeypatch.setitem(unit06.RECIPE, "lr", 1e-3)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit06.load(small, path)
    monkeypatch.setitem(unit06.RECIPE, "lr", 5e-3)
    monkeypatch.setitem(unit06.SIZES, "norm_first", False)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit06.load(small, path)
    monkeypatch.setitem(unit06.SIZES, "norm_first", True)
    with pytest.raises(FileNotFoundError, match="make translators"):
        unit06.load(small, tmp_path / "missing.safetensors")
