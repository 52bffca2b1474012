"""Unit 01: a language model that reads the previous word and a bag of the words before it.

The next word w_i is predicted from the previous word w_{i-1} and a summary A of the n_ctx
words before that, w_{i-1-n_ctx} .. w_{i-2} (the "context window"):

    p(w_i | w_1 .. w_{i-1}) = softmax(W_o [E(w_{i-1}); A] + b_o)

    E         the word embeddings, (n_vocab, d_emb)
    W_o, b_o  the output layer, (n_vocab, 2 d_emb) and (n_vocab,)
    A      "none":      nothing; the model is a bigram model, softmax(W_o E(w_{i-1}) + b_o)
           "mean":      the mean of E(w_k) over the window, every earlier word counting the same
           "recency":   sum_k alpha_k E(w_k) with hand-set weights by position: alpha_k is
                        proportional to decay^(i-2-k), so w_{i-2} counts most and each step
                        further back multiplies a word's weight by `decay` (0.5: halves it)
           "idf":       sum_k alpha_k E(w_k) with hand-set weights by word: alpha_k is
                        proportional to idf(w_k), the inverse document frequency of w_k
                        (`inverse_document_frequency`): rare words count more
           "attention": sum_k alpha_k E(w_k) with alpha = softmax_k(e_k) over the window, and the
                        score e_k of the earlier word w_k against the previous word w_{i-1}:
                 "dot":          e_k = E(w_k) . E(w_{i-1})
                 "feedforward":  e_k = w_a . tanh(W_a [E(w_k); E(w_{i-1})] + b_a)
           "position":  a control: sum_k alpha_k E(w_k) with alpha = softmax(p), one learned
                        score p_j per slot of the window, the same whatever the words are

Content alone cannot tell the word just before w_{i-1} from one ten words back. With
`positions=True` the attention scores see where each earlier word sits: a learned vector
P_j is added to the key of slot j before scoring, e_k = score(E(w_k) + P_j, E(w_{i-1}));
the bag still averages the words' own embeddings E(w_k). (Unit 05 returns to positions.)

Notation: B batch, T positions, n_ctx earlier words in the window, d_emb embedding width,
d_a width of the feed-forward scorer, n_vocab vocabulary. Position t of an input `ids (B, T)`
holds w_{i-1}; its window holds ids[:, t-n_ctx .. t-1]. Near the start of a sequence the
window reaches before the first word: those slots are padding and are masked (True = may
attend), so they get zero weight; at t = 0 the window is empty and A is the zero vector.

Read top to bottom: the window, the two score functions, the bags of words (mean, hand-set
weights, attention), the model, then training (`training.fit`) and perplexity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils._checks import (
    require_bool,
    require_choice,
    require_float_tensor,
    require_ids,
    require_int,
    require_mask,
    require_number_in,
    require_query_and_keys,
    shape_str,
)
from course_utils.attention import additive_scores, masked_softmax
from course_utils.data.vocab import PAD_ID, context_windows  # noqa: F401 (bow.context_windows)
from course_utils.training import History, eval_mode, fit

__all__ = [
    "BowConfig",
    "BagOfWordsLM",
    "weights_by_position",
    "dot_scores",
    "feedforward_scores",
    "mean_bag_of_words",
    "weighted_bag_of_words",
    "inverse_document_frequency",
    "attention_bag_of_words",
    "get_batch",
    "next_word_loss",
    "perplexity",
    "train_lm",
]

POOLINGS = ("none", "mean", "recency", "idf", "attention", "position")
SCORES = ("dot", "feedforward")
EMBED_INIT_STD = 0.1


@dataclass
class BowConfig:
    vocab_size: int  # n_vocab
    d_emb: int = 64  # width of the word embeddings
    n_ctx: int = 12  # earlier words in the bag (before the previous word)
    pooling: str = "attention"  # "none" (bigram), "mean", "recency", "idf", "attention",
    #                             "position"
    score: str = "dot"  # "dot" or "feedforward" (for pooling="attention")
    positions: bool = False  # add a learned vector per window slot to the keys before scoring
    d_a: int = 32  # width of the feed-forward scorer's hidden layer
    decay: float = 0.5  # pooling="recency": a word's weight over that of the next nearer one
    pad_id: int = PAD_ID  # id of <pad>, never attended to

    def __post_init__(self):
        require_choice(self.pooling, "pooling", POOLINGS)
        require_choice(self.score, "score", SCORES)
        for name in ("vocab_size", "d_emb", "n_ctx", "d_a"):
            require_int(getattr(self, name), name)
        require_bool(self.positions, "positions")
        require_number_in(self.decay, "decay", 0.0, 1.0, "a weight ratio")  # 1: the mean bag
        require_int(self.pad_id, "pad_id", low=0)
        if self.positions and self.pooling != "attention":
            raise ValueError(f"positions=True adds position vectors to attention keys; it needs "
                             f"pooling='attention', got pooling={self.pooling!r}")


# --------------------------------------------------------------------------- the window


def weights_by_position(alpha: torch.Tensor) -> torch.Tensor:
    """Window weights laid out by absolute position: the (T, T) matrix a heatmap shows.

        weights[b, t, s] = alpha[b, t, j]  with s = t - n_ctx + j   (0 <= s < t)

    alpha: (B, T, n_ctx), the attention of position t over its window (as `BagOfWordsLM`
    returns it; slot j = n_ctx - 1 is the word just before t).  Returns weights: (B, T, T),
    row t = the prediction after word t, column s = the earlier word at position s; zero
    outside the window (s >= t, or s < t - n_ctx). Slots before the start of the sequence
    are padding, which attention gives zero weight; a nonzero weight there raises a
    ValueError.
    """
    require_float_tensor(alpha, "alpha", "(B, T, n_ctx)", ndim=3)
    B, T, n_ctx = alpha.shape
    t = torch.arange(T).unsqueeze(1)  # (T, 1)
    j = torch.arange(n_ctx).unsqueeze(0)  # (1, n_ctx)
    before_start = (t - n_ctx + j < 0).expand(B, T, n_ctx)  # slot j of t is padding
    if bool((alpha[before_start] != 0).any()):
        raise ValueError("alpha gives weight to window slots before the start of the sequence "
                         "(padding, position t - n_ctx + j < 0); expected zero weight there, "
                         "as the masked softmax of BagOfWordsLM gives")
    # Column t + j of a (T, n_ctx + T) row is position t - n_ctx + j; the first n_ctx
    # columns are padding.
    columns = (t + j).expand(B, T, n_ctx)  # (B, T, n_ctx)
    padded = alpha.new_zeros(B, T, n_ctx + T).scatter_(2, columns, alpha)  # (B, T, n_ctx + T)
    return padded[:, :, n_ctx:]  # (B, T, T)


# --------------------------------------------------------------------------- scores


def dot_scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Dot-product scores of the earlier words against the previous word.

        e_k = E(w_k) . E(w_{i-1})          (symmetric: swapping the two words changes nothing)

    query: (..., d_emb) = E(w_{i-1});  keys: (..., n_ctx, d_emb) = E(w_k) for the n_ctx
    earlier words.  Returns e: (..., n_ctx).
    """
    require_query_and_keys(query, keys)
    return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (..., n_ctx, d_emb) @ (..., d_emb, 1)


