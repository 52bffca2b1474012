"""Unit 07: pretraining a BERT with masked language modelling and next-sentence prediction.

The pipeline from text to a trained `bert.BertForPretraining`; the model itself only ever
sees tensors (`input_ids`, segments, an attention mask), as in `transformers`.

    pretraining_batch   (A, B, is_next) text pairs -> the tensors of one batch: [CLS] A [SEP]
                        B [SEP] ids, segments, attention mask, then bert.mask_tokens (15%;
                        80/10/10) -> {"ids", "segments", "attention_mask", "labels",
                        "is_next"}
    pretraining_loss    MLM cross-entropy at the chosen positions + NSP cross-entropy, the
                        MLM head run at the chosen positions only
    pretrain            `training.fit` on fresh pairs every step, batched by length
    mlm_accuracy        share of the chosen (15%) positions whose original token is the arg max
    unigram_accuracy    the baseline: always guess the most frequent token of the training data
    nsp_accuracy        share of pairs whose "B follows A" is told right (chance: 50%)
    fill_mask           the k most probable tokens at the one [MASK] of a text

Every function takes the `tokenization.WordPiece` that turns text into ids; its word cache
makes tokenizing thousands of pairs a step cheap. `tiny_bert` holds the course's recipe.
Notation (README's table): B batch, T tokens, d_model width, n_vocab vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from course_utils._checks import require_fraction, require_int, require_str
from course_utils.bert import IGNORE, BertForPretraining, mask_tokens
from course_utils.data.stories import Sentence, nsp_pairs, story_texts
from course_utils.tokenization import WordPiece
from course_utils.training import History, eval_mode, fit

__all__ = ["fill_mask", "mlm_accuracy", "most_frequent_token", "nsp_accuracy", "pretrain",
           "pretraining_batch", "pretraining_loss", "text_pairs", "unigram_accuracy"]


def _require_model(model) -> BertForPretraining:
    if not isinstance(model, BertForPretraining):
        raise ValueError(f"model must be a BertForPretraining; got {type(model).__name__}")
    return model


def _require_tokenizer(tokenizer) -> WordPiece:
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a tokenization.WordPiece (e.g. from "
                         f"tiny_bert.story_tokenizer); got {type(tokenizer).__name__}")
    return tokenizer


def text_pairs(pairs, name: str = "pairs") -> list[tuple[str, str, bool]]:
    """(A, B, is_next) triples, A and B a data.stories.Sentence or a str -> (str, str, bool)."""
    if not isinstance(pairs, list | tuple) or not pairs:
        raise ValueError(f"{name} must be a non-empty list of (A, B, is_next) triples, e.g. "
                         f"from nsp_pairs")
    triples = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 3:
            raise ValueError(f"{name}[{i}] must be a triple (A, B, is_next); got {pair!r}")
        a, b, is_next = pair
        a, b = (s.text if isinstance(s, Sentence) else s for s in (a, b))
        if not isinstance(a, str) or not isinstance(b, str) or not isinstance(is_next, bool):
            raise ValueError(f"{name}[{i}] must be (Sentence or str, Sentence or str, bool); "
                             f"got {pair!r}")
        triples.append((a, b, is_next))
    return triples


def pretraining_batch(tokenizer: WordPiece, pairs, p: float = 0.15,
                      generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """(A, B, is_next) pairs -> {"ids", "segments", "attention_mask" (B, T), "labels" (B, T),
    "is_next" (B,) bool}: `[CLS] A [SEP] B [SEP]` padded to the longest pair, then
    bert.mask_tokens with probability p (labels: the original id at the chosen positions,
    IGNORE elsewhere)."""
    _require_tokenizer(tokenizer)
    require_fraction(p, "p", "a probability")
    a, b, is_next = zip(*text_pairs(pairs), strict=True)
    ids, segments, keep = tokenizer.encode_batch(list(a), list(b))  # (B, T) each
    inputs, labels = mask_tokens(ids, len(tokenizer), tokenizer.mask_id,
                                 tokenizer.special_ids, p, generator)
    return {"ids": inputs, "segments": segments, "attention_mask": keep, "labels": labels,
            "is_next": torch.tensor(is_next, dtype=torch.bool)}


def pretraining_loss(model: BertForPretraining, batch: dict) -> torch.Tensor:
    """BertForPretraining.loss (MLM cross-entropy over the chosen positions + NSP
    cross-entropy), with the MLM head run on the chosen positions only (about 15% of the
    (B, T) positions; the output matrix n_vocab x d_model is the costly part), as the original
    BERT does. Equal to model.loss(batch)[0] up to float rounding."""
    out = model.bert(batch["ids"], batch["segments"], batch["attention_mask"])
    chosen = batch["labels"] != IGNORE  # (B, T)
    x = out.last_hidden_state[chosen]  # (n_masked, d_model): the chosen positions of the batch
    x = model.mlm_norm(F.gelu(model.mlm_transform(x)))  # (n_masked, d_model)
    logits = x @ model.bert.embeddings.token.weight.T + model.mlm_bias  # (n_masked, n_vocab)
    mlm = F.cross_entropy(logits, batch["labels"][chosen]) if len(x) else logits.sum()
    nsp = F.cross_entropy(model.nsp(out.pooler_output), batch["is_next"].long())
    return mlm + nsp


def pretrain(model: BertForPretraining, tokenizer: WordPiece, stories, *, n_steps: int,
             batch_size: int, lr: float, seed: int = 0, eval_pairs=None,
             eval_every: int = 0, progress: bool = True) -> History:
    """Pretrain `model` with MLM + NSP for n_steps steps and return the History of
    `training.fit`.

    Every step reads batch_size fresh pairs, all of them drawn up front with
    nsp_pairs(stories, n_steps * batch_size, seed) (half of them true next sentences) and
    grouped into batches of about equal length (less padding, less work), and masks them
    with pretraining_batch (15%; 80/10/10) from a generator seeded with `seed`. Adam at a
    constant learning rate (NSP's harder clue, comparing B with A, is learnt late if at all,
    and a decaying rate makes it later still), gradients clipped to norm 1. The loss is
    `pretraining_loss`.

    eval_pairs: None, or held-out (A, B, is_next) pairs on which mlm_accuracy and
    nsp_accuracy are measured every eval_every steps (and after the last), in
    history.metrics["mlm_accuracy"], ["nsp_accuracy"]. The model is in eval mode after."""
    _require_model(model)
    _require_tokenizer(tokenizer)
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's "
                         f"vocab_size is {model.config.vocab_size}: build the model with "
                         f"tiny_bert.tiny_config(tokenizer)")
    n_steps = require_int(n_steps, "n_steps")
    batch_size = require_int(batch_size, "batch_size")
    require_int(seed, "seed", low=0)
    eval_every = require_int(eval_every, "eval_every", low=0)
    evaluate = None
    if eval_pairs is not None:
        eval_pairs = text_pairs(eval_pairs, "eval_pairs")

        def evaluate(m):
            return {"mlm_accuracy": mlm_accuracy(m, tokenizer, eval_pairs, seed=seed),
                    "nsp_accuracy": nsp_accuracy(m, tokenizer, eval_pairs)}
    elif eval_every:
        raise ValueError(f"eval_every = {eval_every} needs eval_pairs to evaluate on")
    pairs = text_pairs(nsp_pairs(stories, n_steps * batch_size, seed))
    generator = torch.Generator().manual_seed(seed)
    batches = (pretraining_batch(tokenizer, group, generator=generator)
               for group in _length_batches(tokenizer, pairs, batch_size, generator))
    return fit(model, pretraining_loss, batches, n_steps=n_steps, lr=lr, schedule="constant",
               clip=1.0, evaluate=evaluate, eval_every=eval_every, progress=progress,
               desc="pretraining")


def _length_batches(tokenizer: WordPiece, pairs: list, batch_size: int,
                    generator: torch.Generator, group: int = 16) -> Iterator[list]:
    """`pairs` cut into batches of batch_size pairs of about the same length, so that little
    of a batch is padding: each run of `group` batches' worth of pairs (in drawn order) is
    sorted by length, cut into batches, and these batches come in a random order."""
    size = group * batch_size
    for start in range(0, len(pairs), size):
        chunk = pairs[start:start + size]
        chunk = sorted(chunk, key=lambda p: len(tokenizer.tokenize(p[0]))
                       + len(tokenizer.tokenize(p[1])))
        batches = [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        for k in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[k]


# ----------------------------------------------------------------------------- evaluation

def _masked_batches(tokenizer: WordPiece, pairs, seed: int, batch_size: int,
                    p: float = 0.15) -> Iterator[dict[str, torch.Tensor]]:
    """pretraining_batch over `pairs` in chunks, masked by one generator seeded with seed:
    the same seed, the same chosen positions (for the model and for the baseline)."""
    _require_tokenizer(tokenizer)
    pairs = text_pairs(pairs)
    require_int(seed, "seed", low=0)
    batch_size = require_int(batch_size, "batch_size")
    generator = torch.Generator().manual_seed(seed)
    for start in range(0, len(pairs), batch_size):
        yield pretraining_batch(tokenizer, pairs[start:start + batch_size], p, generator)


@torch.no_grad()
def mlm_accuracy(model: BertForPretraining, tokenizer: WordPiece, pairs, seed: int = 0,
                 batch_size: int = 256) -> float:
    """The share of the chosen positions (15% of the ordinary tokens of `pairs`, masked as in
    pretraining with a generator seeded with `seed`) whose original token is the model's
    most probable one. All chosen positions count, also the 10% left unchanged and the 10%
    given a random token, as in BERT's own evaluation."""
    _require_model(model)
    right = total = 0
    with eval_mode(model):
        for batch in _masked_batches(tokenizer, pairs, seed, batch_size):
            mlm, _, _ = model(batch["ids"], batch["segments"], batch["attention_mask"])
            chosen = batch["labels"] != IGNORE  # (B, T)
            right += int((mlm.argmax(-1)[chosen] == batch["labels"][chosen]).sum())
            total += int(chosen.sum())
    return right / total if total else math.nan


