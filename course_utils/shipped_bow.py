"""Lecture 01's models that repeat its training loop, trained once with its recipe and shipped.

Lecture 01 trains its bigram, mean-bag and feed-forward attention models in front of the
reader; the six others (the bags with hand-set weights by recency and by idf, dot attention,
dot and feed-forward attention with position vectors, and the position-only control) are the
same `train` call with other flags, trained once by `make translators` and read from
course_utils/data/bow_positions.safetensors (named when it held the three with positions
only), their training losses with them.

    MODEL, TRAINING, VARIANTS  the lecture's sizes, its training settings, each model's flags
    SENTENCE_ENDS, idf_weights the idf bag's documents (sentences) and its word weights
    train_variant              seed_everything(0), build, bow.train_lm -> (model, History)
    write_shipped              train them all, measure held-out perplexity, save
    load                       -> (model in eval mode, History); refuses a file of another
                               recipe or another corpus
    shipped_metadata           what a file says: recipe, data digest, torch, results
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from course_utils._checks import require_choice
from course_utils.bow import (
    BagOfWordsLM,
    BowConfig,
    inverse_document_frequency,
    perplexity,
    train_lm,
)
from course_utils.data.corpus import Corpus, load_corpus
from course_utils.shipped_files import load_variant, read_metadata, require_current, save_variants
from course_utils.training import History, seed_everything

__all__ = ["MODEL", "SENTENCE_ENDS", "SHIPPED", "TRAINING", "VARIANTS", "data_digest",
           "idf_weights", "load", "recipe",
           "shipped_metadata", "train_variant", "write_shipped"]

SEED = 0
MODEL = {"d_emb": 32, "n_ctx": 8}  # lecture 01's MODEL_SETTINGS
TRAINING = {"n_steps": 800, "batch_size": 32, "seq_len": 32, "lr": 0.01}  # its TRAIN_SETTINGS
SENTENCE_ENDS = (".", "?", "!")  # the idf bag's documents are the training text's sentences
VARIANTS = {
    "recency weights": {"pooling": "recency"},
    "idf weights": {"pooling": "idf"},
    "attention, dot": {"pooling": "attention", "score": "dot"},
    "attention, dot + positions": {"pooling": "attention", "score": "dot", "positions": True},
    "attention, feed-forward + positions": {"pooling": "attention", "score": "feedforward",
                                            "positions": True},
    "position only (control)": {"pooling": "position"},
}
SHIPPED = Path(__file__).parent / "data" / "bow_positions.safetensors"


def recipe() -> dict:
    """Everything in a file's metadata that must match today's code."""
    return {"model": MODEL, "training": TRAINING, "variants": VARIANTS, "seed": SEED,
            "sentence_ends": SENTENCE_ENDS}


def idf_weights(corpus: Corpus) -> torch.Tensor:
    """The idf bag's word weights (n_vocab,): bow.inverse_document_frequency over the
    training text's sentences, as lecture 01 computes them."""
    ends = corpus.vocab.encode(list(SENTENCE_ENDS))
    return inverse_document_frequency(corpus.train_ids, len(corpus.vocab), ends)


def _build(corpus: Corpus, name: str) -> BagOfWordsLM:
    """A fresh model of variant `name` (the idf bag with idf_weights(corpus))."""
    config = BowConfig(len(corpus.vocab), **MODEL, **VARIANTS[name])
    return BagOfWordsLM(config, idf_weights(corpus) if config.pooling == "idf" else None)


def data_digest(corpus: Corpus) -> str:
    """SHA-256 of the vocabulary and of the training and held-out ids."""
    digest = hashlib.sha256("\n".join(corpus.vocab.tokens).encode())
    for ids in (corpus.train_ids, corpus.heldout_ids):
        digest.update(ids.numpy().tobytes())
    return digest.hexdigest()


def train_variant(corpus: Corpus, name: str, progress: bool = True
                  ) -> tuple[BagOfWordsLM, History]:
    """Lecture 01's `train(name, **VARIANTS[name])` (and `word_weights=idf` for the idf bag):
    seed_everything(0), build the model, train it on corpus.train_ids with TRAINING;
    -> (model in eval mode, History)."""
    require_choice(name, "name", tuple(VARIANTS))
    generator = seed_everything(SEED)
    model = _build(corpus, name)
    history = train_lm(model, corpus.train_ids, generator=generator, desc=name,
                       progress=progress, **TRAINING)
    return model.eval(), history


def write_shipped(path=SHIPPED, progress: bool = True) -> dict:
    """Train every variant on load_corpus(), measure its held-out perplexity and save them all
    to one safetensors file at `path` (`make translators`); -> the results."""
    path = Path(path)
    corpus = load_corpus()
    trained, results = {}, {}
    for name in VARIANTS:
        model, history = trained[name] = train_variant(corpus, name, progress=progress)
        results[name] = {"perplexity": round(perplexity(model, corpus.heldout_ids), 3),
                         "seconds": round(history.seconds, 2)}
    metadata = {"recipe": json.dumps(recipe(), sort_keys=True), "data_sha256": data_digest(corpus),
                "torch": torch.__version__, "results": json.dumps(results, sort_keys=True)}
    save_variants(path, trained, metadata)
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    return read_metadata(path, "bag-of-words weights", "shipped_bow.write_shipped")


def load(name: str, corpus: Corpus | None = None, path=SHIPPED
         ) -> tuple[BagOfWordsLM, History]:
    """-> (model of variant `name` in eval mode, the History of the run that trained it: loss
    per step, and wall time on the machine that wrote the file). The file must hold today's
    recipe and corpus, so that its model is the one train_variant(corpus, name) trains, up
    to the last digits that another CPU changes."""
    require_choice(name, "name", tuple(VARIANTS))
    path = Path(path)
    metadata = shipped_metadata(path)
    corpus = load_corpus() if corpus is None else corpus
    require_current(path, metadata, recipe(), "lecture 01's", data_digest(corpus),
                    "another corpus than load_corpus() reads now")
    model = _build(corpus, name)
    loss = load_variant(path, name, model)
    return model.eval(), History(loss=loss, seconds=metadata["results"][name]["seconds"])
