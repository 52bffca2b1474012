"""`make bench`, second part: the course's attention and Transformer against PyTorch's, measured
in one run.

One forward and backward of `course_utils.multihead.MultiHeadAttention` divided by that of
`torch.nn.MultiheadAttention` with the same weights (B = 32, T = 128, d_model = 256, 8 heads,
self-attention, float32): against PyTorch called as by default (weights averaged over heads),
with the per-head weights the course's module returns, and without weights (PyTorch's fused
kernel). Then one training step (forward, cross-entropy, backward, Adam) of the course's
`transformer.Transformer` divided by that of the same model around `torch.nn.Transformer`
(B = 32, S = T = 32, d_model = 128, 8 heads, d_ff = 512, 2 + 2 layers, V = 1000, padding and
causal masks). Then MiniLM-L6's forward pass in the course's `bert.Bert` divided by that of
`transformers`' BertModel (eager attention, which returns the weights as ours does) on the same
weights and input (B = 16 sentences padded to T = 64, float32, no gradient). Last, unit 09:
the forward of tiled attention (`tiled_attention.tiled_attention`, key blocks of 128) against
the matrix form (`tiled_attention.matrix_attention`, and unit 04's
`attention.scaled_dot_product_attention`, which also returns the weights) at T = 1024, 2048
and 4096 (B = 1, 4 heads, d_k = 64, float32, no gradient): the peak memory of each call
(`attention_cost.peak_memory`) beside the arithmetic B n_heads T^2 4 bytes of one score
matrix, the time, and the tiled form's peak and time over the matrix form's.

Every comparison is timed in interleaved rounds (ours, theirs, ours, theirs, ...; after a
warm-up), and its ratio is the median of the rounds' ratios with their quartiles beside it:
a load that comes and goes weighs on both sides of a round alike, so the verdict holds on a
busy machine, where timing one side after the other read 0.70, 1.32 and 1.72 for the same
Transformer. One thread per side (`--threads N` for more). Prints figures; asserts nothing.

    python .ci/benchmark_attention.py [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn as nn
from transformers import BertModel

from course_utils.attention import scaled_dot_product_attention
from course_utils.attention_cost import format_bytes, matrix_bytes, peak_memory
from course_utils.bert import load_minilm, minilm_files
from course_utils.data.vocab import PAD_ID
from course_utils.multihead import MultiHeadAttention
from course_utils.positional import sinusoidal_encoding
from course_utils.seq2seq import padded_cross_entropy
from course_utils.tiled_attention import matrix_attention, tiled_attention
from course_utils.transformer import (
    Transformer,
    TransformerConfig,
    causal_mask,
    padding_mask,
    padding_mask_from_ids,
)

B, T, D_MODEL, N_HEADS = 32, 128, 256, 8
ROUNDS = 15
WARMUP = 3
GOAL = 1.5


def interleaved(sides: dict[str, Callable[[], object]], rounds: int,
                warmup: int = WARMUP) -> dict[str, list[float]]:
    """The seconds of each side's call in each of `rounds` rounds, the sides called in turn
    within a round (after `warmup` untimed rounds): {name: [seconds of round 1, 2, ...]}."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(warmup + rounds):
        for name, call in sides.items():
            start = time.perf_counter()
            call()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def ratio_line(mine: list[float], theirs: list[float]) -> str:
    """The median of the rounds' ratios mine/theirs, their quartiles, and the verdict."""
    ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
    low, mid, high = statistics.quantiles(ratios, n=4)
    mark = "ok" if mid <= GOAL else f"over the goal of {GOAL}"
    return f"ratio {mid:4.2f} (quartiles {low:.2f}-{high:.2f}, {len(ratios)} rounds)  {mark}"


def ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1e3:8.1f} ms"


def attention_ratio(rounds: int) -> None:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    x = torch.randn(B, T, D_MODEL, requires_grad=True)

    def step_ours():
        out, _ = ours(x, x, x)
        out.sum().backward()

    def step_theirs(**kwargs):
        def step():
            out, _ = theirs(x, x, x, **kwargs)
            out.sum().backward()
        return step

    variants = {"default (weights averaged)": {},
                "per-head weights": {"average_attn_weights": False},
                "no weights (fused kernel)": {"need_weights": False}}
    times = interleaved({"ours": step_ours,
                         **{label: step_theirs(**kw) for label, kw in variants.items()}},
                        rounds)
    print(f"MultiHeadAttention forward+backward, B={B} T={T} d_model={D_MODEL} "
          f"heads={N_HEADS}, {torch.get_num_threads()} threads")
    print(f"  course_utils.multihead              {ms(times['ours'])}")
    for label in variants:
        print(f"  torch.nn, {label:<26} {ms(times[label])}   "
              f"{ratio_line(times['ours'], times[label])}")