def most_frequent_token(tokenizer: WordPiece, stories) -> str:
    """The most frequent token of the training data: of all tokens of every sentence of
    `stories`, tokenized as in pretraining (special tokens are never masked and do not
    count). Ties go to the lower id."""
    _require_tokenizer(tokenizer)
    counts = Counter()
    for text in story_texts(stories):
        counts.update(tokenizer.encode(text)[1:-1])  # without [CLS] and [SEP]
    if not counts:
        raise ValueError("stories hold no tokens to count")
    return tokenizer.tokens[min(counts, key=lambda i: (-counts[i], i))]


def unigram_accuracy(tokenizer: WordPiece, stories, pairs, seed: int = 0,
                     batch_size: int = 256) -> float:
    """The unigram baseline of mlm_accuracy: a "model" that predicts, at every chosen
    position, the most frequent token of the training data `stories` (most_frequent_token,
    for the stories "the"), whatever the context. Its accuracy is the share of the chosen
    positions, the very ones mlm_accuracy(model, tokenizer, pairs, seed, batch_size)
    scores, whose original token is that token."""
    guess = tokenizer.vocab[most_frequent_token(tokenizer, stories)]
    right = total = 0
    for batch in _masked_batches(tokenizer, pairs, seed, batch_size):
        labels = batch["labels"][batch["labels"] != IGNORE]  # (n_masked,)
        right += int((labels == guess).sum())
        total += len(labels)
    return right / total if total else math.nan


