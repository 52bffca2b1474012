"""Exercise 09's tests against correct solutions and realistic mistakes, graded in-process.

Each case is a submission: the solution notebook's solution cells, some of them replaced. Its
code runs in a plain local kernel, with the sandbox's memory limit (RLIMIT_AS,
`sandbox.Limits.memory_bytes`); the notebook's set-up and test cells (hidden tests included)
run here through the checker (`course_grader.checker.CellRunner`), as when graded, without
nbgrader or the sandbox itself (those are `test_autograde.py`'s). Every correct solution,
however it is computed (two passes, blocks of queries in float64, a running log-sum-exp),
gets full marks; every mistake loses exactly the test cells named, and is caught by their
visible part or only by the hidden one, as stated; attention that holds the whole matrix of
scores is one of them. About 150 s on 2 busy cores: each case whose tiled_attention is right
runs it on 20,000 positions.
"""

from __future__ import annotations

import re

import nbformat
import pytest
from conftest import ROOT

from course_grader.checker import CellRunner, KernelLink
from course_grader.nbgrader_hooks import hidden_line_numbers, student_names

pytestmark = pytest.mark.usefixtures("one_thread")  # the set-up sets one thread; restored

UNIT = "09_attention_at_scale"
NOTEBOOK = ROOT / "solutions" / UNIT / f"{UNIT}.ipynb"


# ---------------------------------------------------------------- correct variants

TWO_PASS = {
    "online_softmax_solution": '''def softmax_stats(x, block_size):
    chunks = x.split(block_size, dim=-1)
    row_max = chunks[0].amax(dim=-1, keepdim=True)
    for chunk in chunks[1:]:                      # pass 1: the maximum
        row_max = torch.maximum(row_max, chunk.amax(dim=-1, keepdim=True))
    row_sum = 0
    for chunk in chunks:                          # pass 2: the sum
        row_sum = row_sum + torch.exp(chunk - row_max).sum(dim=-1, keepdim=True)
    return row_max, row_sum


def online_softmax(x, block_size):
    row_max, row_sum = softmax_stats(x, block_size)
    return torch.cat([torch.exp(c - row_max) / row_sum for c in x.split(block_size, dim=-1)],
                     dim=-1)
''',
    "tiled_solution": '''def tiled_attention(q, k, v, block_size, causal=False):
    scale = q.shape[-1] ** -0.5
    T_q = q.shape[-2]

    def block_scores(s):
        e = (q @ k[:, :, s:s + block_size].transpose(-2, -1)) * scale
        if causal:
            rows = torch.arange(T_q).unsqueeze(1)
            cols = torch.arange(s, s + e.shape[-1]).unsqueeze(0)
            e = e.masked_fill(cols > rows, float("-inf"))
        return e

    starts = range(0, k.shape[-2], block_size)
    row_max = None
    for s in starts:                              # pass 1: each row's maximum
        block_max = block_scores(s).amax(dim=-1, keepdim=True)
        row_max = block_max if row_max is None else torch.maximum(row_max, block_max)
    row_sum, out = 0, 0
    for s in starts:                              # pass 2: no rescaling needed
        p = torch.exp(block_scores(s) - row_max)
        row_sum = row_sum + p.sum(dim=-1, keepdim=True)
        out = out + p @ v[:, :, s:s + block_size]
    return out / row_sum
''',
    "repeat_kv_solution": '''def repeat_kv(kv, group):
    B, n_kv_heads, T, d_k = kv.shape
    return kv[:, :, None].expand(B, n_kv_heads, group, T, d_k).reshape(
        B, n_kv_heads * group, T, d_k)
''',
    "gqa_step_solution": '''def gqa_step(x_new, cache, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    B = x_new.shape[0]
    d_k = W_q.shape[1] // n_heads
    group = n_heads // n_kv_heads
    q = (x_new @ W_q).view(B, 1, n_kv_heads, group, d_k)      # head r = g * group + i
    k_new = (x_new @ W_k).view(B, 1, n_kv_heads, d_k).transpose(1, 2)
    v_new = (x_new @ W_v).view(B, 1, n_kv_heads, d_k).transpose(1, 2)
    k = torch.cat([cache["k"], k_new], dim=2)
    v = torch.cat([cache["v"], v_new], dim=2)
    scores = torch.einsum("bogid,bgtd->bgiot", q, k) / math.sqrt(d_k)
    weights = online_softmax(scores, 2)
    heads = torch.einsum("bgiot,bgtd->bogid", weights, v).reshape(B, 1, n_heads * d_k)
    return heads @ W_o, {"k": k, "v": v}
''',
}

