"""Unit 01: a language model that reads the previous word and a bag of the words before it.

The next word w_i is predicted from the previous word w_{i-1} and a summary A of the W words
before that, w_{i-1-W} .. w_{i-2} (the "context window"):

    p(w_i | w_1 .. w_{i-1}) = softmax(C [E(w_{i-1}); A] + c)

    E      the word embeddings, (V, D)
    C, c   the output layer, (V, 2D) and (V,)
    A      "none":      nothing; the model is a bigram model, softmax(C E(w_{i-1}) + c)
           "mean":      the mean of E(w_k) over the window, every earlier word counting the same
           "attention": sum_k alpha_k E(w_k) with alpha = softmax_k(e_k) over the window, and the
                        score e_k of the earlier word w_k against the previous word w_{i-1}:
                 "dot":          e_k = E(w_k) . E(w_{i-1})
                 "feedforward":  e_k = v . tanh(W [E(w_k); E(w_{i-1})] + b)
           "position":  a control: sum_k alpha_k E(w_k) with alpha = softmax(p), one learned
                        score p_j per slot of the window, the same whatever the words are

Content alone cannot tell the word just before w_{i-1} from one ten words back. With
`positions=True` the attention scores see where each earlier word sits: a learned vector
P_j is added to the key of slot j before scoring, e_k = score(E(w_k) + P_j, E(w_{i-1}));
the bag still averages the words' own embeddings E(w_k). (Unit 05 returns to positions.)

Shapes: B batch, T positions, W words in the window, D embedding width, H hidden width of the
feed-forward scorer, V vocabulary. Position t of an input `ids (B, T)` holds w_{i-1}; its
window holds ids[:, t-W .. t-1]. Near the start of a sequence the window reaches before the
first word: those slots are padding and are masked (True = may attend), so they get zero
weight; at t = 0 the window is empty and A is the zero vector.

Read top to bottom: the window, the two score functions, the two bags of words, the model,
then training and perplexity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from course_utils._checks import require_float_tensor, shape_str
from course_utils.attention import additive_scores, masked_softmax

__all__ = [
    "BowConfig",
    "BagOfWordsLM",
    "context_windows",
    "weights_by_position",
    "dot_scores",
    "feedforward_scores",
    "mean_bag_of_words",
    "attention_bag_of_words",
    "get_batch",
    "perplexity",
    "train_lm",
]

POOLINGS = ("none", "mean", "attention", "position")
SCORES = ("dot", "feedforward")
EMBED_INIT_STD = 0.1


@dataclass
class BowConfig:
    vocab_size: int  # V
    d_model: int = 64  # D, width of the word embeddings
    window: int = 12  # W, earlier words in the bag (before the previous word)
    pooling: str = "attention"  # "none" (bigram), "mean", "attention" or "position"
    score: str = "dot"  # "dot" or "feedforward" (for pooling="attention")
    positions: bool = False  # add a learned vector per window slot to the keys before scoring
    d_hidden: int = 32  # H, hidden width of the feed-forward scorer
    pad_id: int = 0  # id of <pad>, never attended to

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}; got {self.pooling!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}; got {self.score!r}")
        for name in ("vocab_size", "d_model", "window", "d_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        if self.positions and self.pooling != "attention":
            raise ValueError(f"positions=True adds position vectors to attention keys; it needs "
                             f"pooling='attention', got pooling={self.pooling!r}")


# --------------------------------------------------------------------------- the window


def _check_ids(ids) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 2:
        got = (f"shape {shape_str(ids.shape)}, dtype {ids.dtype}"
               if isinstance(ids, torch.Tensor) else type(ids).__name__)
        raise ValueError(f"ids must be an int64 tensor of shape (B, T); got {got}")
    return ids


def context_windows(ids: torch.Tensor, window: int, pad_id: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The `window` words before each position, and which of them are real words.

        context[b, t, j] = ids[b, t - window + j]   (pad_id where t - window + j < 0)
        mask[b, t, j]    = that slot holds a word of the sequence (not padding)

    ids: (B, T) int64  ->  context (B, T, W) int64, mask (B, T, W) bool.
    The last slot j = W-1 is the word just before position t; the window never includes t.
    """
    _check_ids(ids)
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int; got {window!r}")
    B, T = ids.shape
    padded = F.pad(ids, (window, 0), value=pad_id)  # (B, T) -> (B, W + T)
    context = padded.unfold(1, window, 1)[:, :T]  # (B, T + 1, W) -> (B, T, W)
    t = torch.arange(T).unsqueeze(1)  # (T, 1)
    j = torch.arange(window).unsqueeze(0)  # (1, W)
    inside = (t - window + j >= 0)  # (T, W): slot j of position t is after the start
    mask = inside.unsqueeze(0) & (context != pad_id)  # (1, T, W) & (B, T, W) -> (B, T, W)
    return context, mask


