"""The shipped translators of units 02-04: each file holds today's recipe and data, its models do
what lectures 02, 03, 04 and 06 say of them, the recipes are the lectures' own, and the loader
refuses anything else with a clear error."""

from __future__ import annotations

import json
import re

import pytest
import torch
from conftest import ROOT, read
from safetensors.torch import load_file, save_file

from course_utils import shipped_translators as unit03
from course_utils.data import translation
from course_utils.transformer import Transformer, TransformerConfig
from course_utils.translator import Seq2Seq, config_for, evaluate, seconds_per_step


@pytest.fixture(scope="module")
def task():
    return unit03.make_task()


@pytest.fixture(scope="module")
def test_data(task):
    return translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)


@pytest.mark.parametrize("recipe", list(unit03.RECIPES.values()), ids=lambda r: r.unit)
def test_each_file_holds_todays_recipe_data_and_every_shipped_variant(recipe):
    metadata = unit03.shipped_metadata(recipe.path)
    assert metadata["recipe"] == json.loads(json.dumps(recipe.as_dict()))
    assert metadata["data_sha256"] == unit03.data_digest(unit03.make_task(recipe))
    assert set(metadata["results"]) == set(recipe.shipped) and set(recipe.shipped) <= set(
        recipe.variants)
    assert unit03.RECIPES[recipe.unit] is recipe
    assert oct(recipe.path.stat().st_mode & 0o777) == "0o644"


def test_the_lectures_train_what_is_not_shipped():
    # lecture 04 trains its multiplicative model, lecture 02 its forward one; lecture 03
    # loads all four of its variants ("attention" is lecture 06's too) and trains only what
    # its questions ask for, through train_and_report
    assert set(unit03.UNIT04.variants) - set(unit03.UNIT04.shipped) == {"multiplicative"}
    assert set(unit03.UNIT02.variants) - set(unit03.UNIT02.shipped) == {"forward"}
    assert set(unit03.SHIPPED_VARIANTS) == set(unit03.VARIANTS)
    code = lecture_code("03_attention_seq2seq")
    assert not re.search(r"^train_and_report\(", code, re.MULTILINE)
    for name in unit03.VARIANTS:
        assert f'load_and_report("{name}")' in code, name


def lecture_code(name: str) -> str:
    return "\n".join(c.source for c in read(ROOT / "lectures" / f"{name}.ipynb").cells
                     if c.cell_type == "code")


def test_unit02s_recipe_is_the_one_lecture_02_trains_its_forward_model_with():
    """Lecture 02 trains "forward" with train_model and loads the two tricks: the file's
    recipe must be train_model's (task, sizes, training settings, the tricks' flags)."""
    code = re.sub(r"\s+", " ", lecture_code("02_seq2seq_rnn"))
    recipe = unit03.UNIT02
    task = ", ".join(f"{k}={v}" for k, v in recipe.task.items())
    assert f"translation.make_task({task})" in code
    sizes = ", ".join(f"{k}={v}" for k, v in recipe.sizes.items())
    assert f"config_for(task, {sizes}, **tricks)" in code
    training = recipe.training
    assert training["schedule"] == "constant" and "schedule=" not in code  # train's default
    call = re.search(r"train\(model, train_data, epochs=(\d+), batch_size=(\d+), "
                     r"lr=([\d.e-]+), generator=generator", code)
    assert call, "lecture 02's train_model call"
    assert (int(call[1]), int(call[2]), float(call[3])) == (
        training["epochs"], training["batch_size"], training["lr"])
    assert recipe.variants["reversed source"] == {"reverse_source": True}
    assert recipe.variants["final state fed to every step"] == {"feed_final": True}
    assert 'train_model("forward")' in code


