"""course_utils.tiny_bert: the recipe (one frozen dataclass), the story tokenizer, the tiny
config, and pretrained_tiny_bert as the recipe run step by step."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest
import torch

from course_utils.bert import BertConfig, BertForPretraining
from course_utils.bert_pretraining import pretrain
from course_utils.data.stories import make_stories, story_texts
from course_utils.tiny_bert import (
    MODEL_FIELDS,
    RECIPE,
    pretrained_tiny_bert,
    story_tokenizer,
    tiny_config,
)
from course_utils.tokenization import SPECIAL_TOKENS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}  # a model for fast tests


def test_story_tokenizer_keeps_common_words_whole_and_splits_some_forms(story_tok):
    assert set(SPECIAL_TOKENS) <= set(story_tok.vocab)
    assert 400 <= len(story_tok) <= 600
    pieces = [t for t in story_tok.tokens if t.startswith("##")]
    assert pieces, "a vocabulary with word pieces"
    for word in ("the", "he", "she", "mary", "tom", "dog", "ball", "park"):
        assert story_tok.tokenize(word) == [word]
    assert story_tok.tokenize("apples") == ["apple", "##s"]
    texts = story_texts(make_stories(50, seed=3))
    assert not any("[UNK]" in story_tok.tokenize(t) for t in texts), "every story word is spelt"


def test_story_tokenizer_is_deterministic_and_checks_its_arguments():
    few = replace(RECIPE, tokenizer_stories=100)
    assert story_tokenizer(recipe=few).tokens == story_tokenizer(recipe=few).tokens
    assert story_tokenizer(recipe=few).tokens != story_tokenizer(seed=1, recipe=few).tokens
    with pytest.raises(ValueError, match="n must"):
        story_tokenizer(recipe=replace(RECIPE, tokenizer_stories=0))
    with pytest.raises(ValueError, match="seed"):
        story_tokenizer(seed=-1)
    with pytest.raises(ValueError, match="TinyBertRecipe"):
        story_tokenizer(recipe={"vocab_size": 600})


def test_tiny_config(story_tok):
    cfg = tiny_config(story_tok)
    assert isinstance(cfg, BertConfig)
    assert (cfg.vocab_size, cfg.pad_id) == (len(story_tok), story_tok.pad_id)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff) == (2, 64, 8, 128)
    assert cfg.n_positions == RECIPE.n_positions == 64 and cfg.dropout == 0.0
    assert tiny_config(story_tok, n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_config(story_tok, vocab_size=10)
    with pytest.raises(ValueError, match="unknown BertConfig fields"):
        tiny_config(story_tok, n_layer=2)
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(story_tok, n_heads=5)
    with pytest.raises(ValueError, match="n_layers"):
        tiny_config(story_tok, n_layers=0)
    with pytest.raises(ValueError, match="WordPiece"):
        tiny_config(["[PAD]"])
    wide = tiny_config(story_tok, replace(RECIPE, d_model=32, n_positions=40))
    assert (wide.d_model, wide.n_positions) == (32, 40)


def test_pretrained_tiny_bert_is_the_recipe_run_step_by_step(story_tok):
    recipe = replace(RECIPE, n_stories=60, n_steps=4, batch_size=8, **SMALL)
    model, tokenizer, history = pretrained_tiny_bert(seed=1, progress=False, recipe=recipe)
    assert isinstance(model, BertForPretraining) and not model.training
    assert tokenizer.tokens == story_tokenizer(seed=1).tokens
    assert len(history.loss) == 4 and model.config.d_model == 32
    torch.manual_seed(1)
    manual = BertForPretraining(tiny_config(tokenizer, **SMALL))
    pretrain(manual, tokenizer, make_stories(60, seed=1), n_steps=4, batch_size=8,
             lr=RECIPE.lr, seed=1, progress=False)
    for (name, a), b in zip(model.state_dict().items(), manual.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name




def test_the_recipe_is_one_frozen_dataclass_of_named_settings():
    settings = RECIPE.as_dict()
    assert settings["n_steps"] == 1500 and settings["n_positions"] == 64
    assert set(MODEL_FIELDS) <= set(settings)
    assert set(MODEL_FIELDS) <= set(BertConfig.__dataclass_fields__)
    with pytest.raises(FrozenInstanceError):
        RECIPE.n_steps = 10
    with pytest.raises(ValueError, match="TinyBertRecipe"):
        pretrained_tiny_bert(recipe=settings, progress=False)
