"""course_utils.tiny_bert: the story tokenizer, the cached batches (equal to the tokenizer's
own), the fast pretraining loss (equal to BertForPretraining.loss), a short pretraining run
that learns, the evaluation functions and their baseline, fill-mask, the [CLS] classifier and
fine-tuning; argument errors; the same seed, the same numbers. Results of training only as
loose bands, on a model far smaller than the lecture's."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from course_utils.bert import IGNORE, Bert, BertConfig, BertForPretraining, pretraining_batch
from course_utils.data.stories import make_classification, make_stories, nsp_pairs
from course_utils.tiny_bert import (
    PRETRAINING,
    BertClassifier,
    CachedTokenizer,
    classification_accuracy,
    data_fingerprint,
    fill_mask,
    fine_tune,
    load_tiny_bert,
    mlm_accuracy,
    most_frequent_token,
    nsp_accuracy,
    pretrain,
    pretrained_tiny_bert,
    pretraining_loss,
    recipe,
    save_tiny_bert,
    sentence_pair,
    story_texts,
    story_tokenizer,
    tiny_bert_metadata,
    tiny_config,
    unigram_accuracy,
)
from course_utils.tokenization import SPECIAL_TOKENS, WordPiece

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}  # a model for fast tests


@pytest.fixture(scope="module")
def tok() -> WordPiece:
    return story_tokenizer()


@pytest.fixture(scope="module")
def stories():
    return make_stories(300, seed=0)


@pytest.fixture(scope="module")
def held_out():
    return nsp_pairs(make_stories(100, seed=1), 200, seed=1)


def small_model(tok, seed=0, **overrides) -> BertForPretraining:
    torch.manual_seed(seed)
    return BertForPretraining(tiny_config(tok, **{**SMALL, **overrides}))


# ----------------------------------------------------------------------------- tokenizer

def test_story_tokenizer_keeps_common_words_whole_and_splits_some_forms(tok):
    assert set(SPECIAL_TOKENS) <= set(tok.vocab)
    assert 400 <= len(tok) <= 600
    pieces = [t for t in tok.tokens if t.startswith("##")]
    assert pieces, "a vocabulary with word pieces"
    for word in ("the", "he", "she", "mary", "tom", "dog", "ball", "park"):
        assert tok.tokenize(word) == [word]
    assert tok.tokenize("apples") == ["apple", "##s"]
    texts = story_texts(make_stories(50, seed=3))
    assert not any("[UNK]" in tok.tokenize(t) for t in texts), "every story word is spelt"


def test_story_tokenizer_is_deterministic_and_checks_its_arguments():
    assert story_tokenizer(n_stories=100).tokens == story_tokenizer(n_stories=100).tokens
    with pytest.raises(ValueError, match="n_stories"):
        story_tokenizer(n_stories=0)
    with pytest.raises(ValueError, match="seed"):
        story_tokenizer(seed=-1)
    with pytest.raises(ValueError, match="stories must"):
        story_texts("mary met tom .")
    with pytest.raises(ValueError, match="stories must"):
        story_texts([("mary met tom .",)])


def test_sentence_cache_gives_the_tokenizers_own_tensors(tok, stories):
    cache = CachedTokenizer(tok)
    pairs = nsp_pairs(stories, 50, seed=2)
    a = [p[0].text for p in pairs]
    b = [p[1].text for p in pairs]
    for pair_texts in (None, b):
        ours = cache.encode_batch(a, pair_texts)
        theirs = tok.encode_batch(a, pair_texts)
        for x, y in zip(ours, theirs, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)
    triples = [(x, y, bool(p[2])) for x, y, p in zip(a, b, pairs, strict=True)]
    ours = pretraining_batch(cache, triples, generator=torch.Generator().manual_seed(5))
    theirs = pretraining_batch(tok, triples, generator=torch.Generator().manual_seed(5))
    for key in theirs:
        assert torch.equal(ours[key], theirs[key]), key
    assert len(cache) == len(tok) and cache.mask_id == tok.mask_id
    with pytest.raises(ValueError, match="WordPiece"):
        CachedTokenizer("vocab.txt")
    with pytest.raises(ValueError, match="pairs"):
        cache.encode_batch(["a"], ["b", "c"])


# ----------------------------------------------------------------------------- model, loss

def test_tiny_config(tok):
    cfg = tiny_config(tok)
    assert isinstance(cfg, BertConfig)
    assert (cfg.vocab_size, cfg.pad_id) == (len(tok), tok.pad_id)
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff) == (2, 64, 8, 128)
    assert tiny_config(tok, n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_config(tok, vocab_size=10)
    with pytest.raises(ValueError, match="unknown BertConfig fields"):
        tiny_config(tok, n_layer=2)
    with pytest.raises(ValueError, match="divisible"):
        tiny_config(tok, n_heads=5)
    with pytest.raises(ValueError, match="n_layers"):
        tiny_config(tok, n_layers=0)
    with pytest.raises(ValueError, match="WordPiece"):
        tiny_config(["[PAD]"])


def test_pretraining_loss_equals_the_models_own_loss(tok, stories):
    model = small_model(tok).eval()
    pairs = [(a.text, b.text, y) for a, b, y in nsp_pairs(stories, 32, seed=4)]
    batch = pretraining_batch(tok, pairs, generator=torch.Generator().manual_seed(0))
    assert (batch["labels"] != IGNORE).any()
    expected, parts = model.loss(batch)
    torch.testing.assert_close(pretraining_loss(model, batch), expected, rtol=1e-5, atol=1e-6)
    assert expected.item() == pytest.approx(parts["mlm"] + parts["nsp"], rel=1e-5)


def test_pretraining_learns_and_is_deterministic(tok, stories, held_out):
    model = small_model(tok, d_model=64, d_ff=128)
    before = mlm_accuracy(model, tok, held_out, seed=0)
    history = pretrain(model, tok, stories, steps=200, batch_size=32, lr=5e-3, seed=0,
                       eval_pairs=held_out[:64], eval_every=100, progress=False)
    assert len(history.loss) == 200 and history.eval_step == [100, 200]
    assert set(history.metrics) == {"mlm_accuracy", "nsp_accuracy"}
    assert not model.training
    first, last = sum(history.loss[:20]) / 20, sum(history.loss[-20:]) / 20
    assert last < first - 0.8, f"the loss went from {first:.2f} to {last:.2f}"  # 5.8 -> 4.5
    after = mlm_accuracy(model, tok, held_out, seed=0)  # 0.25
    baseline = unigram_accuracy(tok, stories, held_out, seed=0)  # 0.11
    assert before < 0.05 and after > 1.6 * baseline, (before, after, baseline)
    # the same seed, the same run
    again = small_model(tok)
    h2 = pretrain(again, tok, stories, steps=5, batch_size=8, lr=1e-3, seed=3, progress=False)
    h3 = pretrain(small_model(tok), tok, stories, steps=5, batch_size=8, lr=1e-3, seed=3,
                  progress=False)
    assert h2.loss == h3.loss


def test_pretrain_checks_its_arguments(tok, stories, held_out):
    model = small_model(tok)
    with pytest.raises(ValueError, match="BertForPretraining"):
        pretrain(model.bert, tok, stories, steps=1, progress=False)
    with pytest.raises(ValueError, match="steps"):
        pretrain(model, tok, stories, steps=0, progress=False)
    with pytest.raises(ValueError, match="eval_pairs"):
        pretrain(model, tok, stories, steps=2, eval_every=1, progress=False)
    with pytest.raises(ValueError, match="stories must"):
        pretrain(model, tok, stories[:1], steps=2, progress=False)
    other = story_tokenizer(vocab_size=120, n_stories=50)
    with pytest.raises(ValueError, match="vocab_size"):
        pretrain(model, other, stories, steps=2, progress=False)
    with pytest.raises(ValueError, match="triple"):
        mlm_accuracy(model, tok, [("a", "b")])


def test_pretrained_tiny_bert_is_the_recipe_run_step_by_step(tok):
    settings = {"n_stories": 60, "steps": 4, "batch_size": 8, **SMALL}
    model, tokenizer, history = pretrained_tiny_bert(seed=1, progress=False, **settings)
    assert isinstance(model, BertForPretraining) and not model.training
    assert tokenizer.tokens == story_tokenizer(seed=1).tokens
    assert len(history.loss) == 4 and model.config.d_model == 32
    torch.manual_seed(1)
    manual = BertForPretraining(tiny_config(tokenizer, **SMALL))
    pretrain(manual, tokenizer, make_stories(60, seed=1), steps=4, batch_size=8,
             lr=PRETRAINING["lr"], seed=1, progress=False)
    for (name, a), b in zip(model.state_dict().items(), manual.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


# ----------------------------------------------------------------------------- evaluation

def test_the_unigram_baseline_is_a_model_that_always_says_the(tok, stories, held_out):
    assert most_frequent_token(tok, stories) == "the"
    model = small_model(tok).eval()
    with torch.no_grad():
        model.mlm_bias[tok.vocab["the"]] = 100.0  # every position: "the"
    for seed in (0, 7):
        baseline = unigram_accuracy(tok, stories, held_out, seed=seed)
        assert mlm_accuracy(model, tok, held_out, seed=seed) == baseline
        assert 0.04 < baseline < 0.2
    assert unigram_accuracy(tok, stories, held_out, seed=0) != \
        unigram_accuracy(tok, stories, held_out, seed=7)  # other positions chosen


def test_nsp_accuracy_of_a_constant_answer_is_the_share_of_that_class(tok, held_out):
    model = small_model(tok).eval()
    with torch.no_grad():
        model.nsp.bias.copy_(torch.tensor([0.0, 100.0]))  # always "B follows A"
    share = sum(y for _, _, y in held_out) / len(held_out)
    assert nsp_accuracy(model, tok, held_out) == share == 0.5
    model.train()
    nsp_accuracy(model, tok, held_out[:8])
    assert model.training, "the model's mode is restored"


def test_fill_mask_returns_the_k_most_probable_tokens(tok):
    model = small_model(tok)
    top = fill_mask(model, tok, "mary met tom , and [MASK] gave him a ball .", k=4)
    assert len(top) == 4
    assert all(isinstance(t, str) and t in tok.vocab and isinstance(p, float) for t, p in top)
    probs = [p for _, p in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    again = fill_mask(model, tok, "mary met tom .", pair="then [MASK] sat .", k=2)
    assert len(again) == 2
    with pytest.raises(ValueError, match="exactly one"):
        fill_mask(model, tok, "mary met tom .")
    with pytest.raises(ValueError, match="exactly one"):
        fill_mask(model, tok, "[MASK] met [MASK] .")
    with pytest.raises(ValueError, match="k must"):
        fill_mask(model, tok, "[MASK] met tom .", k=0)


# ----------------------------------------------------------------------------- fine-tuning

def test_the_classifier_reads_the_cls_vector(tok):
    bert = small_model(tok).bert
    classifier = BertClassifier(bert, 3).eval()
    ids, segments, keep = tok.encode_batch(["mary met tom .", "he sat under the tree ."])
    logits = classifier(ids, segments, keep)
    assert logits.shape == (2, 3)
    out = bert(ids, segments, keep)
    cls = out.last_hidden_state[:, 0]  # (B, H)
    pooled = torch.tanh(bert.pooler(cls))
    torch.testing.assert_close(logits, classifier.head(pooled))
    assert classifier.bert is bert, "the classifier fine-tunes the very encoder it is given"
    with pytest.raises(ValueError, match="Bert"):
        BertClassifier(small_model(tok), 2)
    with pytest.raises(ValueError, match="n_classes"):
        BertClassifier(bert, 1)


def test_sentence_pair():
    assert sentence_pair("tom met mary . he sat .") == ("tom met mary .", "he sat .")
    with pytest.raises(ValueError, match="two sentences"):
        sentence_pair("tom met mary .")


def test_fine_tuning_learns_an_easy_task_and_is_deterministic(tok):
    texts = [t for t, _ in make_classification(160, seed=0)]
    examples = [(t, int(" liked " in f" {t} ")) for t in texts]  # is there a "liked"?
    histories, accuracies = [], []
    for _ in range(2):
        torch.manual_seed(0)
        classifier = BertClassifier(Bert(tiny_config(tok, **SMALL)), 2)
        histories.append(fine_tune(classifier, tok, examples, epochs=8, batch_size=16,
                                   lr=3e-3, seed=0, progress=False))
        accuracies.append(classification_accuracy(classifier, tok, examples))
    assert histories[0].loss == histories[1].loss
    assert histories[0].steps_per_epoch == 10 and len(histories[0].loss) == 80
    assert accuracies[0] > 0.8, accuracies
    assert not classifier.training
    pairs = [((t, t), y) for t, y in examples[:20]]  # read as [CLS] t [SEP] t [SEP]
    fine_tune(classifier, tok, pairs, epochs=1, progress=False)


def test_fine_tuning_checks_its_arguments(tok):
    classifier = BertClassifier(Bert(tiny_config(tok, **SMALL)), 2)
    with pytest.raises(ValueError, match="label"):
        fine_tune(classifier, tok, [("mary met tom .", 2)], epochs=1, progress=False)
    with pytest.raises(ValueError, match="all be single texts or all pairs"):
        fine_tune(classifier, tok, [("a .", 0), (("a .", "b ."), 1)], epochs=1,
                  progress=False)
    with pytest.raises(ValueError, match="epochs"):
        fine_tune(classifier, tok, [("a .", 0)], epochs=0, progress=False)
    with pytest.raises(ValueError, match="BertClassifier"):
        fine_tune(classifier.bert, tok, [("a .", 0)], epochs=1, progress=False)
    with pytest.raises(ValueError, match="non-empty"):
        classification_accuracy(classifier, tok, [])


# ----------------------------------------------------------------------------- shipped weights

def test_the_shipped_weights_are_todays_recipe_and_learnt_it(tok):
    """The file that unit 08 reads: written with today's recipe, vocabulary and pretraining
    data, and a model that does what lecture 07 claims of its own (MLM far above the
    unigram baseline, NSP above chance), within float error of the numbers it was saved with."""
    metadata = tiny_bert_metadata()
    assert json.loads(metadata["recipe"]) == json.loads(json.dumps(recipe(0)))
    assert {k: metadata[k] for k in ("vocab_sha256", "data_sha256")} == data_fingerprint(tok)
    model, tokenizer = load_tiny_bert()
    assert not model.training and tokenizer.tokens == tok.tokens
    assert model.config == tiny_config(tok)
    held = nsp_pairs(make_stories(500, seed=1), 1000, seed=1)  # lecture 07's held-out pairs
    mlm, nsp = mlm_accuracy(model, tok, held), nsp_accuracy(model, tok, held)
    assert mlm > 2 * unigram_accuracy(tok, make_stories(PRETRAINING["n_stories"]), held)
    assert nsp > 0.56  # the opening clue alone gives about 0.63 (lecture 07)
    assert mlm == pytest.approx(float(metadata["mlm_accuracy"]), abs=0.005)
    assert nsp == pytest.approx(float(metadata["nsp_accuracy"]), abs=0.01)


def test_save_and_load_round_trip(tok, tmp_path):
    torch.manual_seed(3)
    model = BertForPretraining(tiny_config(tok))
    path = tmp_path / "tiny.safetensors"
    save_tiny_bert(model, tok, path, nsp_accuracy=0.5)
    loaded, _ = load_tiny_bert(path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert tiny_bert_metadata(path)["nsp_accuracy"] == "0.5000"
    with pytest.raises(ValueError, match="tokenizer has"):
        save_tiny_bert(small_model(tok), WordPiece([*SPECIAL_TOKENS, "a"]), path)


def test_load_refuses_other_recipes_files_and_weights(tok, tmp_path):
    torch.manual_seed(0)
    model = BertForPretraining(tiny_config(tok))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    good = {"recipe": json.dumps(recipe(0)), **data_fingerprint(tok)}
    cases = {
        "steps": ({**good, "recipe": json.dumps({**recipe(0), "pretraining": {
            **PRETRAINING, "steps": 10}})}, state, r"recipe .*make tiny-bert"),
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
            load_tiny_bert(path)
    with pytest.raises(FileNotFoundError, match="make tiny-bert"):
        load_tiny_bert(tmp_path / "nowhere.safetensors")