@pytest.mark.parametrize("recipe, name, low, high", [
    (unit03.UNIT02, "reversed source", 0.15, 0.45),  # lecture 02: not below forward's ~0.2
    (unit03.UNIT02, "final state fed to every step", 0.33, 0.48),  # about two in five
    (unit03.UNIT03, "no attention", 0.0, 0.4),  # lecture 03: a minority right
    (unit03.UNIT03, "attention", 0.985, 1.0),
    (unit03.UNIT03, "attention, forward encoder", 0.95, 1.0),
    (unit03.UNIT03, "Luong", 0.985, 1.0),
    (unit03.UNIT04, "additive", 0.95, 1.0),  # lecture 04: the learned maps above 95% ...
    (unit03.UNIT04, "dot", 0.0, 0.4),  # ... the parameter-free scores below two in five
    (unit03.UNIT04, "scaled_dot", 0.0, 0.4),
    (unit03.UNIT04, "cosine", 0.0, 0.4),
], ids=lambda v: v.unit if isinstance(v, unit03.Recipe) else str(v))
def test_each_shipped_model_translates_as_the_lectures_say(recipe, name, low, high):
    task = unit03.make_task(recipe)
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    model, history = unit03.load(name, task, recipe=recipe)
    assert not model.training
    assert model.config == unit03.build(task, name, recipe).config
    exact = float(evaluate(model, data).float().mean())
    assert low <= exact <= high
    # what the file says it measured, up to a few pairs that another CPU may decode otherwise
    measured = unit03.shipped_metadata(recipe.path)["results"][name]["exact_match"]
    assert exact == pytest.approx(measured, abs=0.005)
    assert len(history.loss) == recipe.training["epochs"] * history.steps_per_epoch
    assert history.steps_per_epoch == 47  # 6,000 pairs in batches of 128
    assert history.epoch_loss()[-1] < history.epoch_loss()[0]


def test_the_variants_differ_in_the_one_thing_they_name(task):
    configs = {name: unit03.build(task, name).config for name in unit03.VARIANTS}
    base = configs["attention"]
    assert configs["no attention"].attention is None
    assert configs["attention, forward encoder"].bidirectional is False
    assert (configs["Luong"].decoder, configs["Luong"].attention) == ("luong", "multiplicative")
    for name, cfg in configs.items():
        changed = {k for k in vars(base) if getattr(cfg, k) != getattr(base, k)}
        assert changed <= set(unit03.VARIANTS[name]) | {"attention"}, (name, changed)


def test_train_variant_seeds_itself_so_two_runs_start_and_batch_alike(task, monkeypatch):
    """Everything train_variant does before the first step is deterministic: the same initial
    weights and the same batches, whatever ran before (trained for a few steps here)."""
    monkeypatch.setitem(unit03.RECIPE, "epochs", 1)
    small = translation.TranslationTask(task.train[:256], task.test[:8], task.src_vocab,
                                        task.tgt_vocab)
    torch.manual_seed(123)
    first, h1 = unit03.train_variant(small, "no attention", progress=False)
    torch.randn(100)  # move the global generator on
    second, h2 = unit03.train_variant(small, "no attention", progress=False)
    assert h1.loss == h2.loss
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_write_and_load_round_trip_and_refusals(task, tmp_path, monkeypatch):
    """A file written by write_shipped (one epoch of one variant, to keep it quick) loads back
    exactly; a changed recipe, other pairs, an unshipped or unknown name, a missing file and
    foreign weights are refused with what to do."""
    monkeypatch.setitem(unit03.RECIPE, "epochs", 1)
    path = tmp_path / "translators.safetensors"
    results = unit03.write_shipped(path, names=("no attention",), progress=False)
    assert set(results) == {"no attention"} and results["no attention"]["steps_per_epoch"] == 47
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    model, history = unit03.load("no attention", task, path)
    again, _ = unit03.load("no attention", task, path)
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert len(history.loss) == 47 and history.seconds == results["no attention"]["seconds"]

    with pytest.raises(ValueError, match=r"shipped variants .*\(train it with train_variant\)"):
        unit03.load("attention", task, path)
    with pytest.raises(ValueError, match="name must be one of"):
        unit03.load("transformer", task, path)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit03.load("no attention", task, path, recipe=unit03.UNIT04)  # unit 03's file
    with pytest.raises(ValueError, match="recipe must be a Recipe"):
        unit03.load("no attention", task, path, recipe="03")
    other = translation.make_task(n_train=100, n_test=10, seed=1, max_numbers=8)
    with pytest.raises(ValueError, match="other pairs .*make translators"):
        unit03.load("no attention", other, path)
    monkeypatch.setitem(unit03.RECIPE, "lr", 3e-3)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        unit03.load("no attention", task, path)
    monkeypatch.setitem(unit03.RECIPE, "lr", 1e-2)
    with pytest.raises(FileNotFoundError, match="make translators"):
        unit03.load("no attention", task, tmp_path / "missing.safetensors")

    tensors = load_file(str(path))
    del tensors[min(k for k in tensors if not k.endswith("/.loss"))]  # one weight missing
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), {k: v for k, v in unit03.shipped_metadata(path).items()
                                  if k in ("data_sha256", "torch")}
              | {"recipe": json.dumps(unit03.UNIT03.as_dict()),
                 "results": json.dumps(results)})
    with pytest.raises(ValueError, match="does not hold the weights"):
        unit03.load("no attention", task, bad)
    save_file(tensors, str(bad), {"made": "elsewhere"})
    with pytest.raises(ValueError, match="not written by shipped_translators"):
        unit03.shipped_metadata(bad)