QUERY_BLOCKS_FLOAT64 = {
    "online_softmax_solution": '''def softmax_stats(x, block_size):
    x64 = x.double()
    row_max = torch.full((*x.shape[:-1], 1), float("-inf"), dtype=torch.float64)
    row_sum = torch.zeros_like(row_max)
    for s in range(0, x.shape[-1], block_size):
        chunk = x64[..., s:s + block_size]
        new_max = torch.maximum(row_max, chunk.amax(dim=-1, keepdim=True))
        row_sum = row_sum * torch.exp(row_max - new_max) + torch.exp(chunk - new_max).sum(
            dim=-1, keepdim=True)
        row_max = new_max
    return row_max.to(x.dtype), row_sum.to(x.dtype)


def online_softmax(x, block_size):
    # every chunk's exponentials kept against its own maximum, rescaled once at the end
    parts, maxima, row_max = [], [], None
    for s in range(0, x.shape[-1], block_size):
        chunk = x[..., s:s + block_size]
        chunk_max = chunk.amax(dim=-1, keepdim=True)
        parts.append(torch.exp(chunk - chunk_max))
        maxima.append(chunk_max)
        row_max = chunk_max if row_max is None else torch.maximum(row_max, chunk_max)
    row_sum = sum(p.sum(dim=-1, keepdim=True) * torch.exp(m - row_max)
                  for p, m in zip(parts, maxima))
    return torch.cat([p * (torch.exp(m - row_max) / row_sum) for p, m in zip(parts, maxima)],
                     dim=-1)
''',
    "tiled_solution": '''def tiled_attention(q, k, v, block_size, causal=False):
    dtype = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    outs = []
    for qs in range(0, T_q, block_size):                 # blocks of queries too
        q_i = q[:, :, qs:qs + block_size] * scale
        n_q = q_i.shape[-2]
        mx = torch.full((*q_i.shape[:-1], 1), float("-inf"), dtype=torch.float64)
        total = torch.zeros_like(mx)
        acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=torch.float64)
        for ks in range(0, T_k, block_size):
            if causal and ks > qs + n_q - 1:
                break                                    # every later key is hidden
            e = q_i @ k[:, :, ks:ks + block_size].transpose(-2, -1)
            if causal:
                rows = torch.arange(qs, qs + n_q)[:, None]
                cols = torch.arange(ks, ks + e.shape[-1])[None, :]
                e = torch.where(cols <= rows, e, torch.tensor(float("-inf"), dtype=e.dtype))
            new = torch.maximum(mx, e.amax(dim=-1, keepdim=True))
            p = torch.exp(e - new)
            fix = torch.exp(mx - new)
            total = total * fix + p.sum(dim=-1, keepdim=True)
            acc = acc * fix + p @ v[:, :, ks:ks + block_size]
            mx = new
        outs.append(acc / total)
    return torch.cat(outs, dim=2).to(dtype)
''',
    "repeat_kv_solution": '''def repeat_kv(kv, group):
    return kv[:, torch.arange(kv.shape[1] * group) // group]
''',
    "gqa_step_solution": '''def gqa_step(x_new, cache, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    d_k = W_q.shape[1] // n_heads
    group = n_heads // n_kv_heads
    k = torch.cat([cache["k"], torch.stack((x_new @ W_k).split(d_k, dim=-1), dim=1)], dim=2)
    v = torch.cat([cache["v"], torch.stack((x_new @ W_v).split(d_k, dim=-1), dim=1)], dim=2)
    heads = []
    for r in range(n_heads):                      # one query head at a time
        q_r = x_new @ W_q[:, r * d_k:(r + 1) * d_k]            # (B, 1, d_k)
        k_g, v_g = k[:, r // group], v[:, r // group]          # (B, t + 1, d_k)
        e = q_r @ k_g.transpose(1, 2) / math.sqrt(d_k)
        w = torch.exp(e - e.amax(dim=-1, keepdim=True))
        heads.append((w / w.sum(dim=-1, keepdim=True)) @ v_g)
    return torch.cat(heads, dim=-1) @ W_o, {"k": k, "v": v}
''',
}

