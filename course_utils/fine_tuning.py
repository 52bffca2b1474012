"""Unit 07: fine-tuning a pretrained BERT, a classifier head on the [CLS] vector.

    BertClassifier            logits (B, n_classes) = W dropout(pooled) + b
    sentence_pair             "tom met mary . he sat ." -> ("tom met mary .", "he sat .")
    fine_tune                 train it (every weight, the encoder's too) on (text, label) pairs
    classification_accuracy   share of examples classified right

Notation (README's table): B batch, T tokens, d_model width.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils._checks import (
    require_bool,
    require_fraction,
    require_int,
    require_positive_number,
    require_str,
)
from course_utils.bert import Bert
from course_utils.tokenization import WordPiece
from course_utils.training import History, eval_mode, fit

__all__ = ["BertClassifier", "classification_accuracy", "fine_tune", "sentence_pair"]


class BertClassifier(nn.Module):
    """A classifier on a BERT: logits (B, n_classes) = W dropout(pooled) + b, where
    pooled = tanh(W_p x_L[:, 0] + b_p) is the encoder's [CLS] vector (B, d_model).

    forward(ids (B, T), segments (B, T) = None, attention_mask (B, T) bool = None). The
    head starts as BERT's layers do (normal(0, 0.02), bias 0); fine-tuning trains it and
    every weight of `bert`."""

    def __init__(self, bert: Bert, n_classes: int, dropout: float = 0.1):
        super().__init__()
        if not isinstance(bert, Bert):
            raise ValueError(f"bert must be a course_utils.bert.Bert (e.g. model.bert of a "
                             f"BertForPretraining); got {type(bert).__name__}")
        n_classes = require_int(n_classes, "n_classes", low=2)
        require_fraction(dropout, "dropout", "a probability")
        self.bert = bert
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(bert.config.d_model, n_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        pooled = self.bert(ids, segments, attention_mask).pooler_output  # (B, d_model)
        return self.head(self.dropout(pooled))  # (B, n_classes)


def sentence_pair(text: str) -> tuple[str, str]:
    """Split a text of two sentences after its first " ." word: the A and B segments.
    "tom met mary . he sat ." -> ("tom met mary .", "he sat .")."""
    require_str(text, "text")
    words = text.split(" ")
    if "." not in words[:-1]:
        raise ValueError(f"text must hold two sentences, the first ending in ' .'; got "
                         f"{text!r}")
    cut = words.index(".") + 1
    return " ".join(words[:cut]), " ".join(words[cut:])


def _require_classifier(classifier) -> BertClassifier:
    if not isinstance(classifier, BertClassifier):
        raise ValueError(f"classifier must be a BertClassifier; got "
                         f"{type(classifier).__name__}")
    return classifier


def _encode_examples(tokenizer: WordPiece, examples, n_classes: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(text or (text_a, text_b), label) examples -> ids, segments, mask (N, T), labels (N,)."""
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a tokenization.WordPiece; got "
                         f"{type(tokenizer).__name__}")
    if not isinstance(examples, list | tuple) or not examples:
        raise ValueError("examples must be a non-empty list of (text, label) pairs, the text "
                         "a str or a pair of str (A, B)")
    a, b, labels = [], [], []
    for i, example in enumerate(examples):
        if not isinstance(example, tuple | list) or len(example) != 2:
            raise ValueError(f"examples[{i}] must be (text, label); got {example!r}")
        text, label = example
        if isinstance(text, tuple | list) and len(text) == 2:
            text, second = text
        else:
            second = None
        if not isinstance(text, str) or not isinstance(second, str | None):
            raise ValueError(f"examples[{i}]: the text must be a str or a pair of str; got "
                             f"{example[0]!r}")
        require_int(label, f"the label of examples[{i}]", low=0, high=n_classes - 1)
        a.append(text)
        b.append(second)
        labels.append(label)
    if any(s is None for s in b) and not all(s is None for s in b):
        raise ValueError("examples must all be single texts or all pairs (A, B)")
    ids, segments, keep = tokenizer.encode_batch(a, None if b[0] is None else b)  # (N, T) each
    return ids, segments, keep, torch.tensor(labels)


def fine_tune(classifier: BertClassifier, tokenizer: WordPiece, examples, *, epochs: int,
              batch_size: int = 32, lr: float = 1e-3, seed: int = 0,
              progress: bool = True) -> History:
    """Fine-tune every weight of `classifier` on (text, label) examples (text: a str, or a
    pair (A, B) read as [CLS] A [SEP] B [SEP]) with cross-entropy, and return its History.

    `epochs` passes over the examples, shuffled anew each pass by a generator seeded with
    `seed` (the last batch of a pass may be smaller); Adam, the learning rate falling
    linearly from lr, gradients clipped to norm 1. In train mode during, eval mode after."""
    _require_classifier(classifier)
    n_classes = classifier.head.out_features
    ids, segments, keep, labels = _encode_examples(tokenizer, examples, n_classes)
    epochs = require_int(epochs, "epochs")
    batch_size = require_int(batch_size, "batch_size")
    require_positive_number(lr, "lr")
    require_int(seed, "seed", low=0)
    require_bool(progress, "progress")
    generator = torch.Generator().manual_seed(seed)
    per_epoch = math.ceil(len(labels) / batch_size)

    def batches():
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=generator)
            for start in range(0, len(order), batch_size):
                rows = order[start:start + batch_size]  # (b,)
                T = int(keep[rows].sum(1).max())  # the longest example of this batch
                yield ids[rows, :T], segments[rows, :T], keep[rows, :T], labels[rows]

    def loss(model, batch):
        batch_ids, batch_segments, batch_keep, batch_labels = batch
        return F.cross_entropy(model(batch_ids, batch_segments, batch_keep), batch_labels)

    return fit(classifier, loss, batches(), n_steps=epochs * per_epoch, lr=lr,
               schedule="linear", clip=1.0, steps_per_epoch=per_epoch, progress=progress,
               desc="fine-tuning")


@torch.no_grad()
def classification_accuracy(classifier: BertClassifier, tokenizer: WordPiece, examples,
                            batch_size: int = 256) -> float:
    """The share of (text, label) examples whose label gets the classifier's largest logit
    (in eval mode: no dropout)."""
    _require_classifier(classifier)
    ids, segments, keep, labels = _encode_examples(tokenizer, examples,
                                                   classifier.head.out_features)
    batch_size = require_int(batch_size, "batch_size")
    right = 0
    with eval_mode(classifier):
        for start in range(0, len(labels), batch_size):
            rows = slice(start, start + batch_size)
            logits = classifier(ids[rows], segments[rows], keep[rows])  # (b, n_classes)
            right += int((logits.argmax(-1) == labels[rows]).sum())
    return right / len(labels)