def test_seconds_per_step_times_a_copy_and_leaves_the_model_alone(task):
    batch = translation.make_batch(task.train[:16], task.src_vocab, task.tgt_vocab)
    for model in (Seq2Seq(unit03.build(task, "attention").config),
                  Transformer(config_for(task, TransformerConfig,
                                         d_model=16, n_heads=2, d_ff=32, n_layers=1))):
        before = {k: v.clone() for k, v in model.state_dict().items()}
        seconds = seconds_per_step(model.eval(), batch, repeats=2)
        assert 0 < seconds < 5
        assert not model.training
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match="loss"):
        seconds_per_step(torch.nn.Linear(2, 2), batch)


def test_with_training_changes_only_the_training_settings_and_is_not_loaded():
    """Lecture 04's third question trains the dot model for twice the budget: the recipe it
    passes differs in the epochs alone, the shipped recipe is left as it was, and the loader
    refuses the longer recipe (its models are not the shipped ones)."""
    longer = unit03.UNIT04.with_training(epochs=8)
    assert longer.training == {**unit03.UNIT04.training, "epochs": 8}
    assert unit03.UNIT04.training["epochs"] == 4
    assert (longer.task, longer.sizes, longer.variants, longer.shipped, longer.path) == (
        unit03.UNIT04.task, unit03.UNIT04.sizes, unit03.UNIT04.variants,
        unit03.UNIT04.shipped, unit03.UNIT04.path)
    with pytest.raises(ValueError, match=r"recipe .*make translators"):
        unit03.load("dot", recipe=longer)
    with pytest.raises(ValueError, match=r"changes the settings \['batch_size', 'epochs', "
                                         r"'lr', 'schedule'\]; got \['epoch'\]"):
        unit03.UNIT04.with_training(epoch=8)


def test_train_variant_trains_other_sizes_on_other_pairs(task, monkeypatch):
    """Lecture 03's questions train models that are none of the variants, on some of the pairs:
    `changes` takes the place of the variant's entry and `data` of task.train; with the
    variant's own entry as `changes`, the model is the variant's, weight for weight. A wrong
    name, changes or data are refused with what was expected."""
    monkeypatch.setitem(unit03.RECIPE, "epochs", 1)
    small = translation.TranslationTask(task.train[:256], task.test[:8], task.src_vocab,
                                        task.tgt_vocab)
    subset = translation.make_batch(task.train[:100], task.src_vocab, task.tgt_vocab)
    narrow, history = unit03.train_variant(small, "attention, d_a 8", progress=False,
                                           changes={"attention": "additive", "d_a": 8},
                                           data=subset)
    assert (narrow.config.d_a, narrow.config.bidirectional, narrow.config.d_h) == (8, True, 64)
    assert history.steps_per_epoch == 1 and len(history.loss) == 1  # 100 pairs, batches of 128
    variant, h1 = unit03.train_variant(small, "no attention", progress=False)
    same, h2 = unit03.train_variant(small, "no attention", progress=False,
                                    changes=dict(unit03.VARIANTS["no attention"]))
    assert h1.steps_per_epoch == 2 and h1.loss == h2.loss  # task.train's 256 pairs
    for a, b in zip(variant.state_dict().values(), same.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"name must be one of .*got 'attention, d_a 8'"):
        unit03.train_variant(small, "attention, d_a 8", progress=False)
    with pytest.raises(ValueError, match=r"changes must be a dict .*got list"):
        unit03.build(small, "narrow", changes=[("d_a", 8)])
    with pytest.raises(ValueError, match=r"data must be a translation.TranslationBatch .*got list"):
        unit03.train_variant(small, "no attention", progress=False, data=task.train[:10])
