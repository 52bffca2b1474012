"""course_utils.shipped_tiny_bert: the file unit 08 reads is today's recipe and learnt it;
save and load round-trip; load refuses a file of another recipe, vocabulary or shape."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from course_utils.bert import BertForPretraining
from course_utils.bert_pretraining import mlm_accuracy, nsp_accuracy, unigram_accuracy
from course_utils.data.stories import make_stories, nsp_pairs
from course_utils.shipped_tiny_bert import (
    data_fingerprint,
    load,
    recipe_metadata,
    save,
    shipped_metadata,
)
from course_utils.tiny_bert import RECIPE, tiny_config
from course_utils.tokenization import SPECIAL_TOKENS, WordPiece

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster


def test_the_shipped_weights_are_todays_recipe_and_learnt_it(story_tok):
    """The file that unit 08 reads: written with today's recipe, vocabulary and pretraining
    data, and a model that does what lecture 07 claims of its own (MLM far above the
    unigram baseline, NSP above chance), within float error of the numbers it was saved with."""
    metadata = shipped_metadata()
    assert json.loads(metadata["recipe"]) == json.loads(json.dumps(recipe_metadata(0)))
    assert {k: metadata[k] for k in ("vocab_sha256", "data_sha256")} == data_fingerprint(story_tok)
    model, tokenizer = load()
    assert not model.training and tokenizer.tokens == story_tok.tokens
    assert model.config == tiny_config(story_tok)
    held = nsp_pairs(make_stories(500, seed=1), 1000, seed=1)  # lecture 07's held-out pairs
    mlm, nsp = mlm_accuracy(model, story_tok, held), nsp_accuracy(model, story_tok, held)
    assert mlm > 2 * unigram_accuracy(story_tok, make_stories(RECIPE.n_stories), held)
    assert nsp > 0.56  # the opening clue alone gives about 0.63 (lecture 07)
    assert mlm == pytest.approx(float(metadata["mlm_accuracy"]), abs=0.005)
    assert nsp == pytest.approx(float(metadata["nsp_accuracy"]), abs=0.01)


def test_save_and_load_round_trip(story_tok, tmp_path):
    torch.manual_seed(3)
    model = BertForPretraining(tiny_config(story_tok))
    path = tmp_path / "tiny.safetensors"
    save(model, story_tok, path, nsp_accuracy=0.5)
    loaded, _ = load(path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert shipped_metadata(path)["nsp_accuracy"] == "0.5000"
    with pytest.raises(ValueError, match="tokenizer has"):
        save(BertForPretraining(tiny_config(story_tok, d_model=32)),
             WordPiece([*SPECIAL_TOKENS, "a"]), path)


def test_load_refuses_other_recipes_files_and_weights(story_tok, tmp_path):
    torch.manual_seed(0)
    model = BertForPretraining(tiny_config(story_tok))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    good = {"recipe": json.dumps(recipe_metadata(0)), **data_fingerprint(story_tok)}
    cases = {
        "n_steps": ({**good, "recipe": json.dumps({**recipe_metadata(0), "n_steps": 10})},
                    state, r"recipe .*make tiny-bert"),
        "old keys": ({**good, "recipe": json.dumps({"seed": 0, "pretraining": {"steps": 1500}})},
                     state, r"recipe .*make tiny-bert"),
        "not a dict": ({**good, "recipe": "[1, 2]"}, state, r"recipe .*make tiny-bert"),
        "vocab": ({**good, "vocab_sha256": "0" * 64}, state, "another vocabulary"),
        "none": ({}, state, "no recipe in its metadata"),
        "missing": (good, {k: v for k, v in state.items() if k != "mlm_bias"},
                    r"missing \['mlm_bias'\]"),
        "shape": (good, {**state, "mlm_bias": torch.zeros(3)}, "weight mlm_bias has shape"),
    }
    for name, (metadata, weights, message) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        save_file(weights, str(path), metadata)
        with pytest.raises(ValueError, match=message):
            load(path)
    with pytest.raises(FileNotFoundError, match="make tiny-bert"):
        load(tmp_path / "nowhere.safetensors")