@torch.no_grad()
def nsp_accuracy(model: BertForPretraining, tokenizer: WordPiece, pairs,
                 batch_size: int = 256) -> float:
    """The share of (A, B, is_next) pairs, read unmasked, for which the NSP head's larger
    logit is the truth (class 1 = B follows A). Chance: 50% on nsp_pairs."""
    _require_model(model)
    _require_tokenizer(tokenizer)
    pairs = text_pairs(pairs)
    batch_size = require_int(batch_size, "batch_size")
    right = 0
    with eval_mode(model):
        for start in range(0, len(pairs), batch_size):
            a, b, is_next = zip(*pairs[start:start + batch_size], strict=True)
            ids, segments, keep = tokenizer.encode_batch(list(a), list(b))  # (B, T) each
            _, nsp, _ = model(ids, segments, keep)
            right += int((nsp.argmax(-1) == torch.tensor(is_next)).sum())
    return right / len(pairs)


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer: WordPiece, text: str,
              pair: str | None = None, k: int = 5) -> list[tuple[str, float]]:
    """The k most probable tokens at the one [MASK] of `text` (or of `pair`, the second
    segment): [(token, probability), ...], most probable first; probabilities from the
    softmax over the whole vocabulary.

    fill_mask(model, tok, "mary met tom , and [MASK] gave him a ball .") -> [("she", 0.98),
    ...]"""
    _require_model(model)
    _require_tokenizer(tokenizer)
    require_str(text, "text")
    if pair is not None:
        require_str(pair, "pair")
    k = require_int(k, "k", high=len(tokenizer))
    ids = tokenizer.encode(text, pair)
    n_masks = ids.count(tokenizer.mask_id)
    if n_masks != 1:
        raise ValueError(f"the text must hold exactly one [MASK]; got {n_masks} in "
                         f"{text!r}" + ("" if pair is None else f" and {pair!r}"))
    ids_t = torch.tensor([ids])  # (1, T)
    segments = torch.tensor([tokenizer.segment_ids(ids)])  # (1, T)
    with eval_mode(model):
        mlm, _, _ = model(ids_t, segments)  # (1, T, n_vocab)
    probs = mlm[0, ids.index(tokenizer.mask_id)].softmax(-1)  # (n_vocab,)
    top = probs.topk(k)
    return [(tokenizer.tokens[i], p) for p, i in zip(top.values.tolist(),
                                                      top.indices.tolist(), strict=True)]
