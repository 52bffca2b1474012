"""course_utils.bert_pretraining: batches (the tokenizer's tensors, masked by mask_tokens), the
fast pretraining loss (equal to BertForPretraining.loss), a short pretraining run that learns,
the evaluation functions and their baseline, fill-mask; argument errors; the same seed, the
same numbers. Results of training only as loose bands, on a model far smaller than the
lecture's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from course_utils.bert import IGNORE, BertForPretraining, mask_tokens
from course_utils.bert_pretraining import (
    fill_mask,
    mlm_accuracy,
    most_frequent_token,
    nsp_accuracy,
    pretrain,
    pretraining_batch,
    pretraining_loss,
    unigram_accuracy,
)
from course_utils.data.stories import make_stories, nsp_pairs
from course_utils.tiny_bert import RECIPE, story_tokenizer, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}  # a model for fast tests


@pytest.fixture(scope="module")
def stories():
    return make_stories(300, seed=0)


@pytest.fixture(scope="module")
def held_out():
    return nsp_pairs(make_stories(100, seed=1), 200, seed=1)


def small_model(tok, seed=0, **overrides) -> BertForPretraining:
    torch.manual_seed(seed)
    return BertForPretraining(tiny_config(tok, **{**SMALL, **overrides}))


def test_batches_are_the_tokenizers_tensors_masked(story_tok, stories):
    pairs = nsp_pairs(stories, 50, seed=2)
    triples = [(a.text, b.text, y) for a, b, y in pairs]
    batch = pretraining_batch(story_tok, pairs, generator=torch.Generator().manual_seed(5))
    ids, segments, keep = story_tok.encode_batch([a for a, _, _ in triples],
                                                 [b for _, b, _ in triples])
    assert torch.equal(batch["segments"], segments) and torch.equal(batch["attention_mask"], keep)
    inputs, labels = mask_tokens(ids, len(story_tok), story_tok.mask_id, story_tok.special_ids,
                                 0.15, torch.Generator().manual_seed(5))
    assert torch.equal(batch["ids"], inputs) and torch.equal(batch["labels"], labels)
    assert batch["is_next"].tolist() == [y for _, _, y in triples]
    with pytest.raises(ValueError, match="WordPiece"):
        pretraining_batch("vocab.txt", triples)
    with pytest.raises(ValueError, match="triple"):
        pretraining_batch(story_tok, [("a", "b")])
    with pytest.raises(ValueError, match="p must"):
        pretraining_batch(story_tok, triples, p=1.5)


def test_pretraining_loss_equals_the_models_own_loss(story_tok, stories):
    model = small_model(story_tok).eval()
    pairs = [(a.text, b.text, y) for a, b, y in nsp_pairs(stories, 32, seed=4)]
    batch = pretraining_batch(story_tok, pairs, generator=torch.Generator().manual_seed(0))
    assert (batch["labels"] != IGNORE).any()
    expected, parts = model.loss(batch)
    torch.testing.assert_close(pretraining_loss(model, batch), expected, rtol=1e-5, atol=1e-6)
    assert expected.item() == pytest.approx(parts["mlm"] + parts["nsp"], rel=1e-5)


def test_pretraining_learns_and_is_deterministic(story_tok, stories, held_out):
    model = small_model(story_tok, d_model=64, d_ff=128)
    before = mlm_accuracy(model, story_tok, held_out, seed=0)
    history = pretrain(model, story_tok, stories, n_steps=200, batch_size=32, lr=5e-3, seed=0,
                       eval_pairs=held_out[:64], eval_every=100, progress=False)
    assert len(history.loss) == 200 and history.eval_step == [100, 200]
    assert set(history.metrics) == {"mlm_accuracy", "nsp_accuracy"}
    assert not model.training
    first, last = sum(history.loss[:20]) / 20, sum(history.loss[-20:]) / 20
    assert last < first - 0.8, f"the loss went from {first:.2f} to {last:.2f}"  # 5.8 -> 4.5
    after = mlm_accuracy(model, story_tok, held_out, seed=0)  # 0.25
    baseline = unigram_accuracy(story_tok, stories, held_out, seed=0)  # 0.11
    assert before < 0.05 and after > 1.6 * baseline, (before, after, baseline)
    # the same seed, the same run
    again = small_model(story_tok)
    h2 = pretrain(again, story_tok, stories, n_steps=5, batch_size=8, lr=1e-3, seed=3,
                  progress=False)
    h3 = pretrain(small_model(story_tok), story_tok, stories, n_steps=5, batch_size=8, lr=1e-3,
                  seed=3, progress=False)
    assert h2.loss == h3.loss


def test_pretrain_checks_its_arguments(story_tok, stories, held_out):
    model = small_model(story_tok)
    run = {"batch_size": 8, "lr": 1e-3, "progress": False}
    with pytest.raises(ValueError, match="BertForPretraining"):
        pretrain(model.bert, story_tok, stories, n_steps=1, **run)
    with pytest.raises(ValueError, match="n_steps"):
        pretrain(model, story_tok, stories, n_steps=0, **run)
    with pytest.raises(ValueError, match="eval_pairs"):
        pretrain(model, story_tok, stories, n_steps=2, eval_every=1, **run)
    with pytest.raises(ValueError, match="stories must"):
        pretrain(model, story_tok, stories[:1], n_steps=2, **run)
    other = story_tokenizer(recipe=replace(RECIPE, vocab_size=120, tokenizer_stories=50))
    with pytest.raises(ValueError, match="vocab_size"):
        pretrain(model, other, stories, n_steps=2, **run)
    with pytest.raises(ValueError, match="triple"):
        mlm_accuracy(model, story_tok, [("a", "b")])


def test_the_unigram_baseline_is_a_model_that_always_says_the(story_tok, stories, held_out):
    assert most_frequent_token(story_tok, stories) == "the"
    model = small_model(story_tok).eval()
    with torch.no_grad():
        model.mlm_bias[story_tok.vocab["the"]] = 100.0  # every position: "the"
    for seed in (0, 7):
        baseline = unigram_accuracy(story_tok, stories, held_out, seed=seed)
        assert mlm_accuracy(model, story_tok, held_out, seed=seed) == baseline
        assert 0.04 < baseline < 0.2
    assert unigram_accuracy(story_tok, stories, held_out, seed=0) != \
        unigram_accuracy(story_tok, stories, held_out, seed=7)  # other positions chosen


def test_nsp_accuracy_of_a_constant_answer_is_the_share_of_that_class(story_tok, held_out):
    model = small_model(story_tok).eval()
    with torch.no_grad():
        model.nsp.bias.copy_(torch.tensor([0.0, 100.0]))  # always "B follows A"
    share = sum(y for _, _, y in held_out) / len(held_out)
    assert nsp_accuracy(model, story_tok, held_out) == share == 0.5
    model.train()
    nsp_accuracy(model, story_tok, held_out[:8])
    assert model.training, "the model's mode is restored"


def test_fill_mask_returns_the_k_most_probable_tokens(story_tok):
    model = small_model(story_tok)
    top = fill_mask(model, story_tok, "mary met tom , and [MASK] gave him a ball .", k=4)
    assert len(top) == 4
    assert all(isinstance(t, str) and t in story_tok.vocab and isinstance(p, float) for t, p in top)
    probs = [p for _, p in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    again = fill_mask(model, story_tok, "mary met tom .", pair="then [MASK] sat .", k=2)
    assert len(again) == 2
    with pytest.raises(ValueError, match="exactly one"):
        fill_mask(model, story_tok, "mary met tom .")
    with pytest.raises(ValueError, match="exactly one"):
        fill_mask(model, story_tok, "[MASK] met [MASK] .")
    with pytest.raises(ValueError, match="k must"):
        fill_mask(model, story_tok, "[MASK] met tom .", k=0)