LOGSUMEXP = {
    "online_softmax_solution": '''def softmax_stats(x, block_size):
    lse = row_max = None
    for s in range(0, x.shape[-1], block_size):
        chunk = x[..., s:s + block_size]
        chunk_lse = torch.logsumexp(chunk, dim=-1, keepdim=True)
        chunk_max = chunk.amax(dim=-1, keepdim=True)
        lse = chunk_lse if lse is None else torch.logaddexp(lse, chunk_lse)
        row_max = chunk_max if row_max is None else torch.maximum(row_max, chunk_max)
    return row_max, torch.exp(lse - row_max)


def online_softmax(x, block_size):
    row_max, row_sum = softmax_stats(x, block_size)
    return torch.exp(x - (row_max + torch.log(row_sum)))
''',
    "tiled_solution": '''def tiled_attention(q, k, v, block_size, causal=False):
    # the running log-sum-exp; the output is kept normalised after every block
    T_q = q.shape[-2]
    lse = q.new_full((*q.shape[:-1], 1), float("-inf"))
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    for s in range(0, k.shape[-2], block_size):
        e = q @ k[:, :, s:s + block_size].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            hidden = torch.arange(s, s + e.shape[-1])[None, :] > torch.arange(T_q)[:, None]
            e = e.masked_fill(hidden, float("-inf"))
        new_lse = torch.logaddexp(lse, torch.logsumexp(e, dim=-1, keepdim=True))
        out = out * torch.exp(lse - new_lse) + torch.exp(e - new_lse) @ v[:, :, s:s + block_size]
        lse = new_lse
    return out
''',
    "repeat_kv_solution": '''def repeat_kv(kv, group):
    return kv.unsqueeze(2).repeat(1, 1, group, 1, 1).flatten(1, 2)
''',
    "gqa_step_solution": '''def gqa_step(x_new, cache, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    B = x_new.shape[0]
    d_k = W_q.shape[1] // n_heads

    def split(y, heads):                          # (B, 1, heads d_k) -> (B, heads, 1, d_k)
        return y.view(B, 1, heads, d_k).transpose(1, 2)

    q = split(x_new @ W_q, n_heads)
    k = torch.cat([cache["k"], split(x_new @ W_k, n_kv_heads)], dim=2)
    v = torch.cat([cache["v"], split(x_new @ W_v, n_kv_heads)], dim=2)
    group = n_heads // n_kv_heads
    weights = online_softmax(q @ repeat_kv(k, group).transpose(2, 3) / d_k ** 0.5, 1)
    heads = (weights @ repeat_kv(v, group)).transpose(1, 2).reshape(B, 1, n_heads * d_k)
    return heads @ W_o, {"k": k, "v": v}
''',
}

CORRECT = {"solution": {}, "two_pass": TWO_PASS, "query_blocks_float64": QUERY_BLOCKS_FLOAT64,
           "logsumexp": LOGSUMEXP}

# ---------------------------------------------------------------- mistakes
# Each is the solution with one function replaced by a realistic wrong one: (cells,
# the test cells it must fail, "visible" or "hidden": the part of those cells that catches it).

STATS_HEAD = """def softmax_stats(x, block_size):
    row_max = row_sum = None
    for start in range(0, x.shape[-1], block_size):
        chunk = x[..., start:start + block_size]
        chunk_max = chunk.amax(dim=-1, keepdim=True)
        if row_max is None:
            row_max = chunk_max
            row_sum = torch.exp(chunk - chunk_max).sum(dim=-1, keepdim=True)
            continue
        new_max = torch.maximum(row_max, chunk_max)
"""
STATS_UPDATE = """        row_sum = (row_sum * torch.exp(row_max - new_max)
                   + torch.exp(chunk - new_max).sum(dim=-1, keepdim=True))
        row_max = new_max
"""
ONLINE_SOFTMAX = """

def online_softmax(x, block_size):
    row_max, row_sum = softmax_stats(x, block_size)
    return torch.exp(x - row_max) / row_sum
"""


def stats(update, online=ONLINE_SOFTMAX):
    """The solution's softmax_stats with another update of the running pair (and another
    online_softmax)."""
    return {"online_softmax_solution": STATS_HEAD + update + "    return row_max, row_sum\n"
            + online}


