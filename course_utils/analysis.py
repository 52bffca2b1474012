"""Unit 08: what do BERT's attention heads look at? Measurements on attention maps.

Notation (README's table): L layers of n_heads heads, B sentences, T tokens, d_k = d_model /
n_heads; a^(l, r), the map of head r of layer l, is one (T, T) slice of the (B, n_heads, T, T)
maps of layer l (rows = queries, summing to 1 over the keys); "real" tokens are
those of `attention_mask` (B, T) bool, True = real, False = padding.

Attention to chosen tokens (Clark et al., 2019, "What does BERT look at?"), for each layer
and head, the mean over the real queries i of every sentence b of the batch:

    to_tokens[l, r] = mean_{b, i real} sum_{j real, ids[b, j] in token_ids} a^(l, r)_bij

Pattern types (Kovaleva et al., 2019, "Revealing the dark secrets of BERT"): vertical
(stripes on [CLS]/[SEP]), diagonal (the previous/next token), vertical+diagonal, block
(within one's own segment) and heterogeneous. Here a threshold rule on three masses, each a
mean over the n_content "content" rows i (the tokens that are not special):

    special  = 1/n_content sum_i sum_{j special} a_ij
    diagonal = 1/n_content sum_i sum_{j not special, |i - j| <= 1} a_ij
    block    = 1/n_seg sum_g 1/n_g sum_{i in g} sum_{j not special, seg_j = g} a_ij
               (n_seg segments g with content tokens, n_g of them in g; 0 when n_seg < 2)

    special + diagonal >= STRUCTURED (0.6):  vertical           if diagonal < MINOR (0.2)
                                             diagonal           if special  < MINOR
                                             vertical+diagonal  otherwise
    else block >= BLOCK (0.7):               block
    else                                     heterogeneous

A uniform row over two segments gives block = 1/2 (each segment counts once, whatever its
length), so BLOCK sits well above chance. On short sentences the masses are large by chance
(a uniform row over [CLS] a b c d [SEP] puts 1/3 on the specials and about 0.4 on the band),
so the thresholds suit sentences of 10 tokens or more, and a block of segments of 4 words
reads as diagonal. A random map whose rows each pick one key is misread about 1-2% of the time
over 14-16 tokens (the specials and the band are a third of the keys), hardly ever over 22.

Norm-based attention (Kobayashi et al., 2020, "Attention is not only a weight"): with
f_r(x) = (x W^V_r + b^V_r) W^O_r, head r's value mapped by its d_k rows of W^O (columns
r d_k .. (r + 1) d_k - 1 of `w_o.weight`, which is (out, in)), the multi-head attention's
output at position i is

    MultiHead(X)_i = sum_r sum_j a^r_ij f_r(x_j) + b^O,   ||a^r_ij f_r(x_j)|| = a^r_ij ||f_r(x_j)||

so a large weight on a key whose transformed value is short moves that output little.

Syntax (Clark et al., 2019): for a (query word, target word) pair, named query -> target and
each direction reported on its own (the paper scores every head both ways, the word a dependent
attends to most and the word attending most to the dependent, and keeps the better per
relation), the attention from the query's first piece to word w is the sum over w's pieces; the
head "gets it right" when the word with most attention (special tokens and the query itself
excluded, ties to the lower word index) is the target (any of them, when pairs share a query
word). Baselines: a fixed offset (target = query + offset, the best one reported; Clark et al.
try -3 .. +2), and the adjacent word (the next one; the previous one for the last word of the
sentence). The best of the L n_heads heads is picked on one set of sentences and reported on
another (`choose_and_report`), and the offset likewise (`held_out_offset`).

Switching heads off (Michel et al., 2019, "Are sixteen heads really better than one?"):
`heads_off_mask` builds the (L, n_heads) head_mask of `course_utils.bert.Bert` (1 keeps a
head, 0 switches it off) and `each_head_off` scores a model with each head off in turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch

from course_utils._checks import (
    require_finite,
    require_float_tensor,
    require_ids,
    require_int,
    require_mask,
    shape_str,
)
from course_utils.multihead import MultiHeadAttention, split_heads

__all__ = ["PATTERN_TYPES", "attention_to_tokens", "best_offset_baseline", "choose_and_report",
           "classify_pattern", "each_head_off", "head_pattern_types", "heads_off_mask",
           "held_out_offset", "n_queries", "nearest_word_baseline", "norm_weighted_attention",
           "offset_baseline", "pattern_features", "pattern_shares", "relation_accuracy",
           "value_norms", "value_vectors"]

PATTERN_TYPES = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
STRUCTURED = 0.6  # special + diagonal at least this: a vertical and/or diagonal map
MINOR = 0.2       # below this, the special (or diagonal) part does not count
BLOCK = 0.7       # own-segment mass at least this (chance with two segments: 0.5)


# ----------------------------------------------------------------------------- checks

def _stack_attentions(attentions) -> torch.Tensor:
    """A sequence of L maps (B, n_heads, T, T), or one map, -> one (L, B, n_heads, T, T) tensor."""
    if isinstance(attentions, torch.Tensor):
        attentions = [attentions]
    if not isinstance(attentions, Sequence) or not len(attentions):
        raise ValueError("attentions must be a tuple or list of L tensors (B, n_heads, T, T) "
                         "(a model's output.attentions), or one such tensor; got "
                         f"{type(attentions).__name__}"
                         f"{' of length 0' if isinstance(attentions, Sequence) else ''}")
    first = attentions[0]
    require_float_tensor(first, "attentions[0]", "(B, n_heads, T, T)", ndim=4)
    B, n_heads, T = first.shape[:3]
    for i, a in enumerate(attentions):
        name = f"attentions[{i}]"
        require_float_tensor(a, name, "(B, n_heads, T, T)", ndim=4)
        if a.shape != (B, n_heads, T, T):
            raise ValueError(f"{name} must have shape (B, n_heads, T, T) = ({B}, {n_heads}, "
                             f"{T}, {T}) (that of attentions[0]); got {shape_str(a.shape)}")
        require_finite(a, name)
    return torch.stack(list(attentions)).double()  # (L, B, n_heads, T, T)


def _real_tokens(attention_mask, B: int, T: int) -> torch.Tensor:
    """(B, T) bool, True at real tokens; every token when no mask is given."""
    if attention_mask is None:
        return torch.ones(B, T, dtype=torch.bool)
    require_mask(attention_mask, "attention_mask", (B, T), "True = real token, False = padding")
    if not attention_mask.any(dim=1).all():
        empty = (~attention_mask.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(f"attention_mask has no real token in sentence(s) {empty}")
    return attention_mask


def _require_ids_like(ids, name: str, B: int, T: int) -> torch.Tensor:
    require_ids(ids, name, f"(B, T) = ({B}, {T})", 2)
    if ids.shape != (B, T):
        raise ValueError(f"{name} must have shape (B, T) = ({B}, {T}), one per token of the "
                         f"attention maps; got {shape_str(ids.shape)}")
    return ids


def _id_set(token_ids, name: str) -> torch.Tensor:
    """An int, or a non-empty collection of ints, -> a 1-d int64 tensor."""
    if isinstance(token_ids, int | np.integer) and not isinstance(token_ids, bool):
        token_ids = [token_ids]
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.flatten().tolist()
    if isinstance(token_ids, str) or not isinstance(token_ids, Iterable):
        raise ValueError(f"{name} must be an int or a collection of ints (token ids); got "
                         f"{type(token_ids).__name__}")
    values = list(token_ids)
    if not values or not all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                             for v in values):
        raise ValueError(f"{name} must be an int or a non-empty collection of ints; got "
                         f"{token_ids!r}")
    return torch.tensor(sorted({int(v) for v in values}), dtype=torch.long)


# ----------------------------------------------------------------------------- attention to tokens

def attention_to_tokens(attentions, ids: torch.Tensor, token_ids,
                        attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(L, n_heads) float64: for each layer and head, the attention mass on the tokens whose id is
    in `token_ids` (e.g. {cls_id}, {sep_id}, the ids of punctuation), summed over those keys
    and averaged over every real query of every sentence (padding queries and keys left out).

    attentions: L tensors (B, n_heads, T, T) (a model's output.attentions) or one (B, n_heads, T, T)
    tensor, read as L = 1; ids (B, T) int64; attention_mask (B, T) bool, True = real token.
    Clark et al. (2019), "What does BERT look at?", figure 2."""
    a = _stack_attentions(attentions)  # (L, B, n_heads, T, T)
    B, T = a.shape[1], a.shape[3]
    ids = _require_ids_like(ids, "ids", B, T)
    real = _real_tokens(attention_mask, B, T)  # (B, T)
    hit = torch.isin(ids, _id_set(token_ids, "token_ids")) & real  # (B, T): the chosen keys
    mass = (a * hit[None, :, None, None, :]).sum(-1)  # (L, B, n_heads, T): per query
    per_head = (mass * real[None, :, None, :]).sum(dim=(1, 3))  # (L, n_heads): over real queries
    return per_head / real.sum()


