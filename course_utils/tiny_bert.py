"""Units 07-08: a tiny BERT pretrained on the course's stories in about a minute.

The recipe, one function per step (`pretrained_tiny_bert` runs them all):

    story_tokenizer   a WordPiece vocabulary trained on the stories (about 570 tokens: most
                      words whole, plurals and -ed / -ing forms often in pieces: cake ##s)
    tiny_config       BERT's shape, shrunk: L = 2 layers, d_model = 64, n_heads = 8, d_ff = 128
    pretrain          masked language modelling + next-sentence prediction on nsp_pairs,
                      batches from bert.pretraining_batch, the one training loop training.fit
    mlm_accuracy      share of the chosen (15%) positions whose original token is the arg max
    unigram_accuracy  the baseline: always guess the most frequent token of the training data
    nsp_accuracy      share of pairs whose "B follows A" is told right (chance: 50%)
    fill_mask         the k most probable tokens at the one [MASK] of a text

The weights of pretrained_tiny_bert(seed=0), written once by `make tiny-bert` and shipped in
course_utils/data/tiny_bert.safetensors (unit 08 reads them rather than retrain):

    load_tiny_bert            -> (model, tokenizer); refuses a file of another recipe or data
    save_tiny_bert            weights + recipe, data_fingerprint and measured accuracies
    write_shipped_tiny_bert   pretrain, measure on lecture 07's held-out pairs, save

Fine-tuning, a head on the [CLS] vector:

    BertClassifier            logits (B, n_classes) = W dropout(pooled) + b
    fine_tune                 train it (every weight, the encoder's too) on (text, label) pairs
    classification_accuracy   share of examples classified right

Pretraining batches are `pretraining_batch(CachedTokenizer(tokenizer), pairs)`: the cache
tokenizes each distinct word once and gives exactly the tensors that the tokenizer's own
`encode_batch` gives (the stories' few hundred words make up all their sentences, so this
saves most of the tokenizing).
Notation (README's table): B batch, T tokens, L layers, d_model width, n_heads heads, n_vocab
vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from course_utils._checks import (
    require_bool,
    require_fraction,
    require_int,
    require_positive_number,
    require_str,
)
from course_utils.bert import IGNORE, Bert, BertConfig, BertForPretraining, pretraining_batch
from course_utils.data.stories import Sentence, make_stories, nsp_pairs
from course_utils.tokenization import WordPiece, train_wordpiece
from course_utils.training import History, fit

__all__ = ["PRETRAINING", "SHIPPED", "BertClassifier", "CachedTokenizer",
           "classification_accuracy", "data_fingerprint", "fill_mask", "fine_tune",
           "load_tiny_bert", "mlm_accuracy", "most_frequent_token", "nsp_accuracy", "pretrain",
           "pretrained_tiny_bert", "pretraining_loss", "recipe", "save_tiny_bert",
           "sentence_pair", "story_texts", "story_tokenizer", "tiny_bert_metadata",
           "tiny_config", "unigram_accuracy", "write_shipped_tiny_bert"]

# The recipe of lectures 07 and 08: the stories, the tokenizer and the pretraining run.
PRETRAINING = {"n_stories": 5000, "steps": 1500, "batch_size": 64, "lr": 3e-3}
TOKENIZER = {"vocab_size": 600, "n_stories": 2000, "min_frequency": 100}
TINY = {"d_model": 64, "n_layers": 2, "n_heads": 8, "d_ff": 128, "max_len": 64,
        "dropout": 0.0}


# ----------------------------------------------------------------------------- tokenizer

def story_texts(stories) -> list[str]:
    """Every sentence of `stories` (from make_stories) as text, story after story."""
    if not isinstance(stories, list | tuple):
        raise ValueError(f"stories must be a list of stories (tuples of Sentences, from "
                         f"make_stories); got {type(stories).__name__}")
    texts = []
    for story in stories:
        if not isinstance(story, tuple) or not all(isinstance(s, Sentence) for s in story):
            raise ValueError(f"stories must hold stories (tuples of Sentences, from "
                             f"make_stories); got an element of type {type(story).__name__}")
        texts += [sentence.text for sentence in story]
    return texts


def story_tokenizer(vocab_size: int = TOKENIZER["vocab_size"],
                    n_stories: int = TOKENIZER["n_stories"], seed: int = 0,
                    min_frequency: int = TOKENIZER["min_frequency"]) -> WordPiece:
    """A WordPiece vocabulary trained (`train_wordpiece`) on make_stories(n_stories, seed).

    With the defaults the training stops at about 570 tokens, below vocab_size, when no pair
    of pieces is seen min_frequency = 100 times any more: the common words are whole, and
    the rarer inflected forms stay in pieces (apple ##s, cook ##ed, follow ##ing)."""
    require_int(seed, "seed", low=0)
    return train_wordpiece(story_texts(make_stories(require_int(n_stories, "n_stories"), seed)),
                           vocab_size, min_frequency)


class CachedTokenizer:
    """A tokenizer for `pretraining_batch` that tokenizes each distinct word once.

    No token spans a space (basic_tokenize splits there first), so the ids of a text are
    the ids of its space-separated parts one after the other; the stories have a few
    hundred distinct words and tens of thousands of distinct sentences. It has what
    pretraining_batch uses of a WordPiece (encode_batch, len, mask_id, special_ids, pad_id,
    ...) and gives exactly the same tensors as the WordPiece it wraps."""

    def __init__(self, tokenizer: WordPiece):
        if not isinstance(tokenizer, WordPiece):
            raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self._ids: dict[str, list[int]] = {}  # word (a text without " ") -> ids

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __getattr__(self, name):  # mask_id, special_ids, pad_id, cls_id, sep_id, tokens, ...
        if name == "tokenizer":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def ids(self, text: str) -> list[int]:
        """The token ids of one text, without [CLS] and [SEP]."""
        require_str(text, "text")
        ids = []
        for word in text.split(" "):
            if word not in self._ids:
                self._ids[word] = [self.tokenizer.vocab[t]
                                   for t in self.tokenizer.tokenize(word)]
            ids += self._ids[word]
        return ids

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As WordPiece.encode_batch: ids, segments (B, T) int64 and attention_mask (B, T)
        bool of [CLS] text [SEP] (pair [SEP]), padded to the longest."""
        if isinstance(texts, str) or not isinstance(texts, list | tuple) or not texts:
            raise ValueError("texts must be a non-empty list of str")
        if pairs is not None and (isinstance(pairs, str) or len(pairs) != len(texts)):
            raise ValueError(f"pairs must be None or a list of {len(texts)} str, one per text")
        cls, sep, pad = self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id
        a = [[cls, *self.ids(text), sep] for text in texts]
        b = [[] if pairs is None else [*self.ids(pair), sep] for pair in pairs or texts]
        T = max(len(x) + len(y) for x, y in zip(a, b, strict=True))
        ids = torch.tensor([x + y + [pad] * (T - len(x) - len(y))
                            for x, y in zip(a, b, strict=True)])  # (B, T)
        segments = torch.tensor([[0] * len(x) + [1] * len(y) + [0] * (T - len(x) - len(y))
                                 for x, y in zip(a, b, strict=True)])  # (B, T)
        lengths = torch.tensor([len(x) + len(y) for x, y in zip(a, b, strict=True)])  # (B,)
        mask = torch.arange(T) < lengths[:, None]  # (B, T): True at the real tokens
        return ids, segments, mask


def _cached(tokenizer) -> CachedTokenizer:
    if isinstance(tokenizer, CachedTokenizer):
        return tokenizer
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a WordPiece (e.g. from story_tokenizer); got "
                         f"{type(tokenizer).__name__}")
    return CachedTokenizer(tokenizer)


# ----------------------------------------------------------------------------- the model

def tiny_config(tokenizer: WordPiece, **overrides) -> BertConfig:
    """BERT's architecture at a size that pretrains on a 2-core CPU in about a minute:
    n_vocab = len(tokenizer), d_model = 64, L = 2, n_heads = 8 (d_k = 8), d_ff = 2 d_model = 128,
    max_len = 64,
    dropout 0 (a short run on fresh pairs does not overfit); eight narrow heads, so that
    unit 08 has more of them to compare. `overrides` replace any BertConfig field, e.g.
    tiny_config(tok, n_layers=4)."""
    if not isinstance(tokenizer, WordPiece | CachedTokenizer):
        raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
    if "vocab_size" in overrides or "pad_id" in overrides:
        raise ValueError("vocab_size and pad_id come from the tokenizer; they cannot be set")
    fields = set(BertConfig.__dataclass_fields__)
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown BertConfig fields {unknown}; the fields are {sorted(fields)}")
    return BertConfig(vocab_size=len(tokenizer), pad_id=tokenizer.pad_id,
                      **{**TINY, **overrides})


def _require_pretraining_model(model) -> BertForPretraining:
    if not isinstance(model, BertForPretraining):
        raise ValueError(f"model must be a BertForPretraining; got {type(model).__name__}")
    return model


def pretraining_loss(model: BertForPretraining, batch: dict) -> torch.Tensor:
    """BertForPretraining.loss (MLM cross-entropy over the chosen positions + NSP
    cross-entropy), with the MLM head run on the chosen positions only (about 15% of the
    (B, T) positions; the output matrix n_vocab x d_model is the costly part), as the original BERT
    does. Equal to model.loss(batch)[0] up to float rounding."""
    out = model.bert(batch["ids"], batch["segments"], batch["attention_mask"])
    chosen = batch["labels"] != IGNORE  # (B, T)
    x = out.last_hidden_state[chosen]  # (n_masked, d_model): the chosen positions of the batch
    x = model.mlm_norm(F.gelu(model.mlm_transform(x)))  # (n_masked, d_model)
    logits = x @ model.bert.embeddings.token.weight.T + model.mlm_bias  # (n_masked, n_vocab)
    mlm = F.cross_entropy(logits, batch["labels"][chosen]) if len(x) else logits.sum()
    nsp = F.cross_entropy(model.nsp(out.pooler_output), batch["is_next"].long())
    return mlm + nsp


def _text_pairs(pairs, name: str = "pairs") -> list[tuple[str, str, bool]]:
    """(A, B, is_next) triples with A, B a Sentence or a str -> (str, str, bool)."""
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


def pretrain(model: BertForPretraining, tokenizer: WordPiece, stories, *,
             steps: int = PRETRAINING["steps"], batch_size: int = PRETRAINING["batch_size"],
             lr: float = PRETRAINING["lr"], seed: int = 0, eval_pairs=None,
             eval_every: int = 0, progress: bool = True) -> History:
    """Pretrain `model` with MLM + NSP and return the History of `training.fit`.

    Every step reads batch_size fresh pairs, all of them drawn up front with
    nsp_pairs(stories, steps * batch_size, seed) (half of them true next sentences) and
    grouped into batches of about equal length (less padding, less work), and masks them
    with bert.pretraining_batch (15%; 80/10/10) from a generator seeded with `seed`. Adam
    at a constant learning rate (NSP's harder clue, comparing B with A, is learnt late if at
    all, and a decaying rate makes it later still), gradients clipped to
    norm 1. The loss is `pretraining_loss`.

    eval_pairs: None, or held-out (A, B, is_next) pairs on which mlm_accuracy and
    nsp_accuracy are measured every eval_every steps (and after the last), in
    history.metrics["mlm_accuracy"], ["nsp_accuracy"]. The model is in eval mode after."""
    _require_pretraining_model(model)
    tokenizer = _cached(tokenizer)
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's "
                         f"vocab_size is {model.config.vocab_size}: build the model with "
                         f"tiny_config(tokenizer)")
    steps = require_int(steps, "steps")
    batch_size = require_int(batch_size, "batch_size")
    require_int(seed, "seed", low=0)
    eval_every = require_int(eval_every, "eval_every", low=0)
    evaluate = None
    if eval_pairs is not None:
        eval_pairs = _text_pairs(eval_pairs, "eval_pairs")

        def evaluate(m):
            return {"mlm_accuracy": mlm_accuracy(m, tokenizer, eval_pairs, seed=seed),
                    "nsp_accuracy": nsp_accuracy(m, tokenizer, eval_pairs)}
    elif eval_every:
        raise ValueError(f"eval_every = {eval_every} needs eval_pairs to evaluate on")
    pairs = _text_pairs(nsp_pairs(stories, steps * batch_size, seed))
    generator = torch.Generator().manual_seed(seed)
    batches = (pretraining_batch(tokenizer, group, generator=generator)
               for group in _length_batches(tokenizer, pairs, batch_size, generator))
    return fit(model, pretraining_loss, batches, n_steps=steps, lr=lr, schedule="constant",
               clip=1.0, evaluate=evaluate, eval_every=eval_every, progress=progress,
               desc="pretraining")


def _length_batches(cache: CachedTokenizer, pairs: list, batch_size: int,
                    generator: torch.Generator, group: int = 16) -> Iterator[list]:
    """`pairs` cut into batches of batch_size pairs of about the same length, so that little
    of a batch is padding: each run of `group` batches' worth of pairs (in drawn order) is
    sorted by length, cut into batches, and these batches come in a random order."""
    size = group * batch_size
    for start in range(0, len(pairs), size):
        chunk = pairs[start:start + size]
        chunk = sorted(chunk, key=lambda p: len(cache.ids(p[0])) + len(cache.ids(p[1])))
        batches = [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        for k in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[k]


def pretrained_tiny_bert(seed: int = 0, progress: bool = True, **kwargs
                         ) -> tuple[BertForPretraining, WordPiece, History]:
    """The whole recipe in one call -> (model in eval mode, tokenizer, history):

        tokenizer = story_tokenizer(seed=seed)
        seed_everything(seed); model = BertForPretraining(tiny_config(tokenizer))
        pretrain(model, tokenizer, make_stories(n_stories, seed), steps=..., seed=seed)

    kwargs: n_stories, steps, batch_size, lr (defaults in PRETRAINING) and any BertConfig
    field for tiny_config (e.g. n_layers=2). The same seed on the same machine gives the same
    weights as lecture 07's model (which runs these lines one by one) when it runs on as many
    threads (the lecture takes two where it can); on another CPU, or another number of
    threads, the weights differ in the last digits, and results of training a little more."""
    require_int(seed, "seed", low=0)
    settings = {k: kwargs.pop(k) for k in list(kwargs) if k in PRETRAINING}
    settings = {**PRETRAINING, **settings}
    tokenizer = story_tokenizer(seed=seed)
    torch.manual_seed(seed)
    model = BertForPretraining(tiny_config(tokenizer, **kwargs))
    stories = make_stories(require_int(settings["n_stories"], "n_stories"), seed)
    history = pretrain(model, tokenizer, stories, steps=settings["steps"],
                       batch_size=settings["batch_size"], lr=settings["lr"], seed=seed,
                       progress=progress)
    return model, tokenizer, history


# ----------------------------------------------------------------------------- shipped weights

# The tiny BERT of pretrained_tiny_bert(seed=0), pretrained once (`make tiny-bert`) and shipped
# with the package, so that unit 08 reads it instead of spending a minute retraining it.
SHIPPED = Path(__file__).parent / "data" / "tiny_bert.safetensors"


def recipe(seed: int = 0) -> dict:
    """Everything that decides the pretrained weights: the seed and the settings of
    PRETRAINING, TOKENIZER and TINY."""
    return {"seed": require_int(seed, "seed", low=0), "pretraining": PRETRAINING,
            "tokenizer": TOKENIZER, "tiny": TINY}


def data_fingerprint(tokenizer: WordPiece, seed: int = 0) -> dict[str, str]:
    """SHA-256 digests of what pretrained_tiny_bert(seed) learns from: the tokenizer's tokens
    and the text of every pretraining pair. Saved weights carry them, so that a change to
    the stories or the tokenizer that leaves `recipe` alone still shows."""
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
    stories = make_stories(PRETRAINING["n_stories"], seed)
    pairs = nsp_pairs(stories, PRETRAINING["steps"] * PRETRAINING["batch_size"], seed)
    data = "\n".join(f"{a.text}\t{b.text}\t{int(is_next)}" for a, b, is_next in pairs)
    return {"vocab_sha256": hashlib.sha256("\n".join(tokenizer.tokens).encode()).hexdigest(),
            "data_sha256": hashlib.sha256(data.encode()).hexdigest()}


def save_tiny_bert(model: BertForPretraining, tokenizer: WordPiece, path, seed: int = 0,
                   **measured: float) -> None:
    """Write `model`'s weights to a safetensors file at `path`, with recipe(seed),
    data_fingerprint(tokenizer, seed), the torch version and the `measured` numbers (e.g.
    nsp_accuracy=0.77) as its metadata."""
    _require_pretraining_model(model)
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's "
                         f"vocab_size is {model.config.vocab_size}")
    metadata = {"recipe": json.dumps(recipe(seed), sort_keys=True), "torch": torch.__version__,
                **data_fingerprint(tokenizer, seed)}
    for name, value in measured.items():
        metadata[name] = f"{require_positive_number(value, name, zero=True):.4f}"
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path),
              metadata)


def tiny_bert_metadata(path=SHIPPED) -> dict[str, str]:
    """The metadata that save_tiny_bert wrote to `path`: recipe, torch, measured numbers."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tiny-BERT weights at {path}; `make tiny-bert` writes them")
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def load_tiny_bert(path=SHIPPED) -> tuple[BertForPretraining, WordPiece]:
    """-> (model in eval mode, tokenizer): the weights saved at `path` (by default the ones
    shipped with the course) in a BertForPretraining(tiny_config(story_tokenizer(seed))).

    The file must have been written with today's recipe (the metadata say which), so that
    its model is the one pretrained_tiny_bert(seed) trains, up to the last digits that
    another CPU changes."""
    metadata = tiny_bert_metadata(path)
    try:
        made_with = json.loads(metadata["recipe"])
    except (KeyError, json.JSONDecodeError):
        raise ValueError(f"{path} has no recipe in its metadata: it was not written by "
                         f"save_tiny_bert") from None
    seed = made_with.get("seed", 0)
    if not isinstance(seed, int) or made_with != json.loads(json.dumps(recipe(seed))):
        raise ValueError(f"{path} was pretrained with the recipe {made_with}, but "
                         f"course_utils.tiny_bert's recipe is now {recipe(seed)}: run "
                         f"`make tiny-bert` to pretrain and write the weights again")
    tokenizer = story_tokenizer(seed=seed)
    vocab_sha = hashlib.sha256("\n".join(tokenizer.tokens).encode()).hexdigest()
    if metadata.get("vocab_sha256") != vocab_sha:
        raise ValueError(f"{path} was pretrained with another vocabulary than "
                         f"story_tokenizer(seed={seed}) trains now: run `make tiny-bert` to "
                         f"pretrain and write the weights again")
    model = BertForPretraining(tiny_config(tokenizer))
    state = load_file(str(path))
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{path} does not hold the tiny BERT's weights: missing {missing}, "
                         f"unexpected {unexpected}")
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ValueError(f"{path}: weight {name} has shape {tuple(tensor.shape)}, the "
                             f"tiny BERT's has {tuple(expected[name].shape)}")
    model.load_state_dict(state)
    return model.eval(), tokenizer