def weights_by_position(alpha: torch.Tensor) -> torch.Tensor:
    """Window weights laid out by absolute position: the (T, T) matrix a heatmap shows.

        weights[b, t, s] = alpha[b, t, j]  with s = t - W + j   (0 <= s < t)

    alpha: (B, T, W), the attention of position t over its window (as `BagOfWordsLM`
    returns it; slot j = W-1 is the word just before t).  Returns weights: (B, T, T), row t
    = the prediction after word t, column s = the earlier word at position s; zero outside
    the window (s >= t, or s < t - W). Slots before the start of the sequence are padding,
    which attention gives zero weight; a nonzero weight there raises a ValueError.
    """
    require_float_tensor(alpha, "alpha", "(B, T, W)", ndim=3)
    B, T, W = alpha.shape
    t = torch.arange(T).unsqueeze(1)  # (T, 1)
    j = torch.arange(W).unsqueeze(0)  # (1, W)
    before_start = (t - W + j < 0).expand(B, T, W)  # (B, T, W): slot j of t is padding
    if bool((alpha[before_start] != 0).any()):
        raise ValueError("alpha gives weight to window slots before the start of the sequence "
                         "(padding, position t - W + j < 0); expected zero weight there, as "
                         "the masked softmax of BagOfWordsLM gives")
    # Column t + j of a (T, W + T) row is position t - W + j; the first W columns are padding.
    columns = (t + j).expand(B, T, W)  # (B, T, W)
    padded = alpha.new_zeros(B, T, W + T).scatter_(2, columns, alpha)  # (B, T, W + T)
    return padded[:, :, W:]  # (B, T, W + T) -> (B, T, T)


# --------------------------------------------------------------------------- scores


def _check_query_keys(query, keys) -> None:
    require_float_tensor(query, "query", "(..., D)")
    require_float_tensor(keys, "keys", "(..., W, D)", min_ndim=2)
    if keys.dim() != query.dim() + 1 or keys.shape[:-2] != query.shape[:-1] \
            or keys.shape[-1] != query.shape[-1]:
        expected = "(" + ", ".join([*map(str, query.shape[:-1]), "W", str(query.shape[-1])]) + ")"
        raise ValueError(
            f"keys must hold W vectors for every query: query {shape_str(query.shape)} expects "
            f"keys of shape {expected}; got keys {shape_str(keys.shape)}"
        )


def dot_scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Dot-product scores of the earlier words against the previous word.

        e_k = E(w_k) . E(w_{i-1})          (symmetric: swapping the two words changes nothing)

    query: (..., D) = E(w_{i-1});  keys: (..., W, D) = E(w_k) for the W earlier words.
    Returns e: (..., W).
    """
    _check_query_keys(query, keys)
    return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (..., W, D) @ (..., D, 1) -> (..., W)


def feedforward_scores(query: torch.Tensor, keys: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Feed-forward (additive) scores of the earlier words against the previous word.

        e_k = v . tanh(W [E(w_k); E(w_{i-1})] + b)

    The earlier word comes first in the concatenation. W acts differently on the two halves,
    so e(a, b) != e(b, a) in general: unlike the dot product, the score is not symmetric.
    Splitting W = [W_key | W_query] computes the same thing without building the
    concatenation for every pair: W [k; q] = W_key k + W_query q.

    query: (..., D);  keys: (..., W, D);  weight W: (H, 2D);  bias b: (H,);  v: (H,).
    Returns e: (..., W).
    """
    _check_query_keys(query, keys)
    D = query.shape[-1]
    require_float_tensor(weight, "weight", f"(H, {2 * D})", ndim=2)
    H = weight.shape[0]
    if weight.shape[1] != 2 * D:
        raise ValueError(f"weight acts on [E(w_k); E(w_(i-1))] of width 2D = {2 * D}: expected "
                         f"shape (H, {2 * D}); got {shape_str(weight.shape)}")
    require_float_tensor(bias, "bias", f"({H},)", ndim=1)
    require_float_tensor(v, "v", f"({H},)", ndim=1)
    if bias.shape[0] != H or v.shape[0] != H:
        raise ValueError(f"bias and v must have shape ({H},) to match weight "
                         f"{shape_str(weight.shape)}; got bias {shape_str(bias.shape)}, "
                         f"v {shape_str(v.shape)}")
    w_key, w_query = weight[:, :D], weight[:, D:]  # (H, 2D) -> (H, D), (H, D)
    # Bahdanau's additive score with one query per window: unit 04's additive_scores
    e = additive_scores(query.unsqueeze(-2), keys, w_query, w_key, v, bias)  # (..., 1, W)
    return e.squeeze(-2)  # (..., W)