class TorchTransformer(nn.Module):
    """The course's model with torch.nn.Transformer in the middle: the same embeddings,
    positions and output layer, PyTorch's encoder and decoder stacks (post-LN, no dropout)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.register_buffer("positions", sinusoidal_encoding(cfg.n_positions, cfg.d_model))
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.n_layers,
                                   cfg.d_ff, dropout=0.0, batch_first=True)
        self.out = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)

    def loss(self, src, lengths, tgt):
        tgt_in = tgt[:, :-1]
        scale = self.cfg.d_model ** 0.5
        x = self.src_embed(src) * scale + self.positions[: src.shape[1]]
        y = self.tgt_embed(tgt_in) * scale + self.positions[: tgt_in.shape[1]]
        src_pad = ~padding_mask(lengths, src.shape[1])   # PyTorch: True = may NOT attend
        h = self.core(x, y, tgt_mask=~causal_mask(tgt_in.shape[1]),
                      src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                      tgt_key_padding_mask=~padding_mask_from_ids(tgt_in))
        return padded_cross_entropy(self.out(h), tgt[:, 1:])


def transformer_step_ratio(rounds: int) -> None:
    B, S, T, V = 32, 32, 32, 1000
    cfg = TransformerConfig(V, V, d_model=128, n_heads=8, d_ff=512, n_layers=2, max_len=T,
                            n_positions=64)
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(S // 2, S + 1, (B,), generator=gen)
    src = torch.randint(4, V, (B, S), generator=gen).masked_fill(
        ~padding_mask(lengths, S), PAD_ID)
    tgt_lengths = torch.randint(T // 2, T + 2, (B,), generator=gen)
    tgt = torch.randint(4, V, (B, T + 1), generator=gen).masked_fill(
        ~padding_mask(tgt_lengths, T + 1), PAD_ID)
    steps = {}
    for name, model in (("ours", Transformer(cfg)), ("theirs", TorchTransformer(cfg))):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step(model=model, optimizer=optimizer):
            optimizer.zero_grad()
            model.loss(src, lengths, tgt).backward()
            optimizer.step()

        steps[name] = step
    times = interleaved(steps, rounds)
    print(f"Transformer training step, B={B} S=T={S} d_model={cfg.d_model} heads={cfg.n_heads} "
          f"d_ff={cfg.d_ff} layers={cfg.n_layers}+{cfg.n_layers} V={V}")
    print(f"  course_utils.transformer            {ms(times['ours'])}")
    print(f"  torch.nn.Transformer                {ms(times['theirs'])}   "
          f"{ratio_line(times['ours'], times['theirs'])}")


def minilm_forward_ratio(rounds: int) -> None:
    B, T = 16, 64
    ours = load_minilm()
    theirs = BertModel.from_pretrained(str(minilm_files().config.parent),
                                       attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=gen)
    keep = padding_mask(lengths, T)  # (B, T) True at real tokens
    ids = torch.randint(1000, 30000, (B, T), generator=gen).masked_fill(~keep, 0)
    ids[:, 0] = 101  # [CLS]
    with torch.no_grad():
        times = interleaved({
            "ours": lambda: ours(ids, attention_mask=keep),
            "theirs": lambda: theirs(input_ids=ids, attention_mask=keep.long(),
                                     output_attentions=True)}, rounds)
    print(f"MiniLM-L6 forward (attention weights returned), B={B} T={T}, float32, no gradient")
    print(f"  course_utils.bert                   {ms(times['ours'])}")
    print(f"  transformers BertModel (eager)      {ms(times['theirs'])}   "
          f"{ratio_line(times['ours'], times['theirs'])}")


def tiled_attention_cost() -> None:
    B, n_heads, d_k, block = 1, 4, 64, 128
    forms = {"matrix form (unit 09's reference)": matrix_attention,
             "matrix form, unit 04's (+ weights)": lambda q, k, v:
             scaled_dot_product_attention(q, k, v)[0],
             f"tiled, key blocks of {block}": lambda q, k, v: tiled_attention(q, k, v, block)}
    print(f"Attention forward, B={B} n_heads={n_heads} d_k={d_k}, float32, no gradient, "
          f"{torch.get_num_threads()} threads")
    print(f"  {'T':>5} {'form':<36} {'peak memory':>12} {'time':>10}   "
          f"(one score matrix B n_heads T^2 4 bytes)")
    for T in (1024, 2048, 4096):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, n_heads, T, d_k, generator=gen) for _ in range(3))
        with torch.no_grad():
            peaks = {name: peak_memory(form, q, k, v)[1] for name, form in forms.items()}
            times = interleaved({name: functools.partial(form, q, k, v)
                                 for name, form in forms.items()}, rounds=10, warmup=1)
        matrix, _, tiled = forms
        for name in forms:
            note = f"({format_bytes(matrix_bytes(B, n_heads, T, T))})" if name == matrix else ""
            print(f"  {T:>5} {name:<36} {format_bytes(peaks[name]):>12} "
                  f"{ms(times[name])}   {note}")
        ratios = [a / b for a, b in zip(times[tiled], times[matrix], strict=True)]
        low, mid, high = statistics.quantiles(ratios, n=4)
        print(f"  {T:>5} tiled over matrix form: peak memory {peaks[tiled] / peaks[matrix]:.3f}"
              f", time {mid:.2f} (quartiles {low:.2f}-{high:.2f}, {len(ratios)} rounds)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="interleaved rounds per comparison (at least 4)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads per side")
    opts = parser.parse_args(argv)
    if opts.rounds < 4 or opts.threads < 1:
        parser.error("--rounds must be at least 4 (for quartiles) and --threads at least 1")
    torch.set_num_threads(opts.threads)
    attention_ratio(opts.rounds)
    transformer_step_ratio(opts.rounds)
    minilm_forward_ratio(opts.rounds)
    tiled_attention_cost()


if __name__ == "__main__":
    main()