# ----------------------------------------------------------------------------- pattern types

def _masses(weights: torch.Tensor, is_special: torch.Tensor,
            segment: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The three masses of the module docstring for maps (..., T, T) sharing one sentence:
    each a tensor of shape (...)."""
    T = weights.shape[-1]
    content = ~is_special  # (T,): the rows that count, and the keys of diagonal and block
    n_rows = content.sum()
    pos = torch.arange(T)
    band = ((pos[:, None] - pos[None, :]).abs() <= 1) & content[None, :]  # (T, T)
    per_row = {"special": (weights * is_special).sum(-1),  # (..., T)
               "diagonal": (weights * band).sum(-1)}
    masses = {k: (v * content).sum(-1) / n_rows for k, v in per_row.items()}
    groups = [] if segment is None else segment[content].unique().tolist()
    if len(groups) < 2:
        masses["block"] = torch.zeros_like(masses["special"])
        return masses
    same = (segment[:, None] == segment[None, :]) & content[None, :]  # (T, T)
    own = (weights * same).sum(-1)  # (..., T): each row's mass on its own segment
    means = [(own * rows).sum(-1) / rows.sum() for rows in (content & (segment == s)
                                                             for s in groups)]
    masses["block"] = torch.stack(means).mean(0)
    return masses


def _require_sentence(weights, is_special, segment) -> None:
    require_float_tensor(weights, "weights", "(T, T)", ndim=2)
    T = weights.shape[0]
    if weights.shape[1] != T:
        raise ValueError(f"weights must be a square (T, T) map of one head on one sentence; "
                         f"got {shape_str(weights.shape)}")
    require_finite(weights, "weights")
    require_mask(is_special, "is_special", (T,), "True = special token such as [CLS]/[SEP]")
    if is_special.all():
        raise ValueError("is_special marks every token: the masses are means over the tokens "
                         "that are not special, and there is none")
    if segment is not None:
        require_ids(segment, "segment", f"(T,) = ({T},)", 1)
        if segment.shape != (T,):
            raise ValueError(f"segment must have shape (T,) = ({T},); got "
                             f"{shape_str(segment.shape)}")


def pattern_features(weights: torch.Tensor, is_special: torch.Tensor,
                     segment: torch.Tensor | None = None) -> dict[str, float]:
    """{"special", "diagonal", "block"}: the masses of the module docstring for one head's map
    on one sentence. weights (T, T), rows = queries (cut to the real tokens); is_special (T,)
    bool, True at [CLS], [SEP] and the like; segment (T,) int64 (0 for sentence A, 1 for B)
    or None (one segment: block = 0)."""
    _require_sentence(weights, is_special, segment)
    masses = _masses(weights.double(), is_special, segment)
    return {k: float(v) for k, v in masses.items()}


def _classify(special: float, diagonal: float, block: float) -> str:
    if special + diagonal >= STRUCTURED:
        if diagonal < MINOR:
            return "vertical"
        if special < MINOR:
            return "diagonal"
        return "vertical+diagonal"
    return "block" if block >= BLOCK else "heterogeneous"


def classify_pattern(weights: torch.Tensor, is_special: torch.Tensor,
                     segment: torch.Tensor | None = None) -> str:
    """One of PATTERN_TYPES for one head's map on one sentence, by the rule of the module
    docstring (thresholds STRUCTURED = 0.6, MINOR = 0.2, BLOCK = 0.7); Kovaleva et al. (2019),
    "Revealing the dark secrets of BERT", who classified maps by hand and with a CNN."""
    return _classify(**pattern_features(weights, is_special, segment))


def head_pattern_types(attentions, ids: torch.Tensor, special_ids,
                       segments: torch.Tensor | None = None,
                       attention_mask: torch.Tensor | None = None) -> list[list[str]]:
    """L lists of n_heads types: each head's type is the most common over the sentences of the
    batch (ties go to the type earlier in PATTERN_TYPES), each sentence's map cut to its real
    tokens. ids, segments (B, T) int64; special_ids: the ids of [CLS], [SEP], ..."""
    a = _stack_attentions(attentions)  # (L, B, n_heads, T, T)
    L, B, n_heads, T = a.shape[:4]
    ids = _require_ids_like(ids, "ids", B, T)
    if segments is not None:
        segments = _require_ids_like(segments, "segments", B, T)
    real = _real_tokens(attention_mask, B, T)
    special = torch.isin(ids, _id_set(special_ids, "special_ids"))  # (B, T)
    votes = [[Counter() for _ in range(n_heads)] for _ in range(L)]
    for b in range(B):
        keep = real[b]
        if special[b, keep].all():
            raise ValueError(f"sentence {b} has only special tokens; nothing to classify")
        seg = None if segments is None else segments[b, keep]
        maps = a[:, b][..., keep, :][..., keep]  # (L, n_heads, T_b, T_b)
        masses = _masses(maps, special[b, keep], seg)  # each (L, n_heads)
        for layer in range(L):
            for head in range(n_heads):
                kind = _classify(*(float(masses[k][layer, head])
                                   for k in ("special", "diagonal", "block")))
                votes[layer][head][kind] += 1
    order = {kind: i for i, kind in enumerate(PATTERN_TYPES)}
    return [[max(PATTERN_TYPES, key=lambda k, c=c: (c[k], -order[k])) for c in row]
            for row in votes]


def pattern_shares(types) -> dict[str, float]:
    """The share of heads of each type in PATTERN_TYPES (all five keys), summing to 1;
    `types` as returned by head_pattern_types (or a flat list of types)."""
    flat = [t for row in types for t in ([row] if isinstance(row, str) else row)]
    if not flat:
        raise ValueError("types must hold at least one pattern type; got none")
    unknown = sorted({t for t in flat if t not in PATTERN_TYPES})
    if unknown:
        raise ValueError(f"types must be among {PATTERN_TYPES}; got {unknown}")
    counts = Counter(flat)
    return {kind: counts[kind] / len(flat) for kind in PATTERN_TYPES}


# ----------------------------------------------------------------------------- norms

def _require_attention_input(attn, x) -> None:
    if not isinstance(attn, MultiHeadAttention):
        raise ValueError(f"attn must be a course_utils.multihead.MultiHeadAttention (e.g. "
                         f"model.layers[l].self_attn); got {type(attn).__name__}")
    require_float_tensor(x, "x", f"(B, T, d_model = {attn.d_model})", ndim=3)
    if x.shape[-1] != attn.d_model:
        raise ValueError(f"x must have shape (B, T, d_model = {attn.d_model}), the input of the "
                         f"layer (output.hidden_states[l] for layer l); got {shape_str(x.shape)}")
    if x.dtype != attn.w_v.weight.dtype:
        raise ValueError(f"x must have the dtype of attn's weights ({attn.w_v.weight.dtype}); "
                         f"got {x.dtype}")
    require_finite(x, "x")


def _transformed_values(attn: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """f_r(x_j) = (x_j W^V_r + b^V_r) W^O_r for every head r and position j:
    (B, n_heads, T, d_model)."""
    v = split_heads(attn.w_v(x), attn.n_heads)  # (B, n_heads, T, d_k), b^V included
    # w_o.weight is (d_model out, d_model in); head r feeds inputs r d_k .. (r + 1) d_k - 1
    w_o = attn.w_o.weight.reshape(attn.d_model, attn.n_heads, attn.d_k)  # (d_model, n_heads, d_k)
    return torch.einsum("bhtk,dhk->bhtd", v, w_o)  # (B, n_heads, T, d_model)


def value_vectors(attn: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """f_r(x_j) = (x_j W^V_r + b^V_r) W^O_r: (B, n_heads, T, d_model), what key j adds to the
    attention output through head r at weight 1 (value_norms gives their lengths)."""
    _require_attention_input(attn, x)
    with torch.no_grad():
        return _transformed_values(attn, x)


def value_norms(attn: MultiHeadAttention, x: torch.Tensor) -> torch.Tensor:
    """||f_r(x_j)||: (B, n_heads, T), the length of what key j would add through head r at weight 1.
    x (B, T, d_model) is the input of the attention (hidden_states[l] for layer l).
    Kobayashi et al. (2020), "Attention is not only a weight"."""
    _require_attention_input(attn, x)
    with torch.no_grad():
        return _transformed_values(attn, x).norm(dim=-1)


def norm_weighted_attention(attn: MultiHeadAttention, x: torch.Tensor,
                            mask: torch.Tensor | None = None) -> torch.Tensor:
    """||a^r_ij f_r(x_j)|| = a^r_ij ||f_r(x_j)||: (B, n_heads, T, T), rows = queries, a = attn's
    own self-attention weights on x (B, T, d_model). mask: (B, T) bool, True = real token
    (any 2-d mask is read so), or a bool mask broadcastable to (B, n_heads, T, T), True = may
    attend. Kobayashi et al. (2020), "Attention is not only a weight"."""
    _require_attention_input(attn, x)
    if mask is not None and mask.dim() == 2:
        require_mask(mask, "mask", tuple(x.shape[:2]), "True = real token (key padding)")
        mask = mask[:, None, None, :]  # (B, 1, 1, T)
    with torch.no_grad():
        _, weights = attn(x, x, x, mask)  # (B, n_heads, T, T)
        norms = _transformed_values(attn, x).norm(dim=-1)  # (B, n_heads, T): one per key
    return weights * norms[:, :, None, :]


# ----------------------------------------------------------------------------- syntax

def _require_pairs(relations, name: str = "relations") -> list[list[tuple[int, int]]]:
    if isinstance(relations, str) or not isinstance(relations, Sequence):
        raise ValueError(f"{name} must be a list with one list of (dependent, head) word "
                         f"index pairs per sentence; got {type(relations).__name__}")
    out = []
    for b, pairs in enumerate(relations):
        checked = []
        for pair in pairs:
            ok = isinstance(pair, Sequence) and len(pair) == 2 and all(
                isinstance(w, int | np.integer) and not isinstance(w, bool) and w >= 0
                for w in pair)
            if not ok or pair[0] == pair[1]:
                raise ValueError(f"{name}[{b}] must hold (dependent, head) pairs of two "
                                 f"different word indices >= 0 (leave out the root); got "
                                 f"{pair!r}")
            checked.append((int(pair[0]), int(pair[1])))
        out.append(checked)
    if not any(out):
        raise ValueError(f"{name} holds no (dependent, head) pair")
    return out


def _queries(relations) -> list[dict[int, tuple[int, ...]]]:
    """Per sentence {query word: its target words}: the pairs grouped by their first word, so
    that a verb with two subjects ("paul and jane went") is one query with two right answers."""
    out = []
    for sentence in _require_pairs(relations):
        grouped: dict[int, list[int]] = {}
        for dep, head in sentence:
            grouped.setdefault(dep, []).append(head)
        out.append({dep: tuple(heads) for dep, heads in grouped.items()})
    return out


def n_queries(relations) -> int:
    """How many queries `relations` holds: its (query, target) pairs with pairs that share
    a sentence and a query word counted once (what the accuracies below divide by)."""
    return sum(len(sentence) for sentence in _queries(relations))


def relation_accuracy(attentions, word_ids, relations,
                      attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(L, n_heads) float64: for each head, the fraction of queries for which the word that the
    query word's first piece attends to most (its pieces' weights summed; special tokens and
    the query word itself excluded; ties to the lower word index) is its target word. Clark et
    al. (2019), "What does BERT look at?", section 4, with a dependent as the query and its
    head word as the target; any direction can be measured (a verb as the query, its object as
    the target), and pairs that share a query word form one query, right when it picks any
    of their targets (a verb with two subjects).

    word_ids: per sentence a list of T entries, the word index of each token or None
    (special tokens and padding), as `transformers`' word_ids(); relations: per sentence a
    list of (query, target) word indices, 0-based."""
    a = _stack_attentions(attentions)  # (L, B, n_heads, T, T)
    L, B, n_heads, T = a.shape[:4]
    real = _real_tokens(attention_mask, B, T)
    relations = _queries(relations)
    if isinstance(word_ids, str) or not isinstance(word_ids, Sequence) or len(word_ids) != B:
        got = f"length {len(word_ids)}" if isinstance(word_ids, Sequence) else \
            type(word_ids).__name__
        raise ValueError(f"word_ids must be a list of B = {B} lists, one per sentence; got "
                         f"{got}")
    if len(relations) != B:
        raise ValueError(f"relations must hold B = {B} lists, one per sentence; got "
                         f"{len(relations)}")
    right, total = torch.zeros(L, n_heads, dtype=torch.float64), 0
    for b in range(B):
        words = list(word_ids[b])
        if len(words) != T or not all(
                w is None or (isinstance(w, int | np.integer) and not isinstance(w, bool)
                              and w >= 0) for w in words):
            raise ValueError(f"word_ids[{b}] must hold T = {T} entries, each a word index "
                             f">= 0 or None; got {words!r}")
        words = [w if real[b, p] else None for p, w in enumerate(words)]
        present = {w for w in words if w is not None}
        if not relations[b]:
            continue
        n_words = max(present | {w for dep, heads in relations[b].items()
                                 for w in (dep, *heads)}) + 1
        pieces = torch.zeros(T, n_words, dtype=torch.float64)  # (T, n_words): token p is in word w
        for p, w in enumerate(words):
            if w is not None:
                pieces[p, w] = 1.0
        for dep, heads in relations[b].items():
            for head in heads:
                if dep not in present or head not in present:
                    raise ValueError(f"relations[{b}] pair ({dep}, {head}): word "
                                     f"{dep if dep not in present else head} has no real "
                                     f"token in word_ids[{b}]")
            query = words.index(dep)  # the query word's first piece
            to_words = a[:, b, :, query, :] @ pieces  # (L, n_heads, n_words)
            to_words[..., dep] = -torch.inf
            to_words[..., [w for w in range(n_words) if w not in present]] = -torch.inf
            picked = to_words.argmax(-1)  # (L, n_heads)
            right += torch.isin(picked, torch.tensor(heads))
            total += 1
    return right / total


def offset_baseline(relations, offset: int) -> float:
    """The fraction of queries whose target is the word at query + offset (a guess outside
    the sentence is wrong); relations and queries as for relation_accuracy."""
    queries = [item for sentence in _queries(relations) for item in sentence.items()]
    if not isinstance(offset, int) or isinstance(offset, bool) or offset == 0:
        raise ValueError(f"offset must be a nonzero int (-1 = the previous word); got "
                         f"{offset!r}")
    return sum(dep + offset in heads for dep, heads in queries) / len(queries)


def best_offset_baseline(relations, max_offset: int = 3) -> tuple[int, float]:
    """(offset, accuracy) of the best fixed offset in -max_offset .. max_offset (0 left out;
    ties to the offset listed first, -max_offset upwards): Clark et al.'s baseline, whose
    offsets run from -3 to +2."""
    require_int(max_offset, "max_offset")
    scores = [(offset_baseline(relations, k), -i, k)
              for i, k in enumerate(range(-max_offset, max_offset + 1)) if k]
    accuracy, _, offset = max(scores)
    return offset, accuracy


def nearest_word_baseline(relations, n_words: Sequence[int] | None = None) -> float:
    """The fraction of queries whose target is the adjacent word: the next word (query + 1),
    or the previous one for the last word of the sentence (queries as for relation_accuracy).

    n_words: the number of words of each sentence; by default 1 + the largest word index in
    the sentence's pairs, which is exact for a full dependency parse (every word but the root
    is a dependent, and the root is a head)."""
    relations = _require_pairs(relations)
    if n_words is None:
        n_words = [1 + max((w for pair in s for w in pair), default=0) for s in relations]
    if isinstance(n_words, str) or not isinstance(n_words, Sequence) \
            or len(n_words) != len(relations):
        raise ValueError(f"n_words must be a list of {len(relations)} word counts, one per "
                         f"sentence; got {n_words!r}")
    right, total = 0, 0
    for b, (sentence, n) in enumerate(zip(_queries(relations), n_words, strict=True)):
        n = require_int(n, f"n_words[{b}]")
        for dep, heads in sentence.items():
            if max(dep, *heads) >= n:
                raise ValueError(f"pair ({dep}, {max(heads)}) lies outside a sentence of {n} "
                                 f"words")
            right += (dep + 1 if dep + 1 < n else dep - 1) in heads
            total += 1
    return right / total


# ----------------------------------------------------------------------------- held out

def choose_and_report(choose: torch.Tensor, report: torch.Tensor) -> tuple[tuple[int, int],
                                                                           float, float]:
    """((layer, head), its score in `choose`, its score in `report`): the head with the
    highest score in `choose` (L, n_heads) (ties to the first in layer-major order), measured
    on other data, `report` (L, n_heads). The best of L n_heads heads scored on the sentences
    it was picked on is optimistic by construction; scored on others it is an honest
    estimate."""
    require_float_tensor(choose, "choose", "(L, n_heads)", ndim=2)
    require_float_tensor(report, "report", "(L, n_heads)", ndim=2)
    if choose.shape != report.shape:
        raise ValueError(f"choose and report must have the same shape (L, n_heads); got "
                         f"{shape_str(choose)} and {shape_str(report)}")
    layer, head = divmod(int(choose.flatten().argmax()), choose.shape[1])
    return (layer, head), float(choose[layer, head]), float(report[layer, head])


def held_out_offset(choose, report, max_offset: int = 3) -> tuple[int, float, float]:
    """(offset, its accuracy on `choose`, on `report`): the best fixed offset picked on the
    relations `choose` and measured on `report`, the same choice the best head gets."""
    offset, chosen = best_offset_baseline(choose, max_offset)
    return offset, chosen, offset_baseline(report, offset)


# ----------------------------------------------------------------------------- heads off

def heads_off_mask(n_layers: int, n_heads: int, off: Iterable) -> torch.Tensor:
    """(n_layers, n_heads) float32 head_mask: 0 at each (layer, head) pair of `off`, 1
    elsewhere (pass it as model(ids, head_mask=...))."""
    require_int(n_layers, "n_layers")
    require_int(n_heads, "n_heads")
    if isinstance(off, str) or not isinstance(off, Iterable):
        raise ValueError(f"off must be an iterable of (layer, head) pairs; got "
                         f"{type(off).__name__}")
    mask = torch.ones(n_layers, n_heads)
    for pair in off:
        ok = isinstance(pair, Sequence) and len(pair) == 2 and all(
            isinstance(i, int | np.integer) and not isinstance(i, bool) for i in pair)
        if not ok or not (0 <= pair[0] < n_layers and 0 <= pair[1] < n_heads):
            raise ValueError(f"off must hold (layer, head) pairs with layer in [0, "
                             f"{n_layers - 1}] and head in [0, {n_heads - 1}]; got {pair!r}")
        mask[pair[0], pair[1]] = 0.0
    return mask


def each_head_off(metric: Callable[[torch.Tensor], float], n_layers: int,
                  n_heads: int) -> torch.Tensor:
    """(n_layers, n_heads) float64: metric(head_mask) with only that one head switched off,
    e.g. metric = lambda mask: accuracy(model, data, head_mask=mask). Calls metric
    n_layers n_heads times.
    Michel et al. (2019), "Are sixteen heads really better than one?"."""
    require_int(n_layers, "n_layers")
    require_int(n_heads, "n_heads")
    if not callable(metric):
        raise ValueError(f"metric must be a function of a head_mask; got "
                         f"{type(metric).__name__}")
    scores = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        for head in range(n_heads):
            value = metric(heads_off_mask(n_layers, n_heads, [(layer, head)]))
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            if not isinstance(value, int | float | np.number) or isinstance(value, bool):
                raise ValueError(f"metric must return a number; got {type(value).__name__} "
                                 f"for head ({layer}, {head})")
            scores[layer, head] = float(value)
    return scores