def feedforward_scores(query: torch.Tensor, keys: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor, w_a: torch.Tensor) -> torch.Tensor:
    """Feed-forward (additive) scores of the earlier words against the previous word.

        e_k = w_a . tanh(W_a [E(w_k); E(w_{i-1})] + b_a)

    The earlier word comes first in the concatenation. W_a acts differently on the two
    halves, so e(a, b) != e(b, a) in general: unlike the dot product, the score is not
    symmetric. Splitting W_a = [W_k | W_q] computes the same thing without building the
    concatenation for every pair: W_a [k; q] = W_k k + W_q q.

    query: (..., d_emb);  keys: (..., n_ctx, d_emb);  weight W_a: (d_a, 2 d_emb);
    bias b_a: (d_a,);  w_a: (d_a,).  Returns e: (..., n_ctx).
    """
    require_query_and_keys(query, keys)
    d_emb = query.shape[-1]
    require_float_tensor(weight, "weight", f"(d_a, {2 * d_emb})", ndim=2)
    d_a = weight.shape[0]
    if weight.shape[1] != 2 * d_emb:
        raise ValueError(f"weight acts on [E(w_k); E(w_(i-1))] of width 2 d_emb = {2 * d_emb}: "
                         f"expected shape (d_a, {2 * d_emb}); got {shape_str(weight.shape)}")
    require_float_tensor(bias, "bias", f"({d_a},)", ndim=1)
    require_float_tensor(w_a, "w_a", f"({d_a},)", ndim=1)
    if bias.shape[0] != d_a or w_a.shape[0] != d_a:
        raise ValueError(f"bias and w_a must have shape ({d_a},) to match weight "
                         f"{shape_str(weight.shape)}; got bias {shape_str(bias.shape)}, "
                         f"w_a {shape_str(w_a.shape)}")
    w_k, w_q = weight[:, :d_emb], weight[:, d_emb:]  # (d_a, 2 d_emb) -> 2 x (d_a, d_emb)
    # Bahdanau's additive score with one query per window: unit 04's additive_scores
    e = additive_scores(query.unsqueeze(-2), keys, w_q, w_k, w_a, bias)  # (..., 1, n_ctx)
    return e.squeeze(-2)  # (..., n_ctx)