def write_shipped_tiny_bert(path=SHIPPED, progress: bool = True) -> dict[str, float]:
    """Pretrain with pretrained_tiny_bert(seed=0), measure it on lecture 07's 1,000 held-out
    pairs, and save it to `path` (`make tiny-bert`); -> the measured accuracies."""
    model, tokenizer, _ = pretrained_tiny_bert(seed=0, progress=progress)
    held_out = nsp_pairs(make_stories(500, seed=1), 1000, seed=1)  # as in lecture 07
    measured = {"mlm_accuracy": mlm_accuracy(model, tokenizer, held_out),
                "nsp_accuracy": nsp_accuracy(model, tokenizer, held_out)}
    save_tiny_bert(model, tokenizer, path, seed=0, **measured)
    return measured


# ----------------------------------------------------------------------------- evaluation

def _masked_batches(tokenizer, pairs, seed: int, batch_size: int, p: float = 0.15
                    ) -> Iterator[dict[str, torch.Tensor]]:
    """pretraining_batch over `pairs` in chunks, masked by one generator seeded with seed:
    the same seed, the same chosen positions (for the model and for the baseline)."""
    tokenizer = _cached(tokenizer)
    pairs = _text_pairs(pairs)
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
    _require_pretraining_model(model)
    was_training = model.training
    model.eval()
    right = total = 0
    for batch in _masked_batches(tokenizer, pairs, seed, batch_size):
        mlm, _, _ = model(batch["ids"], batch["segments"], batch["attention_mask"])
        chosen = batch["labels"] != IGNORE  # (B, T)
        right += int((mlm.argmax(-1)[chosen] == batch["labels"][chosen]).sum())
        total += int(chosen.sum())
    model.train(was_training)
    return right / total if total else math.nan


