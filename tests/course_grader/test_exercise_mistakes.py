"""Exercises 00, 03 and 04 against correct solutions and realistic mistakes, at home and as
graded; and issue 42's two named misses of units 07 and 09.

The mistakes below (MISTAKES) were written from the released exercises alone, their task text
and stubs, before their tests were read: the slips students make (a wrong axis, a maximum of
the whole tensor, a mask inverted, an in-place write, .squeeze(), a float32 buffer, a shape
that only works without a batch). Each case is a submission: the solution notebook's solution
cells, one of them replaced. It runs twice in one plain kernel, limited to the address space a
graded kernel has:

- at home: the release notebook cell by cell (visible tests only), as a student's "Restart and
  Run All" does; a test cell that raises is one the student sees fail;
- graded: the solution notebook's set-up and test cells, hidden parts included, through the
  checker (`course_grader.checker.CellRunner`), as test_exercise_09_mistakes.py does.

Every correct variant passes both. Every mistake fails exactly the test cells named when
graded, and is caught by their visible part (then the same cells fail at home) or by the hidden
part alone (then nothing fails at home), as stated. In each unit at least 70% of the mistakes
written from the release are caught by the visible tests. About 2 minutes on 2 busy cores.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import nbformat
import pytest
from conftest import ROOT

from course_grader.checker import CellRunner, KernelLink
from course_grader.nbgrader_hooks import hidden_line_numbers, student_names

pytestmark = pytest.mark.usefixtures("one_thread")  # the set-ups set one thread; restored

VISIBLE_SHARE = 0.7   # of the mistakes written from the release, per unit

# ---------------------------------------------------------------- unit 00

CORRECT_00 = {
    "logsumexp and einsum": {
        "softmax_solution": '''def softmax(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
''',
        "weighted_average_solution": '''def weighted_average(weights, values):
    return torch.einsum("...j,...jd->...d", weights, values)
''',
        "soft_lookup_solution": '''def soft_lookup(query, keys, values):
    alpha = softmax(torch.einsum("jd,d->j", keys, query))
    return weighted_average(alpha, values), alpha
''',
    },
    "movedim and matmul": {
        "softmax_solution": '''def softmax(x, dim=-1):
    y = x.movedim(dim, -1)
    e = (y - y.max(dim=-1, keepdim=True).values).exp()
    return (e / e.sum(dim=-1, keepdim=True)).movedim(-1, dim)
''',
        "weighted_average_solution": '''def weighted_average(weights, values):
    return (weights.unsqueeze(-2) @ values).squeeze(-2)
''',
        "soft_lookup_solution": '''def soft_lookup(query, keys, values):
    scores = (query * keys).sum(dim=-1)
    alpha = softmax(scores, dim=0)
    result = weighted_average(alpha, values)
    return result, alpha
''',
    },
    "loops": {
        "softmax_solution": '''def softmax(x, dim=-1):
    top = torch.max(x, dim=dim, keepdim=True)[0]
    numerator = torch.exp(x - top)
    return numerator / torch.sum(numerator, dim=dim, keepdim=True)
''',
        "weighted_average_solution": '''def weighted_average(weights, values):
    total = weights[..., 0, None] * values[..., 0, :]
    for j in range(1, values.shape[-2]):
        total = total + weights[..., j, None] * values[..., j, :]
    return total
''',
        "soft_lookup_solution": '''def soft_lookup(query, keys, values):
    scores = torch.stack([key @ query for key in keys])
    alpha = softmax(scores)
    return weighted_average(alpha, values), alpha
''',
    },
}

MISTAKES_00 = {
    "softmax: no maximum subtracted": ({"softmax_solution": '''def softmax(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
'''}, {"softmax_stable"}, "visible"),
    "softmax: the maximum of the whole tensor, not of each row": (
        {"softmax_solution": '''def softmax(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)
'''}, {"softmax_stable"}, "visible"),
    "softmax: always over the last axis, dim ignored": ({"softmax_solution": '''\
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
'''}, {"softmax_basic"}, "visible"),
    "softmax: the maximum subtracted in place": ({"softmax_solution": '''def softmax(x, dim=-1):
    x -= x.max(dim=dim, keepdim=True).values
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
'''}, {"softmax_basic"}, "visible"),
    "weighted_average: ends in .squeeze()": ({"weighted_average_solution": '''\
def weighted_average(weights, values):
    return (weights.unsqueeze(-2) @ values).squeeze()
'''}, {"weighted_average_batch"}, "visible"),
    "weighted_average: renormalises the weights": ({"weighted_average_solution": '''\
def weighted_average(weights, values):
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return (weights.unsqueeze(-1) * values).sum(dim=-2)
'''}, {"weighted_average_single"}, "visible"),
    "weighted_average: one query or one batch axis only": ({"weighted_average_solution": '''\
def weighted_average(weights, values):
    if weights.dim() == 1:
        return weights @ values
    return (weights.unsqueeze(1) @ values).squeeze(1)
'''}, {"weighted_average_batch"}, "visible"),
    "weighted_average: a float32 accumulator": ({"weighted_average_solution": '''\
def weighted_average(weights, values):
    out = torch.zeros(values.shape[:-2] + values.shape[-1:])
    for j in range(values.shape[-2]):
        out += weights[..., j, None] * values[..., j, :]
    return out
'''}, {"weighted_average_single"}, "visible"),
    "soft_lookup: scores divided by sqrt(d_k)": ({"soft_lookup_solution": '''\
def soft_lookup(query, keys, values):
    scores = keys @ query / math.sqrt(query.shape[-1])
    alpha = softmax(scores)
    return weighted_average(alpha, values), alpha
'''}, {"soft_lookup_sharp", "soft_lookup_mean"}, "visible"),
    "soft_lookup: torch.softmax": ({"soft_lookup_solution": '''\
def soft_lookup(query, keys, values):
    alpha = torch.softmax(keys @ query, dim=-1)
    return weighted_average(alpha, values), alpha
'''}, {"soft_lookup_sharp", "soft_lookup_mean"}, "visible"),
}

# ---------------------------------------------------------------- unit 03

CORRECT_03 = {
    "finfo.min and einsum": {
        "masked_softmax_solution": '''def masked_softmax(scores, mask):
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    e = torch.exp(filled - filled.amax(dim=-1, keepdim=True)) * mask
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)
''',
        "additive_solution": '''def additive_attention(s, h, mask, W_q, W_k, w_a):
    hidden = torch.tanh(torch.einsum("ad,bd->ba", W_q, s)[:, None, :]
                        + torch.einsum("ad,btd->bta", W_k, h))
    alpha = masked_softmax(torch.einsum("bta,a->bt", hidden, w_a), mask)
    return torch.einsum("bt,btd->bd", alpha, h), alpha
''',
        "decoder_solution": '''\
def attention_decoder_step(y_emb, s_prev, keys, mask, attn, gru, out):
    context, weights = additive_attention(s_prev, keys, mask, **attn)
    state = gru(torch.cat((y_emb, context), dim=-1), s_prev)
    return out(torch.cat((state, context), dim=-1)), state, weights
''',
    },
    "logsumexp and F.linear": {
        "masked_softmax_solution": '''def masked_softmax(scores, mask):
    filled = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(filled, dim=-1, keepdim=True)
    lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(filled - lse)
''',
        "additive_solution": '''import torch.nn.functional as F


def additive_attention(s, h, mask, W_q, W_k, w_a):
    e = (torch.tanh(F.linear(s, W_q).unsqueeze(1) + F.linear(h, W_k)) * w_a).sum(dim=-1)
    alpha = masked_softmax(e, mask)
    return (alpha.unsqueeze(-1) * h).sum(dim=1), alpha
''',
        "decoder_solution": '''\
def attention_decoder_step(y_emb, s_prev, keys, mask, attn, gru, out):
    W_q, W_k, w_a = attn["W_q"], attn["W_k"], attn["w_a"]
    c, alpha = additive_attention(s_prev, keys, mask, W_q, W_k, w_a)
    s = gru(torch.hstack([y_emb, c]), s_prev)
    logits = out(torch.hstack([s, c]))
    return logits, s, alpha
''',
    },
}

ADDITIVE_03 = '''def additive_attention(s, h, mask, W_q, W_k, w_a):
    e = torch.tanh((s @ W_q.T).unsqueeze(1) + h @ W_k.T) @ w_a
    alpha = masked_softmax(e, mask)
'''

MISTAKES_03 = {
    "masked_softmax: padding filled with -1e9, a fully masked row left uniform": (
        {"masked_softmax_solution": '''def masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, -1e9)
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
'''}, {"masked_softmax_fully_masked"}, "visible"),
    "masked_softmax: the row maximum over every key, padding included": (
        {"masked_softmax_solution": '''def masked_softmax(scores, mask):
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)) * mask
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
'''}, {"masked_softmax_stable"}, "visible"),
    "masked_softmax: the maximum of the whole tensor": (
        {"masked_softmax_solution": '''def masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.max()
    e = torch.exp(scores - (top if torch.isfinite(top) else 0.0))
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
'''}, {"masked_softmax_stable"}, "visible"),
    "masked_softmax: masked_fill_ on the scores it was given": (
        {"masked_softmax_solution": '''def masked_softmax(scores, mask):
    scores.masked_fill_(~mask, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    e = torch.exp(scores - top)
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
'''}, {"masked_softmax_basic"}, "visible"),
    "masked_softmax: padding scores multiplied by the mask (set to 0)": (
        {"masked_softmax_solution": '''def masked_softmax(scores, mask):
    scores = scores * mask
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
'''}, {"masked_softmax_basic", "masked_softmax_stable", "masked_softmax_fully_masked"},
        "visible"),
    "additive_attention: the context ends in .squeeze()": ({"additive_solution": ADDITIVE_03 + '''\
    return (alpha.unsqueeze(1) @ h).squeeze(), alpha
'''}, {"additive_context"}, "visible"),
    "additive_attention: no tanh": ({"additive_solution": '''\
def additive_attention(s, h, mask, W_q, W_k, w_a):
    e = ((s @ W_q.T).unsqueeze(1) + h @ W_k.T) @ w_a
    alpha = masked_softmax(e, mask)
    return (alpha.unsqueeze(1) @ h).squeeze(1), alpha
'''}, {"additive_weights"}, "visible"),
    "additive_attention: the context summed into a float32 buffer": (
        {"additive_solution": ADDITIVE_03 + '''\
    c = torch.zeros(h.shape[0], h.shape[2])
    for t in range(h.shape[1]):
        c += alpha[:, t:t + 1] * h[:, t]
    return c, alpha
'''}, {"additive_context"}, "visible"),
    "attention_decoder_step: [c; y] instead of [y; c]": ({"decoder_solution": '''\
def attention_decoder_step(y_emb, s_prev, keys, mask, attn, gru, out):
    c, alpha = additive_attention(s_prev, keys, mask, attn["W_q"], attn["W_k"], attn["w_a"])
    s = gru(torch.cat([c, y_emb], dim=1), s_prev)
    return out(torch.cat([s, c], dim=1)), s, alpha
'''}, {"decoder_state"}, "visible"),
    "attention_decoder_step: the state squeezed like nn.GRU's": ({"decoder_solution": '''\
def attention_decoder_step(y_emb, s_prev, keys, mask, attn, gru, out):
    c, alpha = additive_attention(s_prev, keys, mask, attn["W_q"], attn["W_k"], attn["w_a"])
    s = gru(torch.cat([y_emb, c], dim=1), s_prev).squeeze(0)
    return out(torch.cat([s, c], dim=-1)), s, alpha
'''}, {"decoder_state"}, "visible"),
}

# ---------------------------------------------------------------- unit 04

CORRECT_04 = {
    "einsum": {
        "dot_solution": '''def dot_scores(q, k):
    return torch.einsum("...id,...jd->...ij", q, k)
''',
        "scaled_solution": '''def scaled_dot_scores(q, k):
    return dot_scores(q, k) * q.shape[-1] ** -0.5
''',
        "bilinear_solution": '''def bilinear_scores(q, k, W_e):
    return torch.einsum("...jk,kq,...iq->...ij", k, W_e, q)
''',
        "additive_solution": '''def additive_scores(q, k, W_q, W_k, w_a):
    pairs = torch.einsum("ad,...id->...ia", W_q, q)[..., :, None, :] + \\
        torch.einsum("ad,...jd->...ja", W_k, k)[..., None, :, :]
    return torch.einsum("...ija,a->...ij", torch.tanh(pairs), w_a)
''',
        "cosine_solution": '''def cosine_scores(q, k):
    return dot_scores(F.normalize(q, dim=-1, eps=1e-8), F.normalize(k, dim=-1, eps=1e-8))
''',
        "sdpa_solution": '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = scaled_dot_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse))
    return torch.einsum("...ij,...jd->...id", weights, v), weights
''',
    },
    "matmul and where": {
        "dot_solution": '''def dot_scores(q, k):
    return torch.matmul(q, k.mT)
''',
        "scaled_solution": '''def scaled_dot_scores(q, k):
    return dot_scores(q, k) / math.sqrt(k.size(-1))
''',
        "bilinear_solution": '''def bilinear_scores(q, k, W_e):
    return q @ (k @ W_e).transpose(-2, -1)
''',
        "additive_solution": '''def additive_scores(q, k, W_q, W_k, w_a):
    summed = (q @ W_q.T)[..., :, None, :] + (k @ W_k.T)[..., None, :, :]
    return (torch.tanh(summed) * w_a).sum(dim=-1)
''',
        "cosine_solution": '''def cosine_scores(q, k):
    lengths = q.norm(dim=-1, keepdim=True) * k.norm(dim=-1, keepdim=True).transpose(-2, -1)
    return dot_scores(q, k) / lengths.clamp_min(1e-16)
''',
        "sdpa_solution": '''def scaled_dot_product_attention(q, k, v, mask=None):
    scores = scaled_dot_scores(q, k)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).min)
    e = torch.exp(scores - top)
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
''',
    },
}

MISTAKES_04 = {
    "dot_scores: k.T, which reverses every axis of a batch": (
        {"dot_solution": "def dot_scores(q, k):\n    return q @ k.T\n"}, {"dot_test"}, "visible"),
    "dot_scores: k q^T, the scores transposed": (
        {"dot_solution": "def dot_scores(q, k):\n    return k @ q.transpose(-2, -1)\n"},
        {"dot_test"}, "visible"),
    "scaled_dot_scores: d_k read as k.size(1)": ({"scaled_solution": '''\
def scaled_dot_scores(q, k):
    return dot_scores(q, k) / math.sqrt(k.size(1))
'''}, {"scaled_test"}, "visible"),
    "scaled_dot_scores: divided by d_k": ({"scaled_solution": '''\
def scaled_dot_scores(q, k):
    return dot_scores(q, k) / q.shape[-1]
'''}, {"scaled_test"}, "visible"),
    "bilinear_scores: W_e not transposed": ({"bilinear_solution": '''\
def bilinear_scores(q, k, W_e):
    return dot_scores(q @ W_e, k)
'''}, {"bilinear_test"}, "visible"),
    "additive_scores: axes added for one matrix, not a batch": ({"additive_solution": '''\
def additive_scores(q, k, W_q, W_k, w_a):
    qp, kp = q @ W_q.T, k @ W_k.T
    return torch.tanh(qp[:, None, :] + kp[None, :, :]) @ w_a
'''}, {"additive_test"}, "visible"),
    "cosine_scores: a zero vector divided by its zero norm": ({"cosine_solution": '''\
def cosine_scores(q, k):
    q = q / q.norm(dim=-1, keepdim=True)
    k = k / k.norm(dim=-1, keepdim=True)
    return dot_scores(q, k)
'''}, {"cosine_test"}, "visible"),
    "cosine_scores: normalised in place": ({"cosine_solution": '''\
def cosine_scores(q, k):
    q /= q.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    k /= k.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    return dot_scores(q, k)
'''}, {"cosine_test"}, "visible"),
    "scaled_dot_product_attention: a fully masked row gives NaN": ({"sdpa_solution": '''\
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = scaled_dot_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights @ v, weights
'''}, {"sdpa_mask"}, "visible"),
    "scaled_dot_product_attention: the mask inverted": ({"sdpa_solution": '''\
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = scaled_dot_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    top = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)
    return weights @ v, weights
'''}, {"sdpa_mask"}, "visible"),
}

# Mistakes whose values are right and whose gradient is not (written after reading the tests,
# so not counted in the visible share): the hidden tests' gradient checks are what catch them.
CONTRACT_MISTAKES = {
    "00_attention_as_lookup": {"weighted_average: the weights detached": (
        {"weighted_average_solution": '''def weighted_average(weights, values):
    return (weights.detach().unsqueeze(-1) * values).sum(dim=-2)
'''}, {"weighted_average_single"}, "hidden")},
    "03_attention_seq2seq": {"additive_attention: the context from detached weights": (
        {"additive_solution": ADDITIVE_03 + '''\
    return (alpha.detach().unsqueeze(1) @ h).squeeze(1), alpha
'''}, {"additive_context"}, "hidden")},
    "04_attention_variants": {"cosine_scores: the norms detached": ({"cosine_solution": '''\
def cosine_scores(q, k):
    q = q / q.norm(dim=-1, keepdim=True).detach().clamp_min(1e-8)
    k = k / k.norm(dim=-1, keepdim=True).detach().clamp_min(1e-8)
    return dot_scores(q, k)
'''}, {"cosine_test"}, "hidden")},
}

CORRECT = {"00_attention_as_lookup": CORRECT_00, "03_attention_seq2seq": CORRECT_03,
           "04_attention_variants": CORRECT_04}
MISTAKES = {"00_attention_as_lookup": MISTAKES_00, "03_attention_seq2seq": MISTAKES_03,
            "04_attention_variants": MISTAKES_04}

# ---------------------------------------------------------------- issue 42's named misses

MASK_TOKENS_HEAD = '''def mask_tokens(ids, vocab_size, mask_id, special_ids, p=0.15):
    ordinary = ~torch.isin(ids, torch.tensor(special_ids, dtype=torch.long))
    chosen = ordinary & (torch.rand(ids.shape) < p)
    r = torch.rand(ids.shape)
    inputs = torch.where(chosen & (r < 0.8), mask_id, ids)
'''
MASK_TOKENS_TAIL = '''    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, ids, IGNORE)
'''

# (unit, the cells graded, {case: (replaced, the cells it fails, visibly)}): a cell's other
# tasks are not graded here (test_exercise_09_mistakes.py grades the rest of unit 09)
NAMED = {
    "07_bert": (("mask_test", "mask_rates"), {
        "mask_tokens: random ids from [1, vocab_size]": ({"mask_solution": MASK_TOKENS_HEAD + '''\
    random_ids = torch.randint(1, vocab_size + 1, ids.shape)
''' + MASK_TOKENS_TAIL}, {"mask_test"}),
        "correct: random ordinary ids": ({"mask_solution": MASK_TOKENS_HEAD + '''\
    allowed = [i for i in range(vocab_size) if i not in special_ids and i != mask_id]
    random_ids = torch.tensor(allowed)[torch.randint(len(allowed), ids.shape)]
''' + MASK_TOKENS_TAIL}, set()),
        "correct: Bernoulli draws and indexed writes": ({"mask_solution": '''\
def mask_tokens(ids, vocab_size, mask_id, special_ids, p=0.15):
    ordinary = ~torch.isin(ids, torch.tensor(special_ids))
    chosen = torch.bernoulli(torch.full(ids.shape, p)).bool() & ordinary
    masked = chosen & torch.bernoulli(torch.full(ids.shape, 0.8)).bool()
    swapped = chosen & ~masked & torch.bernoulli(torch.full(ids.shape, 0.5)).bool()
    inputs = ids.clone()
    inputs[masked] = mask_id
    inputs[swapped] = torch.randint(vocab_size, (int(swapped.sum()),))
    labels = torch.full_like(ids, IGNORE)
    labels[chosen] = ids[chosen]
    return inputs, labels
'''}, set()),
    }),
    "09_attention_at_scale": (("tiled_causal_test",), {
        "tiled_attention: a block's maximum taken before the mask": ({"tiled_solution": '''\
def tiled_attention(q, k, v, block_size, causal=False):
    q = q / math.sqrt(q.shape[-1])
    row_max = q.new_full((*q.shape[:-1], 1), float("-inf"))
    row_sum = q.new_zeros(row_max.shape)
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    queries = torch.arange(q.shape[-2])[:, None]
    for start in range(0, k.shape[-2], block_size):
        k_j, v_j = k[:, :, start:start + block_size], v[:, :, start:start + block_size]
        e = q @ k_j.transpose(-2, -1)
        new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))
        if causal:
            keys = torch.arange(start, start + k_j.shape[-2])[None, :]
            e = e.masked_fill(keys > queries, float("-inf"))
        p = torch.exp(e - new_max)
        fix = torch.exp(row_max - new_max)
        row_sum = row_sum * fix + p.sum(dim=-1, keepdim=True)
        out = out * fix + p @ v_j
        row_max = new_max
    return out / row_sum
'''}, {"tiled_causal_test"}),
    }),
}


# ---------------------------------------------------------------- running a submission

def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@dataclass(frozen=True)
class Exercise:
    """One unit's notebooks, as the two runs need them."""

    setup: str
    solutions: dict          # grade id -> the solution's source, without its markers
    tests: list              # (grade id, points, source with its hidden tests)
    released_solutions: list  # the solution cells as released (stubs)
    release: list            # the release's code cells in order: (grade id, meta, source)