# --------------------------------------------------------------------------- bags of words


def mean_bag_of_words(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The plain mean of the earlier words' embeddings; padding is left out.

        A = (1 / n) sum_{k in window, mask_k} E(w_k),   n = number of real words (A = 0 if none)

    values: (..., n_ctx, d_emb);  mask: (..., n_ctx) bool, True = a real word.
    Returns A: (..., d_emb).
    """
    require_float_tensor(values, "values", "(..., n_ctx, d_emb)", min_ndim=2)
    require_mask(mask, "mask", values.shape[:-1], meaning="True = a real word")
    weights = mask.to(values.dtype)  # (..., n_ctx), 1 for a real word
    count = weights.sum(-1, keepdim=True).clamp_min(1.0)  # (..., 1)
    return (weights.unsqueeze(-1) * values).sum(-2) / count  # (..., d_emb)


def weighted_bag_of_words(weights: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """A mean of the earlier words' embeddings with hand-set, non-negative weights.

        alpha_k = weight_k / sum_{k': mask_k'} weight_k'  for mask_k (0 for padding),
        A = sum_k alpha_k E(w_k)

    Equal weights give the mean bag; weights by position or by word give the recency and
    idf bags. weights: (..., n_ctx) >= 0, broadcastable to the mask;  values: (..., n_ctx,
    d_emb);  mask: (..., n_ctx) bool, True = a real word.  Returns (A (..., d_emb), alpha
    (..., n_ctx)); alpha is all zero (and A the zero vector) where the real words of a window
    weigh nothing in all.
    """
    require_float_tensor(weights, "weights", "(..., n_ctx)")
    require_float_tensor(values, "values", "(..., n_ctx, d_emb)", min_ndim=2)
    require_mask(mask, "mask", values.shape[:-1], meaning="True = a real word")
    if not bool((weights >= 0).all()):  # also False for NaN
        raise ValueError("weights must be non-negative numbers (a word's share before "
                         "normalising); got a negative or NaN weight")
    kept = weights * mask  # (..., n_ctx), 0 on padding
    alpha = kept / kept.sum(-1, keepdim=True).clamp_min(torch.finfo(kept.dtype).tiny)
    bag = (alpha.unsqueeze(-1) * values).sum(-2)  # (..., n_ctx, 1) * (..., n_ctx, d_emb)
    return bag, alpha  # (..., d_emb), (..., n_ctx)


def inverse_document_frequency(ids: torch.Tensor, vocab_size: int, ends: Sequence[int]
                               ) -> torch.Tensor:
    """How rare each word is across the documents of a text: idf(w) = log(n_docs / df(w)).

    The text ids (N,) is cut into documents after every token whose id is in `ends` (unit 01
    cuts it into sentences, after . ? !; a last document without an end counts too). df(w)
    is the number of documents that hold w at least once; a word that never occurs counts
    as if it were in one (the rarest possible). A word in every document gets 0.
    Returns idf: (vocab_size,) float32.
    """
    require_ids(ids, "ids (the whole text)", "(N,)", 1)
    require_int(vocab_size, "vocab_size")
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        found = f"from {int(ids.min())} to {int(ids.max())}" if ids.numel() else "no ids"
        raise ValueError(f"ids must be a non-empty text of ids in [0, {vocab_size - 1}] (the "
                         f"vocabulary); got {found}")
    ends = torch.as_tensor(list(ends), dtype=torch.long)  # (n_ends,)
    if ends.numel() == 0:
        raise ValueError("ends must name at least one token id that closes a document (unit 01: "
                         "vocab.encode(['.', '?', '!']))")
    is_end = torch.isin(ids, ends)  # (N,)
    document = torch.cumsum(is_end.long(), 0) - is_end.long()  # (N,), an end closes its own
    n_docs = int(document[-1]) + 1
    pairs = torch.unique(document * vocab_size + ids)  # each (document, word) once
    df = torch.bincount(pairs % vocab_size, minlength=vocab_size).clamp_min(1)  # (vocab_size,)
    return torch.log(n_docs / df.double()).float()  # (vocab_size,)


def attention_bag_of_words(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention-weighted mean of the earlier words' embeddings.

        alpha_k = exp(e_k) / sum_{l: mask_l} exp(e_l)  for mask_k (0 for padding),
        A = sum_k alpha_k E(w_k)

    scores: (..., n_ctx);  values: (..., n_ctx, d_emb);  mask: (..., n_ctx) bool, True = a
    real word.  Returns (A (..., d_emb), alpha (..., n_ctx)). alpha sums to 1 over the real
    words, or is all zero (and A the zero vector) when the window holds none.
    """
    require_float_tensor(scores, "scores", "(..., n_ctx)")
    require_float_tensor(values, "values", "(..., n_ctx, d_emb)", min_ndim=2)
    require_mask(mask, "mask", values.shape[:-1], meaning="True = a real word")
    if scores.shape != values.shape[:-1]:
        raise ValueError(f"scores must have shape {shape_str(values.shape[:-1])}, one per "
                         f"earlier word of values {shape_str(values.shape)}; got "
                         f"{shape_str(scores.shape)}")
    alpha = masked_softmax(scores.unsqueeze(-2), mask.unsqueeze(-2)).squeeze(-2)  # (..., n_ctx)
    bag = (alpha.unsqueeze(-1) * values).sum(-2)  # (..., n_ctx, 1) * (..., n_ctx, d_emb)
    return bag, alpha  # (..., d_emb), (..., n_ctx)


# --------------------------------------------------------------------------- the model


class BagOfWordsLM(nn.Module):
    """Bigram, bigram + mean bag of words, + a bag with hand-set weights (by recency or by
    idf), + attention bag of words, or the position-only control (see the module docstring).
    forward(ids (B, T)) -> (logits (B, T, n_vocab), alpha (B, T, n_ctx) or None): the logits at
    position t predict the word after ids[:, t]; alpha is None for the bigram and the mean bag.

    word_weights (n_vocab,), non-negative: each word's weight in the "idf" bag (required there,
    refused for the other poolings); kept in the state dict as the buffer `word_weight`."""

    def __init__(self, config: BowConfig, word_weights: torch.Tensor | None = None):
        super().__init__()
        self.config = config
        if (word_weights is None) == (config.pooling == "idf"):
            raise ValueError(f"word_weights (n_vocab,) are the weights of pooling='idf' and only "
                             f"of it (e.g. bow.inverse_document_frequency(...)); got pooling="
                             f"{config.pooling!r} and word_weights "
                             f"{'None' if word_weights is None else 'given'}")
        if word_weights is not None:
            require_float_tensor(word_weights, "word_weights", f"({config.vocab_size},)", ndim=1)
            if word_weights.shape[0] != config.vocab_size or not bool((word_weights >= 0).all()):
                raise ValueError(f"word_weights must be {config.vocab_size} non-negative "
                                 f"weights, one per word of the vocabulary; got shape "
                                 f"{shape_str(word_weights.shape)}")
            self.register_buffer("word_weight", word_weights.detach().float().clone())
        d_emb, d_a, n_vocab = config.d_emb, config.d_a, config.vocab_size
        self.embed = nn.Embedding(n_vocab, d_emb)  # E
        if config.pooling == "attention" and config.score == "feedforward":
            self.score_hidden = nn.Linear(2 * d_emb, d_a)  # W_a (d_a, 2 d_emb) and b_a (d_a,)
            self.score_w_a = nn.Parameter(torch.randn(d_a) / math.sqrt(d_a))  # w_a (d_a,)
        if config.positions:
            self.key_position = nn.Parameter(torch.zeros(config.n_ctx, d_emb))  # P
        if config.pooling == "position":
            self.slot_score = nn.Parameter(torch.zeros(config.n_ctx))  # p (n_ctx,)
        width = d_emb if config.pooling == "none" else 2 * d_emb
        self.out = nn.Linear(width, n_vocab)  # W_o (n_vocab, 2 d_emb) and b_o (n_vocab,)
        # Small embeddings: every dot-product score starts near 0, so attention starts as the
        # plain mean of the window and learns to move away from it.
        nn.init.normal_(self.embed.weight, std=EMBED_INIT_STD)

    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """e (B, T, n_ctx) for query (B, T, d_emb) and keys (B, T, n_ctx, d_emb)."""
        if self.config.score == "dot":
            return dot_scores(query, keys)
        return feedforward_scores(query, keys, self.score_hidden.weight, self.score_hidden.bias,
                                  self.score_w_a)

    def hand_set_weights(self, context: torch.Tensor) -> torch.Tensor:
        """The recency or idf bag's weights (B, T, n_ctx) for the window ids `context`, before
        normalising: decay^(distance - 1), distance 1 for the last slot; or idf(w_k)."""
        if self.config.pooling == "idf":
            return self.word_weight[context]  # (B, T, n_ctx)
        n_ctx = self.config.n_ctx
        distance = torch.arange(n_ctx, 0, -1, dtype=torch.float32)  # (n_ctx,): n_ctx .. 1
        return (self.config.decay ** (distance - 1)).expand(context.shape)  # (B, T, n_ctx)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        require_ids(ids, "ids", "(B, T)", 2)
        config = self.config
        if int(ids.min()) < 0 or int(ids.max()) >= config.vocab_size:
            raise ValueError(f"ids must be in [0, {config.vocab_size - 1}] (the vocabulary); "
                             f"got values from {int(ids.min())} to {int(ids.max())}")
        prev = self.embed(ids)  # E(w_{i-1}): (B, T) -> (B, T, d_emb)
        if config.pooling == "none":
            return self.out(prev), None  # (B, T, d_emb) -> (B, T, n_vocab)
        context, mask = context_windows(ids, config.n_ctx, config.pad_id)  # 2 x (B, T, n_ctx)
        keys = self.embed(context)  # E(w_k): (B, T, n_ctx) -> (B, T, n_ctx, d_emb)
        if config.pooling == "mean":
            bag, alpha = mean_bag_of_words(keys, mask), None  # (B, T, d_emb)
        elif config.pooling in ("recency", "idf"):
            bag, alpha = weighted_bag_of_words(self.hand_set_weights(context), keys, mask)
        elif config.pooling == "position":
            scores = self.slot_score.expand(mask.shape)  # (n_ctx,) -> (B, T, n_ctx)
            bag, alpha = attention_bag_of_words(scores, keys, mask)  # (B, T, d_emb), (B, T, n_ctx)
        else:
            scored = keys + self.key_position if config.positions else keys  # (B, T, n_ctx, d_emb)
            bag, alpha = attention_bag_of_words(self.scores(prev, scored), keys, mask)
            # bag (B, T, d_emb), alpha (B, T, n_ctx)
        features = torch.cat([prev, bag], dim=-1)  # [E(w_{i-1}); A]: (B, T, 2 d_emb)
        return self.out(features), alpha  # (B, T, 2 d_emb) -> (B, T, n_vocab)


# --------------------------------------------------------------------------- training


def get_batch(ids: torch.Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of stretches of the text: inputs x (B, T) and next words y (B, T).

    ids: (N,) int64, the whole text; T = seq_len.  y[b, t] = the word after x[b, t].
    """
    require_ids(ids, "ids (the whole text)", "(N,)", 1)
    require_int(batch_size, "batch_size")
    require_int(seq_len, "seq_len")
    if ids.numel() < seq_len + 1:
        raise ValueError(f"the text has {ids.numel()} tokens; need at least seq_len + 1 = "
                         f"{seq_len + 1}")
    starts = torch.randint(0, ids.numel() - seq_len, (batch_size,), generator=generator)  # (B,)
    offsets = starts.unsqueeze(1) + torch.arange(seq_len + 1)  # (B, 1) + (T+1,) -> (B, T+1)
    chunk = ids[offsets]  # (B, T+1)
    return chunk[:, :-1], chunk[:, 1:]  # (B, T), (B, T)


@torch.no_grad()
def perplexity(model: nn.Module, ids: torch.Tensor, seq_len: int = 64,
               batch_size: int = 64) -> float:
    """exp(mean negative log-likelihood per predicted word) over a whole text.

    The text ids (N,) is cut into consecutive stretches of seq_len + 1 tokens (the last
    stretch may be shorter); each stretch starts with an empty window, the same for every
    model, so perplexities of different models are comparable.
    """
    require_ids(ids, "ids (the whole text)", "(N,)", 1)
    if ids.numel() < 2:
        raise ValueError(f"ids must be a text of at least two tokens; got {ids.numel()}")
    require_int(seq_len, "seq_len")
    require_int(batch_size, "batch_size")
    with eval_mode(model):
        total_nll, total_count = 0.0, 0
        starts = list(range(0, ids.numel() - 1, seq_len))  # stretch s predicts ids[s+1 .. s+T]
        full = [s for s in starts if s + seq_len + 1 <= ids.numel()]
        for i in range(0, len(full), batch_size):
            offsets = torch.tensor(full[i:i + batch_size]).unsqueeze(1) \
                + torch.arange(seq_len + 1)  # (B, T+1)
            chunk = ids[offsets]  # (B, T+1)
            logits, _ = model(chunk[:, :-1])  # (B, T, n_vocab)
            nll = F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(),
                                  reduction="sum")
            total_nll += float(nll)
            total_count += chunk[:, 1:].numel()
        for s in starts[len(full):]:  # the shorter last stretch, if any
            chunk = ids[s:].unsqueeze(0)  # (1, T'+1)
            logits, _ = model(chunk[:, :-1])  # (1, T', n_vocab)
            total_nll += float(F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum"))
            total_count += chunk.shape[1] - 1
    return math.exp(total_nll / total_count)


def next_word_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The mean next-word cross-entropy of `model` on a batch (x (B, T), y (B, T))."""
    x, y = batch
    logits, _ = model(x)  # (B, T, n_vocab)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())  # (B*T, n_vocab) vs (B*T,)


def train_lm(model: nn.Module, train_ids: torch.Tensor, *, n_steps: int = 300,
             batch_size: int = 32, seq_len: int = 64, lr: float = 1e-2,
             generator: torch.Generator | None = None, heldout_ids: torch.Tensor | None = None,
             eval_every: int = 0, progress: bool = True, desc: str = "training") -> History:
    """Train with Adam on random stretches of the text (next-word cross-entropy): `training.fit`
    on batches drawn by `get_batch` with `generator`.

    With `heldout_ids`, the held-out perplexity is measured every `eval_every` steps (0 =
    only at the end) and at the end, as the metric "perplexity". Returns the History
    (`.loss` every step; `.eval_step` and `.metrics["perplexity"]`). A seeded generator and
    a seeded model initialisation give the same run every time.
    """
    require_ids(train_ids, "train_ids (the training text)", "(N,)", 1)
    n_steps = require_int(n_steps, "n_steps")
    eval_every = require_int(eval_every, "eval_every", low=0)
    if eval_every and heldout_ids is None:
        raise ValueError(f"eval_every = {eval_every} needs heldout_ids, the text to measure "
                         f"perplexity on")
    batches = (get_batch(train_ids, batch_size, seq_len, generator) for _ in range(n_steps))
    evaluate = None
    if heldout_ids is not None:
        require_ids(heldout_ids, "heldout_ids (the held-out text)", "(N,)", 1)

        def evaluate(model):
            return {"perplexity": perplexity(model, heldout_ids, seq_len)}
    return fit(model, next_word_loss, batches, n_steps=n_steps, lr=lr, evaluate=evaluate,
               eval_every=eval_every, progress=progress, desc=desc)
