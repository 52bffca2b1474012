"""course_utils.fine_tuning: the [CLS] classifier, sentence pairs, fine-tuning that learns an
easy task and repeats itself, argument errors."""

from __future__ import annotations

import pytest
import torch

from course_utils.bert import Bert, BertForPretraining
from course_utils.data.stories import make_classification
from course_utils.fine_tuning import (
    BertClassifier,
    classification_accuracy,
    fine_tune,
    sentence_pair,
)
from course_utils.tiny_bert import tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is faster

SMALL = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}  # a model for fast tests


def small_bert(tok) -> Bert:
    torch.manual_seed(0)
    return Bert(tiny_config(tok, **SMALL))


def test_the_classifier_reads_the_cls_vector(story_tok):
    bert = small_bert(story_tok)
    classifier = BertClassifier(bert, 3).eval()
    ids, segments, keep = story_tok.encode_batch(["mary met tom .", "he sat under the tree ."])
    logits = classifier(ids, segments, keep)
    assert logits.shape == (2, 3)
    out = bert(ids, segments, keep)
    cls = out.last_hidden_state[:, 0]  # (B, d_model)
    pooled = torch.tanh(bert.pooler(cls))
    torch.testing.assert_close(logits, classifier.head(pooled))
    assert classifier.bert is bert, "the classifier fine-tunes the very encoder it is given"
    with pytest.raises(ValueError, match="Bert"):
        BertClassifier(BertForPretraining(tiny_config(story_tok, **SMALL)), 2)
    with pytest.raises(ValueError, match="n_classes"):
        BertClassifier(bert, 1)


def test_sentence_pair():
    assert sentence_pair("tom met mary . he sat .") == ("tom met mary .", "he sat .")
    with pytest.raises(ValueError, match="two sentences"):
        sentence_pair("tom met mary .")


def test_fine_tuning_learns_an_easy_task_and_is_deterministic(story_tok):
    texts = [t for t, _ in make_classification(160, seed=0)]
    examples = [(t, int(" liked " in f" {t} ")) for t in texts]  # is there a "liked"?
    histories, accuracies = [], []
    for _ in range(2):
        torch.manual_seed(0)
        classifier = BertClassifier(Bert(tiny_config(story_tok, **SMALL)), 2)
        histories.append(fine_tune(classifier, story_tok, examples, epochs=8, batch_size=16,
                                   lr=3e-3, seed=0, progress=False))
        accuracies.append(classification_accuracy(classifier, story_tok, examples))
    assert histories[0].loss == histories[1].loss
    assert histories[0].steps_per_epoch == 10 and len(histories[0].loss) == 80
    assert accuracies[0] > 0.8, accuracies
    assert not classifier.training
    pairs = [((t, t), y) for t, y in examples[:20]]  # read as [CLS] t [SEP] t [SEP]
    fine_tune(classifier, story_tok, pairs, epochs=1, progress=False)


def test_fine_tuning_checks_its_arguments(story_tok):
    classifier = BertClassifier(Bert(tiny_config(story_tok, **SMALL)), 2)
    with pytest.raises(ValueError, match="label"):
        fine_tune(classifier, story_tok, [("mary met tom .", 2)], epochs=1, progress=False)
    with pytest.raises(ValueError, match="all be single texts or all pairs"):
        fine_tune(classifier, story_tok, [("a .", 0), (("a .", "b ."), 1)], epochs=1,
                  progress=False)
    with pytest.raises(ValueError, match="epochs"):
        fine_tune(classifier, story_tok, [("a .", 0)], epochs=0, progress=False)
    with pytest.raises(ValueError, match="BertClassifier"):
        fine_tune(classifier.bert, story_tok, [("a .", 0)], epochs=1, progress=False)
    with pytest.raises(ValueError, match="non-empty"):
        classification_accuracy(classifier, story_tok, [])