def most_frequent_token(tokenizer: WordPiece, stories) -> str:
    """The most frequent token of the training data: of all tokens of every sentence of
    `stories`, tokenized as in pretraining (special tokens are never masked and do not
    count). Ties go to the lower id."""
    cache = _cached(tokenizer)
    counts = Counter()
    for text in story_texts(stories):
        counts.update(cache.ids(text))
    if not counts:
        raise ValueError("stories hold no tokens to count")
    return cache.tokens[min(counts, key=lambda i: (-counts[i], i))]


def unigram_accuracy(tokenizer: WordPiece, stories, pairs, seed: int = 0,
                     batch_size: int = 256) -> float:
    """The unigram baseline of mlm_accuracy: a "model" that predicts, at every chosen
    position, the most frequent token of the training data `stories` (most_frequent_token,
    for the stories "the"), whatever the context. Its accuracy is the share of the chosen
    positions, the very ones mlm_accuracy(model, tokenizer, pairs, seed, batch_size)
    scores, whose original token is that token."""
    cache = _cached(tokenizer)
    guess = cache.vocab[most_frequent_token(cache, stories)]
    right = total = 0
    for batch in _masked_batches(cache, pairs, seed, batch_size):
        labels = batch["labels"][batch["labels"] != IGNORE]  # (n_masked,)
        right += int((labels == guess).sum())
        total += len(labels)
    return right / total if total else math.nan