TILED_HEAD = """def tiled_attention(q, k, v, block_size, causal=False):
    q = q / math.sqrt(q.shape[-1])
    row_max = q.new_full((*q.shape[:-1], 1), INIT_MAX)
    row_sum = q.new_zeros(row_max.shape)
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    queries = torch.arange(q.shape[-2])[:, None]
    for start in STARTS:
        k_j, v_j = k[:, :, start:start + block_size], v[:, :, start:start + block_size]
        e = q @ k_j.transpose(-2, -1)
        if causal:
            keys = KEYS
            e = e.masked_fill(HIDDEN, float("-inf"))
"""
TILED_UPDATE = """        new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))
        p = torch.exp(e - new_max)
        fix = torch.exp(row_max - new_max)
        row_sum = row_sum * fix + p.sum(dim=-1, keepdim=True)
        out = out * fix + p @ v_j
        row_max = new_max
"""


def tiled(update=TILED_UPDATE, ending="    return out / row_sum\n", hidden="keys > queries",
          keys="torch.arange(start, start + k_j.shape[-2])[None, :]",
          init_max='float("-inf")', starts="range(0, k.shape[-2], block_size)"):
    """The solution's tiled_attention with other pieces."""
    head = (TILED_HEAD.replace("INIT_MAX", init_max).replace("STARTS", starts)
            .replace("KEYS", keys).replace("HIDDEN", hidden))
    return {"tiled_solution": head + update + ending}


GQA_STEP = """def gqa_step(x_new, cache, W_q, W_k, W_v, W_o, n_heads, n_kv_heads):
    B = x_new.shape[0]
    d_k = W_q.shape[1] // n_heads
    q = (x_new @ W_q).reshape(B, n_heads, 1, d_k)
    k = torch.cat([cache["k"], (x_new @ W_k).reshape(B, n_kv_heads, 1, d_k)], dim=2)
    v = torch.cat([cache["v"], (x_new @ W_v).reshape(B, n_kv_heads, 1, d_k)], dim=2)
    group = n_heads // n_kv_heads
    k_all, v_all = REPEATED
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(d_k)
    heads = SOFTMAX @ v_all
    return heads.reshape(B, 1, n_heads * d_k) @ W_o, CACHE
"""


def gqa(repeated="repeat_kv(k, group), repeat_kv(v, group)",
        softmax="online_softmax(scores, scores.shape[-1])", cache='{"k": k, "v": v}'):
    """The solution's gqa_step with other pieces."""
    return {"gqa_step_solution": GQA_STEP.replace("REPEATED", repeated)
            .replace("SOFTMAX", softmax).replace("CACHE", cache)}


