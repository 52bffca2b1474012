"""Unit 08's tiny BERT: the weights of tiny_bert.pretrained_tiny_bert(seed=0), pretrained once
and shipped in course_utils/data/tiny_bert.safetensors, so that unit 08 reads them rather than
spend a minute retraining what lecture 07 has shown.

    write_shipped     pretrain, measure on lecture 07's held-out pairs, save (`make tiny-bert`)
    save              weights + the recipe, the data's digests and measured accuracies
    load              -> (model, tokenizer); refuses a file of another recipe or other data
    shipped_metadata  what a file says: recipe, digests, torch version, accuracies
    data_fingerprint  SHA-256 of the tokenizer's tokens and of every pretraining pair's text
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from course_utils._checks import require_int, require_positive_number
from course_utils.bert import BertForPretraining
from course_utils.bert_pretraining import mlm_accuracy, nsp_accuracy
from course_utils.data.stories import make_stories, nsp_pairs
from course_utils.tiny_bert import RECIPE, pretrained_tiny_bert, story_tokenizer, tiny_config
from course_utils.tokenization import WordPiece

__all__ = ["SHIPPED", "data_fingerprint", "load", "recipe_metadata", "save",
           "shipped_metadata", "write_shipped"]

SHIPPED = Path(__file__).parent / "data" / "tiny_bert.safetensors"


def recipe_metadata(seed: int = 0) -> dict:
    """Everything that decides the pretrained weights: the seed and tiny_bert.RECIPE."""
    return {"seed": require_int(seed, "seed", low=0), **RECIPE.as_dict()}


def _vocab_digest(tokenizer: WordPiece) -> str:
    return hashlib.sha256("\n".join(tokenizer.tokens).encode()).hexdigest()


def data_fingerprint(tokenizer: WordPiece, seed: int = 0) -> dict[str, str]:
    """SHA-256 digests of what pretrained_tiny_bert(seed) learns from: the tokenizer's tokens
    and the text of every pretraining pair. Saved weights carry them, so that a change to
    the stories or the tokenizer that leaves the recipe alone still shows."""
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
    stories = make_stories(RECIPE.n_stories, require_int(seed, "seed", low=0))
    pairs = nsp_pairs(stories, RECIPE.n_steps * RECIPE.batch_size, seed)
    data = "\n".join(f"{a.text}\t{b.text}\t{int(is_next)}" for a, b, is_next in pairs)
    return {"vocab_sha256": _vocab_digest(tokenizer),
            "data_sha256": hashlib.sha256(data.encode()).hexdigest()}


def save(model: BertForPretraining, tokenizer: WordPiece, path, seed: int = 0,
         **measured: float) -> None:
    """Write `model`'s weights to a safetensors file at `path`, with recipe_metadata(seed),
    data_fingerprint(tokenizer, seed), the torch version and the `measured` numbers (e.g.
    nsp_accuracy=0.77) as its metadata."""
    if not isinstance(model, BertForPretraining):
        raise ValueError(f"model must be a BertForPretraining; got {type(model).__name__}")
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's "
                         f"vocab_size is {model.config.vocab_size}")
    metadata = {"recipe": json.dumps(recipe_metadata(seed), sort_keys=True),
                "torch": torch.__version__, **data_fingerprint(tokenizer, seed)}
    for name, value in measured.items():
        metadata[name] = f"{require_positive_number(value, name, zero=True):.4f}"
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path),
              metadata)
    Path(path).chmod(0o644)  # safetensors writes 0600; the file ships to every user


def shipped_metadata(path=SHIPPED) -> dict[str, str]:
    """The metadata that `save` wrote to `path`: recipe, torch, digests, measured numbers."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tiny-BERT weights at {path}; `make tiny-bert` writes them")
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def load(path=SHIPPED) -> tuple[BertForPretraining, WordPiece]:
    """-> (model in eval mode, tokenizer): the weights saved at `path` (by default the ones
    shipped with the course) in a BertForPretraining(tiny_config(story_tokenizer(seed))).

    The file must have been written with today's recipe (the metadata say which), so that
    its model is the one pretrained_tiny_bert(seed) trains, up to the last digits that
    another CPU changes."""
    metadata = shipped_metadata(path)
    try:
        made_with = json.loads(metadata["recipe"])
    except (KeyError, json.JSONDecodeError):
        raise ValueError(f"{path} has no recipe in its metadata: it was not written by "
                         f"shipped_tiny_bert.save") from None
    seed = made_with.get("seed", 0) if isinstance(made_with, dict) else None
    if not isinstance(seed, int) or seed < 0 or \
            made_with != json.loads(json.dumps(recipe_metadata(seed))):
        raise ValueError(f"{path} was pretrained with the recipe {made_with}, but "
                         f"course_utils.tiny_bert's recipe is now {RECIPE.as_dict()}: run "
                         f"`make tiny-bert` to pretrain and write the weights again")
    tokenizer = story_tokenizer(seed)
    if metadata.get("vocab_sha256") != _vocab_digest(tokenizer):
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


def write_shipped(path=SHIPPED, progress: bool = True) -> dict[str, float]:
    """Pretrain with pretrained_tiny_bert(seed=0), measure it on lecture 07's 1,000 held-out
    pairs, and save it to `path` (`make tiny-bert`); -> the measured accuracies."""
    model, tokenizer, _ = pretrained_tiny_bert(seed=0, progress=progress)
    held_out = nsp_pairs(make_stories(500, seed=1), 1000, seed=1)  # as in lecture 07
    measured = {"mlm_accuracy": mlm_accuracy(model, tokenizer, held_out),
                "nsp_accuracy": nsp_accuracy(model, tokenizer, held_out)}
    save(model, tokenizer, path, seed=0, **measured)
    return measured