@torch.no_grad()
def nsp_accuracy(model: BertForPretraining, tokenizer: WordPiece, pairs,
                 batch_size: int = 256) -> float:
    """The share of (A, B, is_next) pairs, read unmasked, for which the NSP head's larger
    logit is the truth (class 1 = B follows A). Chance: 50% on nsp_pairs."""
    _require_pretraining_model(model)
    cache = _cached(tokenizer)
    pairs = _text_pairs(pairs)
    batch_size = require_int(batch_size, "batch_size")
    was_training = model.training
    model.eval()
    right = 0
    for start in range(0, len(pairs), batch_size):
        a, b, is_next = zip(*pairs[start:start + batch_size], strict=True)
        ids, segments, keep = cache.encode_batch(list(a), list(b))  # (B, T) each
        _, nsp, _ = model(ids, segments, keep)
        right += int((nsp.argmax(-1) == torch.tensor(is_next)).sum())
    model.train(was_training)
    return right / len(pairs)


@torch.no_grad()
def fill_mask(model: BertForPretraining, tokenizer: WordPiece, text: str,
              pair: str | None = None, k: int = 5) -> list[tuple[str, float]]:
    """The k most probable tokens at the one [MASK] of `text` (or of `pair`, the second
    segment): [(token, probability), ...], most probable first; probabilities from the
    softmax over the whole vocabulary.

    fill_mask(model, tok, "mary met tom , and [MASK] gave him a ball .") -> [("she", 0.98),
    ...]"""
    _require_pretraining_model(model)
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
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
    was_training = model.training
    model.eval()
    mlm, _, _ = model(ids_t, segments)  # (1, T, n_vocab)
    model.train(was_training)
    probs = mlm[0, ids.index(tokenizer.mask_id)].softmax(-1)  # (n_vocab,)
    top = probs.topk(k)
    return [(tokenizer.tokens[i], p) for p, i in zip(top.values.tolist(),
                                                      top.indices.tolist(), strict=True)]


