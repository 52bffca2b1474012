"""The assembled translator of units 02-04: encoder + either decoder, trained and evaluated.

    model = Seq2Seq(config_for(task, d_h=64, attention="additive", bidirectional=True))
    history = train(model, train_data, epochs=6, batch_size=128, lr=1e-2, schedule="linear")
    correct = evaluate(model, test_data)          # (N,) bool, exact match of greedy decoding
    ids, weights = model.translate(src, lengths, return_weights=True)

`Seq2SeqConfig(attention=None)` gives unit 02's decoder (`seq2seq.Decoder`), a score name
gives unit 03's (`attention_decoder.AttentionDecoder`, or `attention_decoder.LuongDecoder` with
`decoder="luong"`); `train` is `training.fit` with minibatch epochs and teacher forcing;
`seconds_per_step` times one training step of a copy of a model (a Transformer too);
`attention_scores` gives the raw scores of every teacher-forced step beside its weights.
`config_for(task, ...)` fills a model config's vocabulary sizes from a translation task, for
the RNN (Seq2SeqConfig, the default) and for the Transformer (`config_for(task,
TransformerConfig, d_model=48, ...)`): the models themselves know nothing of the task.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn

from course_utils._checks import require_int
from course_utils.attention_decoder import AttentionDecoder, LuongDecoder
from course_utils.data.translation import TranslationTask
from course_utils.data.vocab import Vocabulary, minibatches
from course_utils.seq2seq import Decoder, Encoder, Seq2SeqConfig
from course_utils.sequence import exact_match, greedy_decode, padded_cross_entropy
from course_utils.training import History, fit, seconds_per_call

__all__ = ["Seq2Seq", "attention_scores", "config_for", "evaluate", "seconds_per_step", "train"]


def config_for(task: TranslationTask, config_class: type = Seq2SeqConfig, **fields):
    """A `config_class` (Seq2SeqConfig or transformer.TransformerConfig) for `task` (a
    `translation.TranslationTask`): src_vocab_size and tgt_vocab_size from the task's
    vocabularies, every other field from `fields`.

        config_for(task, d_h=64, attention="additive", bidirectional=True, max_len=30)
        config_for(task, TransformerConfig, d_model=48, n_heads=4, d_ff=96, n_layers=2)
    """
    vocabs = (getattr(task, "src_vocab", None), getattr(task, "tgt_vocab", None))
    if not all(isinstance(v, Vocabulary) for v in vocabs):
        raise ValueError(f"task must be a translation.TranslationTask (with src_vocab and "
                         f"tgt_vocab); got {type(task).__name__}")
    if not isinstance(config_class, type) or \
            not {"src_vocab_size", "tgt_vocab_size"} <= set(
                getattr(config_class, "__dataclass_fields__", ())):
        raise ValueError(f"config_class must be a config dataclass with src_vocab_size and "
                         f"tgt_vocab_size (Seq2SeqConfig, TransformerConfig); got "
                         f"{config_class!r}")
    given = sorted({"src_vocab_size", "tgt_vocab_size"} & set(fields))
    if given:
        raise ValueError(f"config_for takes the vocabulary sizes from the task; do not pass "
                         f"{', '.join(given)}")
    return config_class(src_vocab_size=len(task.src_vocab), tgt_vocab_size=len(task.tgt_vocab),
                        **fields)


class Seq2Seq(nn.Module):
    """Encoder + decoder. `forward` is teacher forcing, `translate` greedy decoding."""

    def __init__(self, config: Seq2SeqConfig, decoder: nn.Module | None = None):
        super().__init__()
        if not isinstance(config, Seq2SeqConfig):
            raise ValueError(f"config must be a Seq2SeqConfig; got {type(config).__name__}")
        self.config = config
        self.encoder = Encoder(config)
        if decoder is None:
            if config.attention is None:
                decoder = Decoder(config)
            else:
                decoder = (LuongDecoder(config) if config.decoder == "luong"
                           else AttentionDecoder(config))
        self.decoder = decoder

    def forward(self, src, lengths, tgt_in) -> torch.Tensor:
        """src (B, S), lengths (B,), tgt_in (B, T) -> logits (B, T, n_vocab)."""
        return self.decoder(tgt_in, self.encoder(src, lengths))

    def loss(self, src, lengths, tgt) -> torch.Tensor:
        """tgt (B, T + 1) = <start> y_1 .. y_n <end> <pad>..: read tgt[:, :-1], predict
        tgt[:, 1:], padded cross-entropy (a scalar)."""
        logits = self(src, lengths, tgt[:, :-1])  # (B, T, n_vocab)
        return padded_cross_entropy(logits, tgt[:, 1:])

    @torch.no_grad()
    def translate(self, src, lengths, max_len: int | None = None, return_weights=False):
        """Greedy decoding of a batch: ids (B, T_out) (and weights (B, T_out, S) or None)."""
        enc = self.encoder(src, lengths)
        s0 = self.decoder.init_state(enc)  # (B, d_h)
        return greedy_decode(lambda y, s: self.decoder.step(y, s, enc), s0, src.shape[0],
                             max_len=self.config.max_len if max_len is None else max_len,
                             return_weights=return_weights)


def train(model: Seq2Seq, data, *, epochs: int, batch_size: int = 64, lr: float = 3e-3,
          generator: torch.Generator | None = None, clip: float | None = 1.0, eval_data=None,
          desc: str = "training", progress: bool = True, schedule: str = "constant"
          ) -> History:
    """Train with Adam and teacher forcing on `data` (a `translation.TranslationBatch`):
    `training.fit` with `model.loss` as the loss.

    Each epoch visits every example once in minibatches drawn with `generator`; gradients
    are clipped to norm `clip` (None: no clipping). `schedule="linear"` lowers the learning
    rate linearly from lr at the first step to lr / n_steps at the last (large steps early,
    small ones to settle at the end). After each epoch, if `eval_data` is given, the
    exact-match accuracy of greedy decoding on it is recorded as the metric "exact_match".
    Returns the History: `.loss` every step, `.epoch_loss()` per epoch,
    `.metrics["exact_match"]` per epoch (at `.eval_step`).
    """
    epochs = require_int(epochs, "epochs")
    batch_size = require_int(batch_size, "batch_size")
    if len(data) == 0:
        raise ValueError("data holds no example to train on")
    steps_per_epoch = math.ceil(len(data) / batch_size)
    batches = (data[index] for _ in range(epochs)
               for index in minibatches(len(data), batch_size, generator=generator))
    evaluate_fn = None
    if eval_data is not None:
        def evaluate_fn(model):
            return {"exact_match": float(evaluate(model, eval_data).float().mean())}
    return fit(model, lambda model, batch: model.loss(batch.src, batch.src_lengths, batch.tgt),
               batches, n_steps=epochs * steps_per_epoch, lr=lr, schedule=schedule, clip=clip,
               evaluate=evaluate_fn, eval_every=steps_per_epoch if eval_data is not None else 0,
               steps_per_epoch=steps_per_epoch, progress=progress, desc=desc)


def evaluate(model: Seq2Seq, data, batch_size: int = 1000) -> torch.Tensor:
    """Exact match of greedy decoding for every example of `data` (a TranslationBatch):
    (N,) bool, in the order of `data`."""
    longest = data.tgt.shape[1] - 1  # y_1 .. y_n <end>, without <start>
    config = getattr(model, "config", None)
    if config is not None and longest > config.max_len:
        raise ValueError(f"the longest target has {longest} tokens (with <end>) but greedy "
                         f"decoding stops after max_len = {config.max_len}: raise "
                         f"Seq2SeqConfig.max_len to at least {longest}")
    model.eval()
    correct = []
    for index in minibatches(len(data), batch_size, shuffle=False):
        batch = data[index]
        pred = model.translate(batch.src, batch.src_lengths)  # (B, T)
        correct.append(exact_match(pred, batch.tgt[:, 1:]))  # (b,)
    return torch.cat(correct)  # (N,)


def seconds_per_step(model: nn.Module, batch, repeats: int = 7) -> float:
    """The median wall time of one training step (forward, backward, an Adam update) of a copy
    of `model` (anything with `loss(src, src_lengths, tgt)`: a Seq2Seq, a Transformer) on
    `batch`, a TranslationBatch; the model itself is left untouched. Measured on this
    machine, now: it varies between machines and runs."""
    if not callable(getattr(model, "loss", None)):
        raise ValueError(f"model must have a loss(src, src_lengths, tgt) method, as Seq2Seq "
                         f"and Transformer do; got {type(model).__name__}")
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        loss = model.loss(batch.src, batch.src_lengths, batch.tgt)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return seconds_per_call(step, repeats)


def attention_scores(model: Seq2Seq, src, lengths, tgt_in) -> tuple[torch.Tensor, ...]:
    """Teacher forcing through a Bahdanau decoder (`AttentionDecoder`): for every step t' the
    raw scores e of the query that step used, s_{t'-1}, against every encoder state, beside
    the step's weights: (e (B, T, S), alpha (B, T, S), source mask (B, S) bool, True = real
    word). alpha is 0 on padding; e there is what the score function gives (mask it before
    taking a max or a min)."""
    if not isinstance(model, Seq2Seq) or not isinstance(model.decoder, AttentionDecoder):
        raise ValueError(f"model must be a Seq2Seq with Bahdanau's AttentionDecoder (a score "
                         f"name, decoder='bahdanau'); got "
                         f"{type(getattr(model, 'decoder', model)).__name__}")
    attention = model.decoder.attention
    queries = []  # s_{t'-1} of every step, as the attention module receives it
    hook = attention.register_forward_pre_hook(lambda module, args: queries.append(args[0]))
    try:
        with torch.no_grad():
            enc = model.encoder(src, lengths)  # states (B, S, d_enc), mask (B, S)
            _, weights = model.decoder(tgt_in, enc, return_weights=True)  # (B, T, S)
    finally:
        hook.remove()
    with torch.no_grad():
        scores = torch.stack([attention.scores(q, enc.states) for q in queries], dim=1)
    return scores, weights, enc.mask  # (B, T, S), (B, T, S), (B, S)
