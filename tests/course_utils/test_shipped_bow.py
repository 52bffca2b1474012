"""Lecture 01's shipped models (hand-set weights, dot attention, the three with positions): the
file holds today's recipe and corpus, its models are what lecture 01 says of them and what its
own `train` call trains, and the loader refuses anything else with a clear error."""

from __future__ import annotations

import ast
import json
import re

import pytest
import torch
from conftest import ROOT, read
from safetensors.torch import load_file, save_file

from course_utils import shipped_bow
from course_utils.bow import BagOfWordsLM, perplexity
from course_utils.data.corpus import load_corpus


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_the_file_holds_todays_recipe_corpus_and_every_variant(corpus):
    metadata = shipped_bow.shipped_metadata()
    assert metadata["recipe"] == json.loads(json.dumps(shipped_bow.recipe()))
    assert metadata["data_sha256"] == shipped_bow.data_digest(corpus)
    assert set(metadata["results"]) == set(shipped_bow.VARIANTS)
    assert oct(shipped_bow.SHIPPED.stat().st_mode & 0o777) == "0o644"


def test_the_recipe_is_lecture_01s_own_train_call():
    code = "\n".join(c.source for c in read(ROOT / "lectures" /
                                              "01_bag_of_words_attention.ipynb").cells
                     if c.cell_type == "code")
    for name, expected in (("MODEL_SETTINGS", shipped_bow.MODEL),
                           ("TRAIN_SETTINGS", shipped_bow.TRAINING)):
        literal = re.search(rf"^{name} = (\{{.*?\}})", code, flags=re.M)[1]
        assert ast.literal_eval(literal) == expected, name
    assert "def train(name, seed=0, word_weights=None, **config):" in code
    assert "generator = seed_everything(seed)" in code and shipped_bow.SEED == 0
    assert "models[name] = bow.BagOfWordsLM(config, word_weights)" in code
    uncommented = "\n".join(line.split("#")[0] for line in code.splitlines())
    for name in shipped_bow.VARIANTS:  # the lecture reads every variant, and trains none
        assert f'load("{name}")' in uncommented and f'train("{name}"' not in uncommented
    # the idf bag's documents are the lecture's: sentences ended by the same marks
    ends = re.search(r"ends=vocab\.encode\((\[.*?\])\)", code)[1]
    assert ast.literal_eval(ends) == list(shipped_bow.SENTENCE_ENDS)
    # the flags of each variant are those that sections 4-6 describe
    assert shipped_bow.VARIANTS["recency weights"] == {"pooling": "recency"}
    assert shipped_bow.VARIANTS["idf weights"] == {"pooling": "idf"}
    assert shipped_bow.VARIANTS["position only (control)"] == {"pooling": "position"}
    assert all(v.get("positions") for k, v in shipped_bow.VARIANTS.items() if "+" in k)


@pytest.mark.parametrize("name, low, high", [
    ("recency weights", 58, 64),  # lecture 01: nearly 4% better than the mean bag
    ("idf weights", 61, 67),  # worse than the mean bag
    ("attention, dot", 62, 69),  # worse than the mean bag, about as bad as the bigram
    ("attention, dot + positions", 60, 66),  # lecture 01: about a tie with the mean bag
    ("attention, feed-forward + positions", 57, 63),  # the best model
    ("position only (control)", 58, 64),  # about 3% better than the mean bag
])
def test_each_model_is_what_the_lecture_says_and_what_the_file_measured(corpus, name, low,
                                                                          high):
    model, history = shipped_bow.load(name, corpus)
    assert isinstance(model, BagOfWordsLM) and not model.training
    assert len(history.loss) == shipped_bow.TRAINING["n_steps"]
    assert sum(history.loss[-50:]) < sum(history.loss[:50])
    ppl = perplexity(model, corpus.heldout_ids)
    assert low <= ppl <= high
    measured = shipped_bow.shipped_metadata()["results"][name]["perplexity"]
    assert ppl == pytest.approx(measured, rel=2e-3)  # another CPU: the last digits


def test_the_idf_bag_weighs_words_by_their_idf_over_the_training_sentences(corpus):
    model, _ = shipped_bow.load("idf weights", corpus)
    idf = shipped_bow.idf_weights(corpus)
    assert torch.equal(model.word_weight, idf)
    vocab = corpus.vocab
    period, king = vocab.encode(["."])[0], vocab.encode(["king"])[0]
    assert idf[king] > 3 * idf[period] > 0  # a rare word weighs more than the commonest mark


def test_train_variant_is_the_shipped_run(corpus, monkeypatch):
    """A few steps of train_variant from scratch twice: the same seed, the same run; and
    its first steps' losses are those the shipped file recorded (on this CPU exactly, on
    another within float error)."""
    monkeypatch.setitem(shipped_bow.TRAINING, "n_steps", 5)
    name = "position only (control)"
    first, h1 = shipped_bow.train_variant(corpus, name, progress=False)
    torch.randn(10)  # move the global generator on
    second, h2 = shipped_bow.train_variant(corpus, name, progress=False)
    assert h1.loss == h2.loss and not first.training
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    monkeypatch.undo()
    _, shipped = shipped_bow.load(name, corpus)
    assert h1.loss == pytest.approx(shipped.loss[:5], rel=1e-4)


def test_load_refuses_other_recipes_corpora_names_and_files(corpus, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="name must be one of"):
        shipped_bow.load("bigram", corpus)
    with pytest.raises(FileNotFoundError, match="make translators"):
        shipped_bow.load("position only (control)", corpus, tmp_path / "missing.safetensors")
    smaller = load_corpus(vocab_size=500)
    with pytest.raises(ValueError, match="another corpus .*make translators"):
        shipped_bow.load("position only (control)", smaller)
    tensors = load_file(str(shipped_bow.SHIPPED))
    metadata = {k: v for k, v in shipped_bow.shipped_metadata().items()
                if k in ("data_sha256", "torch")}
    metadata |= {"recipe": json.dumps(shipped_bow.recipe()),
                 "results": json.dumps(shipped_bow.shipped_metadata()["results"])}
    bad = tmp_path / "bad.safetensors"
    save_file({k: v for k, v in tensors.items() if not k.startswith("position only")},
              str(bad), metadata)
    with pytest.raises(ValueError, match="does not hold the weights"):
        shipped_bow.load("position only (control)", corpus, bad)
    save_file(tensors, str(bad), {"made": "elsewhere"})
    with pytest.raises(ValueError, match="not written by shipped_bow"):
        shipped_bow.load("position only (control)", corpus, bad)
    monkeypatch.setitem(shipped_bow.TRAINING, "lr", 0.02)
    with pytest.raises(ValueError, match="recipe .*make translators"):
        shipped_bow.load("position only (control)", corpus)