@functools.cache
def exercise(unit: str) -> Exercise:
    solved = nbformat.read(ROOT / "solutions" / unit / f"{unit}.ipynb", as_version=4)
    released = nbformat.read(ROOT / "exercises" / unit / f"{unit}.ipynb", as_version=4)
    return Exercise(
        setup=next(c.source for c in solved.cells if _meta(c).get("grade_id") == "setup"),
        solutions={_meta(c)["grade_id"]: re.sub(r"\s*### (BEGIN|END) SOLUTION", "", c.source)
                   for c in solved.cells if _meta(c).get("solution")},
        tests=[(_meta(c)["grade_id"], _meta(c)["points"], c.source) for c in solved.cells
               if _meta(c).get("grade") and not _meta(c).get("solution")],
        released_solutions=[re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION",
                                   "raise NotImplementedError()", c.source, flags=re.S)
                            for c in solved.cells if _meta(c).get("solution")],
        release=[(_meta(c).get("grade_id"), _meta(c), c.source) for c in released.cells
                 if c.cell_type == "code"])


@pytest.fixture(scope="module")
def kernel(graded_memory_kernel):
    return graded_memory_kernel


def at_home(kernel, unit: str, replaced: dict) -> dict:
    """{test cell: its error} for the release notebook run top to bottom in the kernel, with
    the solution's answers, those in `replaced` replaced: what a student sees fail."""
    _, kc = kernel
    ex = exercise(unit)
    kc.execute_interactive("%reset -f", timeout=60)
    failed = {}
    for gid, meta, source in ex.release:
        if meta.get("solution"):
            source = replaced.get(gid, ex.solutions[gid])
        reply = kc.execute_interactive(source, timeout=300, output_hook=lambda msg: None)
        content = reply["content"]
        if content["status"] == "ok":
            continue
        assert meta.get("grade") and not meta.get("solution"), (gid, content.get("evalue"))
        failed[gid] = f"{content.get('ename')}: {content.get('evalue')}"
    return failed


