"""Units 07-08: the recipe of the tiny BERT pretrained on the course's stories in about a minute.

    TinyBertRecipe        every setting that decides the weights: the tokenizer's, the
                          model's sizes, the pretraining run's; RECIPE holds the course's
    story_tokenizer       a WordPiece vocabulary trained on the stories (about 570 tokens: most
                          words whole, plurals and -ed / -ing forms often in pieces: cake ##s)
    tiny_config           BERT's shape, shrunk: L = 2 layers, d_model = 64, n_heads = 8,
                          d_ff = 128
    pretrained_tiny_bert  the whole recipe in one call: tokenizer, model, pretraining
                          (bert_pretraining.pretrain) -> (model, tokenizer, History)

Lecture 07 runs the recipe step by step; `shipped_tiny_bert` holds the weights of
pretrained_tiny_bert(seed=0), which unit 08 reads rather than retrain; `fine_tuning` puts a
classifier on top. Notation (README's table): L layers, d_model width, n_heads heads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from course_utils._checks import require_int
from course_utils.bert import BertConfig, BertForPretraining
from course_utils.bert_pretraining import pretrain
from course_utils.data.stories import make_stories, story_texts
from course_utils.tokenization import WordPiece, train_wordpiece
from course_utils.training import History

__all__ = ["MODEL_FIELDS", "RECIPE", "TinyBertRecipe", "pretrained_tiny_bert",
           "story_tokenizer", "tiny_config"]


@dataclass(frozen=True)
class TinyBertRecipe:
    """Everything that decides the tiny BERT's weights besides the code and the seed."""

    # the tokenizer: train_wordpiece on make_stories(tokenizer_stories)
    vocab_size: int = 600
    tokenizer_stories: int = 2000
    min_frequency: int = 100
    # the model: BertConfig fields (n_vocab and pad_id come from the tokenizer)
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 8
    d_ff: int = 128
    n_positions: int = 64
    dropout: float = 0.0
    # pretraining: bert_pretraining.pretrain on make_stories(n_stories)
    n_stories: int = 5000
    n_steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3

    def as_dict(self) -> dict:
        """The settings by name (the shipped weights' metadata holds them)."""
        return asdict(self)


RECIPE = TinyBertRecipe()
MODEL_FIELDS = ("d_model", "n_layers", "n_heads", "d_ff", "n_positions", "dropout")


def story_tokenizer(seed: int = 0, recipe: TinyBertRecipe = RECIPE) -> WordPiece:
    """A WordPiece vocabulary trained (`train_wordpiece`) on
    make_stories(recipe.tokenizer_stories, seed).

    With the course's recipe the training stops at about 570 tokens, below vocab_size = 600,
    when no pair of pieces is seen min_frequency = 100 times any more: the common words are
    whole, and the rarer inflected forms stay in pieces (apple ##s, cook ##ed, follow ##ing)."""
    require_int(seed, "seed", low=0)
    _require_recipe(recipe)
    stories = make_stories(recipe.tokenizer_stories, seed)
    return train_wordpiece(story_texts(stories), recipe.vocab_size, recipe.min_frequency)


def tiny_config(tokenizer: WordPiece, recipe: TinyBertRecipe = RECIPE, **overrides
                ) -> BertConfig:
    """BERT's architecture at a size that pretrains on a 2-core CPU in about a minute:
    n_vocab = len(tokenizer), d_model = 64, L = 2, n_heads = 8 (d_k = 8), d_ff = 2 d_model =
    128, n_positions = 64, dropout 0 (a short run on fresh pairs does not overfit); eight
    narrow heads, so that unit 08 has more of them to compare. `overrides` replace any
    BertConfig field, e.g. tiny_config(tok, n_layers=4)."""
    if not isinstance(tokenizer, WordPiece):
        raise ValueError(f"tokenizer must be a WordPiece; got {type(tokenizer).__name__}")
    _require_recipe(recipe)
    if "vocab_size" in overrides or "pad_id" in overrides:
        raise ValueError("vocab_size and pad_id come from the tokenizer; they cannot be set")
    fields = set(BertConfig.__dataclass_fields__)
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown BertConfig fields {unknown}; the fields are {sorted(fields)}")
    sizes = {name: getattr(recipe, name) for name in MODEL_FIELDS}
    return BertConfig(vocab_size=len(tokenizer), pad_id=tokenizer.pad_id,
                      **{**sizes, **overrides})


def pretrained_tiny_bert(seed: int = 0, progress: bool = True,
                         recipe: TinyBertRecipe = RECIPE
                         ) -> tuple[BertForPretraining, WordPiece, History]:
    """The whole recipe in one call -> (model in eval mode, tokenizer, history):

        tokenizer = story_tokenizer(seed)
        torch.manual_seed(seed); model = BertForPretraining(tiny_config(tokenizer))
        pretrain(model, tokenizer, make_stories(recipe.n_stories, seed),
                 n_steps=recipe.n_steps, batch_size=recipe.batch_size, lr=recipe.lr, seed=seed)

    Another recipe: dataclasses.replace(RECIPE, n_steps=300). The same seed on the same
    machine gives the same weights as lecture 07's model (which runs these lines one by one)
    when it runs on as many threads (the lecture takes two where it can); on another CPU, or
    another number of threads, the weights differ in the last digits, and results of
    training a little more."""
    require_int(seed, "seed", low=0)
    _require_recipe(recipe)
    tokenizer = story_tokenizer(seed, recipe)
    torch.manual_seed(seed)
    model = BertForPretraining(tiny_config(tokenizer, recipe))
    stories = make_stories(recipe.n_stories, seed)
    history = pretrain(model, tokenizer, stories, n_steps=recipe.n_steps,
                       batch_size=recipe.batch_size, lr=recipe.lr, seed=seed,
                       progress=progress)
    return model, tokenizer, history


def _require_recipe(recipe) -> TinyBertRecipe:
    if not isinstance(recipe, TinyBertRecipe):
        raise ValueError(f"recipe must be a TinyBertRecipe (e.g. dataclasses.replace(RECIPE, "
                         f"n_steps=300)); got {type(recipe).__name__}")
    return recipe