# ----------------------------------------------------------------------------- fine-tuning

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


def _encode_examples(tokenizer, examples, n_classes: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(text or (text_a, text_b), label) examples -> ids, segments, mask (N, T), labels (N,)."""
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
        require_int(label, f"the label of examples[{i}]", low=0,
                    high=None if n_classes is None else n_classes - 1)
        a.append(text)
        b.append(second)
        labels.append(label)
    if any(s is None for s in b) and not all(s is None for s in b):
        raise ValueError("examples must all be single texts or all pairs (A, B)")
    cache = _cached(tokenizer)
    ids, segments, keep = cache.encode_batch(a, None if b[0] is None else b)  # (N, T) each
    return ids, segments, keep, torch.tensor(labels)


def fine_tune(classifier: BertClassifier, tokenizer: WordPiece, examples, *, epochs: int,
              batch_size: int = 32, lr: float = 1e-3, seed: int = 0,
              progress: bool = True) -> History:
    """Fine-tune every weight of `classifier` on (text, label) examples (text: a str, or a
    pair (A, B) read as [CLS] A [SEP] B [SEP]) with cross-entropy, and return its History.

    `epochs` passes over the examples, shuffled anew each pass by a generator seeded with
    `seed` (the last batch of a pass may be smaller); Adam, the learning rate falling
    linearly from lr, gradients clipped to norm 1. In train mode during, eval mode after."""
    if not isinstance(classifier, BertClassifier):
        raise ValueError(f"classifier must be a BertClassifier; got "
                         f"{type(classifier).__name__}")
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
    if not isinstance(classifier, BertClassifier):
        raise ValueError(f"classifier must be a BertClassifier; got "
                         f"{type(classifier).__name__}")
    ids, segments, keep, labels = _encode_examples(tokenizer, examples,
                                                   classifier.head.out_features)
    batch_size = require_int(batch_size, "batch_size")
    was_training = classifier.training
    classifier.eval()
    right = 0
    for start in range(0, len(labels), batch_size):
        rows = slice(start, start + batch_size)
        logits = classifier(ids[rows], segments[rows], keep[rows])  # (b, n_classes)
        right += int((logits.argmax(-1) == labels[rows]).sum())
    classifier.train(was_training)
    return right / len(labels)