def graded(kernel, unit: str, replaced: dict, cells=None) -> dict:
    """{test cell: (its points, the checker's verdict)} for the submission whose solution
    cells are the solution's, those in `replaced` replaced (the test cells in `cells` only,
    if given)."""
    km, kc = kernel
    ex = exercise(unit)
    code = "\n\n".join(replaced.get(gid, source) for gid, source in ex.solutions.items())
    reply = kc.execute_interactive(f"%reset -f\n{ex.setup}\n\n{code}", timeout=60,
                                   output_hook=lambda msg: None)
    assert reply["content"]["status"] == "ok", reply["content"]
    link = KernelLink(km.connection_file)
    try:
        runner = CellRunner(link, student_names(ex.released_solutions))
        assert runner.run_setup(ex.setup) == {"ok": True}
        return {gid: (points, runner.run_test(
            source, sorted(hidden_line_numbers(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")),
            300)) for gid, points, source in ex.tests if cells is None or gid in cells}
    finally:
        link.kc.stop_channels()


def is_hidden(verdict: dict) -> bool:
    return verdict["message"].startswith("A hidden test failed")


# ---------------------------------------------------------------- the tests

@pytest.mark.parametrize("unit", MISTAKES)
def test_the_visible_tests_catch_most_mistakes_written_from_the_release(unit):
    caught = [by for _, _, by in MISTAKES[unit].values()]
    assert len(caught) >= 8
    assert caught.count("visible") / len(caught) >= VISIBLE_SHARE, caught


@pytest.mark.parametrize(("unit", "name"), [(u, n) for u in CORRECT for n in
                                            ("reference", *CORRECT[u])])
def test_a_correct_solution_passes_at_home_and_gets_full_marks(kernel, unit, name):
    replaced = CORRECT[unit].get(name, {})
    assert at_home(kernel, unit, replaced) == {}
    verdicts = graded(kernel, unit, replaced)
    failed = {gid: v["message"][:300] for gid, (_, v) in verdicts.items() if not v["passed"]}
    assert not failed, failed


@pytest.mark.parametrize(("unit", "name"), [(u, n) for u in MISTAKES for n in
                                            (*MISTAKES[u], *CONTRACT_MISTAKES[u])])
def test_a_mistake_fails_the_cells_named_at_home_as_when_graded(kernel, unit, name):
    replaced, cells, caught_by = {**MISTAKES[unit], **CONTRACT_MISTAKES[unit]}[name]
    verdicts = graded(kernel, unit, replaced)
    failed = {gid for gid, (_, v) in verdicts.items() if not v["passed"]}
    assert failed == cells, {gid: verdicts[gid][1]["message"][:300] for gid in failed}
    total = sum(points for points, _ in verdicts.values())
    assert sum(points for points, v in verdicts.values() if v["passed"]) == \
        total - sum(verdicts[gid][0] for gid in cells)
    labels = {gid: "hidden" if is_hidden(verdicts[gid][1]) else "visible" for gid in cells}
    assert set(labels.values()) == {caught_by}, labels
    seen_at_home = at_home(kernel, unit, replaced)
    assert set(seen_at_home) == (cells if caught_by == "visible" else set()), seen_at_home


@pytest.mark.parametrize(("unit", "name"), [(u, n) for u in NAMED for n in NAMED[u][1]])
def test_issue_42s_named_misses_are_caught_by_the_visible_tests(kernel, unit, name):
    graded_cells, cases = NAMED[unit]
    replaced, cells = cases[name]
    verdicts = graded(kernel, unit, replaced, cells=graded_cells)
    assert set(verdicts) == set(graded_cells)
    failed = {gid: v for gid, (_, v) in verdicts.items() if not v["passed"]}
    assert set(failed) == cells, {gid: v["message"][:300] for gid, v in failed.items()}
    assert not any(is_hidden(v) for v in failed.values())
    seen_at_home = at_home(kernel, unit, replaced)
    assert set(seen_at_home) == cells, seen_at_home