# --------------------------------------------------------------------------- bags of words


def _check_values_mask(values, mask, scores_shape=None) -> None:
    require_float_tensor(values, "values", "(..., W, D)", min_ndim=2)
    expected = shape_str(values.shape[:-1])
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor of shape {expected} (True = a real word); "
                         f"got {got}")
    if mask.shape != values.shape[:-1]:
        raise ValueError(f"mask must have shape {expected}, one entry per earlier word of "
                         f"values {shape_str(values.shape)}; got {shape_str(mask.shape)}")
    if scores_shape is not None and scores_shape != values.shape[:-1]:
        raise ValueError(f"scores must have shape {expected}, one per earlier word of values "
                         f"{shape_str(values.shape)}; got {shape_str(scores_shape)}")


def mean_bag_of_words(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The plain mean of the earlier words' embeddings; padding is left out.

        A = (1 / n) sum_{k in window, mask_k} E(w_k),   n = number of real words (A = 0 if none)

    values: (..., W, D);  mask: (..., W) bool, True = a real word.  Returns A: (..., D).
    """
    _check_values_mask(values, mask)
    weights = mask.to(values.dtype)  # (..., W), 1 for a real word
    count = weights.sum(-1, keepdim=True).clamp_min(1.0)  # (..., 1)
    return (weights.unsqueeze(-1) * values).sum(-2) / count  # (..., W, D) -> (..., D)


def attention_bag_of_words(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention-weighted mean of the earlier words' embeddings.

        alpha_k = exp(e_k) / sum_{l: mask_l} exp(e_l)  for mask_k (0 for padding),
        A = sum_k alpha_k E(w_k)

    scores: (..., W);  values: (..., W, D);  mask: (..., W) bool, True = a real word.
    Returns (A (..., D), alpha (..., W)). alpha sums to 1 over the real words, or is all zero
    (and A the zero vector) when the window holds none.
    """
    require_float_tensor(scores, "scores", "(..., W)")
    _check_values_mask(values, mask, scores.shape)
    alpha = masked_softmax(scores.unsqueeze(-2), mask.unsqueeze(-2)).squeeze(-2)  # (..., W)
    bag = (alpha.unsqueeze(-1) * values).sum(-2)  # (..., W, 1) * (..., W, D) -> (..., D)
    return bag, alpha


# --------------------------------------------------------------------------- the model


class BagOfWordsLM(nn.Module):
    """Bigram, bigram + mean bag of words, bigram + attention bag of words, or the
    position-only control (see the module docstring). forward(ids (B, T)) -> (logits
    (B, T, V), alpha (B, T, W) or None): the logits at position t predict the word after
    ids[:, t]."""

    def __init__(self, config: BowConfig):
        super().__init__()
        self.config = config
        D, H, V = config.d_model, config.d_hidden, config.vocab_size
        self.embed = nn.Embedding(V, D)  # E
        if config.pooling == "attention" and config.score == "feedforward":
            self.score_hidden = nn.Linear(2 * D, H)  # W (H, 2D) and b (H,)
            self.score_v = nn.Parameter(torch.randn(H) / math.sqrt(H))  # v (H,)
        if config.positions:
            self.key_position = nn.Parameter(torch.zeros(config.window, D))  # P (W, D)
        if config.pooling == "position":
            self.slot_score = nn.Parameter(torch.zeros(config.window))  # p (W,)
        width = D if config.pooling == "none" else 2 * D
        self.out = nn.Linear(width, V)  # C (V, 2D) and c (V,)
        # Small embeddings: every dot-product score starts near 0, so attention starts as the
        # plain mean of the window and learns to move away from it.
        nn.init.normal_(self.embed.weight, std=EMBED_INIT_STD)

    def scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """e (B, T, W) for query (B, T, D) and keys (B, T, W, D)."""
        if self.config.score == "dot":
            return dot_scores(query, keys)
        return feedforward_scores(query, keys, self.score_hidden.weight, self.score_hidden.bias,
                                  self.score_v)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        _check_ids(ids)
        cfg = self.config
        if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size:
            raise ValueError(f"ids must be in [0, {cfg.vocab_size - 1}] (the vocabulary); "
                             f"got values from {int(ids.min())} to {int(ids.max())}")
        prev = self.embed(ids)  # E(w_{i-1}): (B, T) -> (B, T, D)
        if cfg.pooling == "none":
            return self.out(prev), None  # (B, T, D) -> (B, T, V)
        context, mask = context_windows(ids, cfg.window, cfg.pad_id)  # (B, T, W), (B, T, W)
        keys = self.embed(context)  # E(w_k): (B, T, W) -> (B, T, W, D)
        if cfg.pooling == "mean":
            bag, alpha = mean_bag_of_words(keys, mask), None  # (B, T, D)
        elif cfg.pooling == "position":
            scores = self.slot_score.expand(mask.shape)  # (W,) -> (B, T, W)
            bag, alpha = attention_bag_of_words(scores, keys, mask)  # (B, T, D), (B, T, W)
        else:
            scored = keys + self.key_position if cfg.positions else keys  # (B, T, W, D)
            bag, alpha = attention_bag_of_words(self.scores(prev, scored), keys, mask)
            # bag (B, T, D), alpha (B, T, W)
        features = torch.cat([prev, bag], dim=-1)  # [E(w_{i-1}); A]: (B, T, 2D)
        return self.out(features), alpha  # (B, T, 2D) -> (B, T, V)


# --------------------------------------------------------------------------- training


def get_batch(ids: torch.Tensor, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch of stretches of the text: inputs x (B, T) and next words y (B, T).

    ids: (N,) int64, the whole text.  y[b, t] = the word after x[b, t].
    """
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype != torch.long:
        raise ValueError("ids must be the whole text as an int64 tensor of shape (N,)")
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
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.numel() < 2:
        raise ValueError("ids must be a text of at least two tokens, an int64 tensor (N,)")
    was_training = model.training
    model.eval()
    total_nll, total_count = 0.0, 0
    starts = list(range(0, ids.numel() - 1, seq_len))  # stretch s predicts ids[s+1 .. s+T]
    full = [s for s in starts if s + seq_len + 1 <= ids.numel()]
    for i in range(0, len(full), batch_size):
        offsets = torch.tensor(full[i:i + batch_size]).unsqueeze(1) + torch.arange(seq_len + 1)
        chunk = ids[offsets]  # (B, T+1)
        logits, _ = model(chunk[:, :-1])  # (B, T, V)
        nll = F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum")
        total_nll += float(nll)
        total_count += chunk[:, 1:].numel()
    for s in starts[len(full):]:  # the shorter last stretch, if any
        chunk = ids[s:].unsqueeze(0)  # (1, T'+1)
        logits, _ = model(chunk[:, :-1])  # (1, T', V)
        total_nll += float(F.cross_entropy(logits[0], chunk[0, 1:], reduction="sum"))
        total_count += chunk.shape[1] - 1
    model.train(was_training)
    return math.exp(total_nll / total_count)


def train_lm(model: nn.Module, train_ids: torch.Tensor, *, steps: int = 300,
             batch_size: int = 32, seq_len: int = 64, lr: float = 1e-2,
             generator: torch.Generator | None = None, heldout_ids: torch.Tensor | None = None,
             eval_every: int = 0, progress: bool = True, desc: str = "training") -> dict:
    """Train with Adam on random stretches of the text (next-word cross-entropy).

    Returns the history: {"train_loss": [loss per step], "eval_step": [...],
    "heldout_ppl": [...]} (held-out perplexity every `eval_every` steps and at the end, when
    `heldout_ids` is given). `generator` draws the batches, so a seeded generator (and a
    seeded model initialisation) gives the same run every time.
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: dict[str, list] = {"train_loss": [], "eval_step": [], "heldout_ppl": []}
    model.train()
    for step in tqdm(range(1, steps + 1), desc=desc, disable=not progress, mininterval=1.0):
        x, y = get_batch(train_ids, batch_size, seq_len, generator)  # (B, T), (B, T)
        logits, _ = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())  # (B*T, V) vs (B*T,)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history["train_loss"].append(loss.item())
        if heldout_ids is not None and (step == steps or (eval_every and step % eval_every == 0)):
            history["eval_step"].append(step)
            history["heldout_ppl"].append(perplexity(model, heldout_ids, seq_len))
    model.eval()
    return history