MISTAKES = {
    # (a) the running sum not rescaled when the maximum grows
    "a: softmax_stats, the sum not rescaled": (stats("""\
        row_sum = row_sum + torch.exp(chunk - new_max).sum(dim=-1, keepdim=True)
        row_max = new_max
"""), {"stats_test"}, "visible"),
    "a: tiled_attention, nothing rescaled": (tiled("""\
        new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))
        p = torch.exp(e - new_max)
        row_sum = row_sum + p.sum(dim=-1, keepdim=True)
        out = out + p @ v_j
        row_max = new_max
"""), {"tiled_test"}, "visible"),
    "a: tiled_attention, the output rescaled but not the sum": (tiled("""\
        new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))
        p = torch.exp(e - new_max)
        fix = torch.exp(row_max - new_max)
        row_sum = row_sum + p.sum(dim=-1, keepdim=True)
        out = out * fix + p @ v_j
        row_max = new_max
"""), {"tiled_test"}, "visible"),
    # (b) the maximum taken per block and never combined (under the causal mask a block that
    # a row sees nothing of then gives exp(-inf - (-inf)) = NaN: the mask's test fails too)
    "b: softmax_stats, every chunk against its own maximum": (stats("""\
        row_sum = row_sum + torch.exp(chunk - chunk_max).sum(dim=-1, keepdim=True)
        row_max = new_max
"""), {"stats_test"}, "visible"),
    "b: tiled_attention, every block against its own maximum": (tiled("""\
        block_max = e.amax(dim=-1, keepdim=True)
        p = torch.exp(e - block_max)
        row_sum = row_sum + p.sum(dim=-1, keepdim=True)
        out = out + p @ v_j
"""), {"tiled_test", "tiled_causal_test"}, "visible"),
    # (c) a causal mask off by one across a block boundary
    "c: the block's own key index 0, 1, ...": (
        tiled(keys="torch.arange(k_j.shape[-2])[None, :]"), {"tiled_causal_test"}, "visible"),
    "c: u < t instead of u <= t": (tiled(hidden="keys >= queries"), {"tiled_causal_test"},
                                   "visible"),
    "c: blocks of queries and keys, both indexed from 0": (
        {"tiled_solution": QUERY_BLOCKS_FLOAT64["tiled_solution"]
         .replace("torch.arange(qs, qs + n_q)", "torch.arange(n_q)")
         .replace("torch.arange(ks, ks + e.shape[-1])", "torch.arange(e.shape[-1])")},
        {"tiled_causal_test"}, "visible"),
    # (d) key/value heads repeated in the interleaved order
    "d: repeat_kv with kv.repeat": (
        {"repeat_kv_solution": "def repeat_kv(kv, group):\n"
                               "    return kv.repeat(1, group, 1, 1)\n"},
        {"repeat_kv_test"}, "visible"),
    "d: gqa_step repeating with .repeat itself": (
        gqa(repeated="k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)"), {"gqa_step_test"},
        "visible"),
    # the cache holds the n_heads repeated heads instead of the n_kv_heads
    "the cache holds n_heads heads": (gqa(cache='{"k": k_all, "v": v_all}'), {"gqa_step_test"},
                                      "visible"),
    # (e) the output not divided by the final denominator, or by a stale one
    "e: tiled_attention, never divided": (tiled(ending="    return out\n"),
                                          {"tiled_test", "tiled_causal_test"}, "visible"),
    "e: tiled_attention, normalised as it goes, the old part by a stale sum": (tiled("""\
        new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))
        p = torch.exp(e - new_max)
        fix = torch.exp(row_max - new_max)
        new_sum = row_sum * fix + p.sum(dim=-1, keepdim=True)
        out = out * fix + (p @ v_j) / new_sum
        row_sum, row_max = new_sum, new_max
""", ending="    return out\n"), {"tiled_test"}, "visible"),
    "e: online_softmax, each chunk by the statistics so far": (stats(STATS_UPDATE, """

def online_softmax(x, block_size):
    parts, row_max, row_sum = [], None, None
    for s in range(0, x.shape[-1], block_size):
        chunk = x[..., s:s + block_size]
        chunk_max = chunk.amax(dim=-1, keepdim=True)
        new_max = chunk_max if row_max is None else torch.maximum(row_max, chunk_max)
        old = 0 if row_sum is None else row_sum * torch.exp(row_max - new_max)
        row_sum = old + torch.exp(chunk - new_max).sum(dim=-1, keepdim=True)
        row_max = new_max
        parts.append(torch.exp(chunk - row_max) / row_sum)
    return torch.cat(parts, dim=-1)
"""), {"online_softmax_test"}, "visible"),
    # (f) a mask that lets a query see the next token
    "f: query t sees key t + 1": (tiled(hidden="keys > queries + 1"), {"tiled_causal_test"},
                                  "visible"),
    # other slips
    "the last, shorter block dropped": (tiled(starts="range(0, k.shape[-2] - block_size + 1, "
                                                     "block_size)"),
                                        {"tiled_test", "tiled_causal_test"}, "visible"),
    "softmax_stats without keepdim": (stats(STATS_UPDATE + "    row_max, row_sum = "
                                                           "row_max[..., 0], row_sum[..., 0]\n"),
                                      {"stats_test"}, "visible"),
    "the running maximum starts at 0": (tiled(init_max="0.0"), {"tiled_test"}, "hidden"),
    "scaled by sqrt(d_v)": ({"tiled_solution": TWO_PASS["tiled_solution"].replace(
        "scale = q.shape[-1] ** -0.5", "scale = v.shape[-1] ** -0.5")},
        {"tiled_test", "tiled_causal_test"}, "hidden"),
    # shortcuts: what the hidden tests switch off
    "online_softmax calls torch.softmax": (
        stats(STATS_UPDATE, "\n\ndef online_softmax(x, block_size):\n"
                            "    return torch.softmax(x, dim=-1)\n"),
        {"online_softmax_test"}, "hidden"),
    "tiled_attention: torch.softmax on the whole row": ({"tiled_solution": """\
def tiled_attention(q, k, v, block_size, causal=False):
    e = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        e = e.masked_fill(torch.ones(e.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(e, dim=-1) @ v
"""}, {"tiled_test", "tiled_causal_test"}, "hidden"),
    "tiled_attention: F.scaled_dot_product_attention": ({"tiled_solution": """\
def tiled_attention(q, k, v, block_size, causal=False):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
"""}, {"tiled_test", "tiled_causal_test"}, "hidden"),
    # right values, but the whole (T_q, T_k) matrix at once and block_size ignored: the
    # hidden test on 20,000 positions needs 3.2 GB for it, more than a graded kernel has
    "tiled_attention: the whole matrix of scores at once": ({"tiled_solution": """\
def tiled_attention(q, k, v, block_size, causal=False):
    e = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        e = e.masked_fill(torch.ones(e.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    w = torch.exp(e - e.amax(dim=-1, keepdim=True))
    return (w / w.sum(dim=-1, keepdim=True)) @ v
"""}, {"tiled_test"}, "hidden"),
    "gqa_step calls torch.softmax": (gqa(softmax="torch.softmax(scores, dim=-1)"),
                                     {"gqa_step_test"}, "hidden"),
}

def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


NB = nbformat.read(NOTEBOOK, as_version=4)
SETUP = next(c.source for c in NB.cells if _meta(c).get("grade_id") == "setup")
SOLUTIONS = {_meta(c)["grade_id"]: re.sub(r"\s*### (BEGIN|END) SOLUTION", "", c.source)
             for c in NB.cells if _meta(c).get("solution")}
TESTS = [(_meta(c)["grade_id"], _meta(c)["points"], c.source) for c in NB.cells
         if _meta(c).get("grade") and not _meta(c).get("solution")]
RELEASED = [re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "raise NotImplementedError()",
                   c.source, flags=re.S) for c in NB.cells if _meta(c).get("solution")]


@pytest.fixture(scope="module")
def kernel(graded_memory_kernel):
    return graded_memory_kernel


def grade(kernel, replaced: dict) -> dict:
    """{test cell: (its points, the checker's verdict)} for the submission whose solution
    cells are the solution's, those in `replaced` replaced."""
    km, kc = kernel
    code = "\n\n".join(replaced.get(gid, source) for gid, source in SOLUTIONS.items())
    reply = kc.execute_interactive(f"%reset -f\n{SETUP}\n\n{code}", timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    link = KernelLink(km.connection_file)
    try:
        runner = CellRunner(link, student_names(RELEASED))
        assert runner.run_setup(SETUP) == {"ok": True}
        return {gid: (points, runner.run_test(
            source, sorted(hidden_line_numbers(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")),
            120)) for gid, points, source in TESTS}
    finally:
        link.kc.stop_channels()


def test_the_cases_cover_every_test_cell_and_the_points_are_fifteen():
    assert sum(points for _, points, _ in TESTS) == 15
    failing = set().union(*(cells for _, cells, _ in MISTAKES.values()))
    assert failing == {gid for gid, _, _ in TESTS}


@pytest.mark.parametrize("name", CORRECT)
def test_a_correct_solution_gets_full_marks(kernel, name):
    verdicts = grade(kernel, CORRECT[name])
    failed = {gid: v["message"][:300] for gid, (_, v) in verdicts.items() if not v["passed"]}
    assert not failed, failed


@pytest.mark.parametrize("name", MISTAKES)
def test_a_mistake_loses_the_points_of_the_cells_it_breaks_and_no_more(kernel, name):
    replaced, cells, caught_by = MISTAKES[name]
    verdicts = grade(kernel, replaced)
    failed = {gid for gid, (_, v) in verdicts.items() if not v["passed"]}
    assert failed == cells, {gid: verdicts[gid][1]["message"][:300] for gid in failed}
    score = sum(points for points, v in verdicts.values() if v["passed"])
    assert score == 15 - sum(verdicts[gid][0] for gid in cells)
    hidden = {gid: verdicts[gid][1]["message"].startswith("A hidden test failed")
              for gid in cells}
    assert set(hidden.values()) == {caught_by == "hidden"}, hidden
