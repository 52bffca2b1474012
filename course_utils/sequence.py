"""The sequence core that every encoder-decoder of the course shares (units 02-06): the
padded loss, greedy decoding over any step function, and the two metrics.

    padded_cross_entropy  mean cross-entropy over the real (non-<pad>) target positions
    greedy_decode         argmax decoding of a batch, step by step, until <end> or max_len
    exact_match           (B,) bool: the whole output right, <end> included
    token_accuracy        share of the real target positions predicted right

Models hand it tensors and step functions; it knows no data set, tokenizer or model class.
Notation: B batch, T target length, T_out decoded length, n_vocab vocabulary size; ids are
int64 with <pad> = PAD_ID, <start> = START_ID, <end> = END_ID (`course_utils.data.vocab`).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from course_utils._checks import require_float_tensor, require_ids, require_int, shape_str
from course_utils.data.vocab import END_ID, PAD_ID, START_ID

__all__ = ["exact_match", "greedy_decode", "padded_cross_entropy", "token_accuracy"]


# ----------------------------------------------------------------------------- loss

def padded_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = PAD_ID
                         ) -> torch.Tensor:
    """Cross-entropy averaged over the real (non-pad) target tokens of the whole batch:

        loss = - sum_{b,t: y_bt != pad} log softmax(logits_bt)[y_bt] / #{b,t: y_bt != pad}

    A padded position adds nothing to the sum and nothing to the count. (Equal to
    `nn.CrossEntropyLoss(ignore_index=pad_id)` on the flattened tensors.)
    logits: (B, T, n_vocab) float, targets: (B, T) int64 -> scalar.
    """
    require_float_tensor(logits, "logits", "(B, T, n_vocab)", ndim=3)
    require_ids(targets, "targets", "(B, T)", 2)
    if targets.shape != logits.shape[:2]:
        raise ValueError(f"targets must have shape {shape_str(logits.shape[:2])} to match "
                         f"logits {shape_str(logits.shape)}; got {shape_str(targets.shape)}")
    real = targets != pad_id  # (B, T)
    if not real.any():
        raise ValueError("targets hold only padding: there is no token to average over")
    log_p = torch.log_softmax(logits, dim=-1)  # (B, T, n_vocab)
    picked = log_p.gather(2, targets.unsqueeze(2)).squeeze(2)  # (B, T, 1) -> (B, T)
    picked = torch.where(real, picked, 0.0)  # not picked * real: -inf * 0 would be NaN
    return -picked.sum() / real.sum()


# ----------------------------------------------------------------------------- greedy decoding

def greedy_decode(step, state, batch_size: int, *, max_len: int, start_id: int = START_ID,
                  end_id: int = END_ID, pad_id: int = PAD_ID, return_weights: bool = False):
    """Greedy decoding: start from <start>, feed back the argmax, stop at <end>.

        y_0 = <start>;  logits, s_t = step(y_{t-1}, s_{t-1});  y_t = argmax logits

    `step(y_prev (B,), state) -> (logits (B, n_vocab), state)` or `(logits, state, weights (B, S))`.
    Each row stops at its own first <end>: the <end> is kept and every later position is
    <pad>. The loop stops when every row has ended, or after `max_len` steps.

    Returns ids (B, T_out) int64 with T_out <= max_len; with `return_weights`, (ids, weights) where
    weights is (B, T_out, S) if `step` returned weights, else None.
    """
    require_int(max_len, "max_len")
    require_int(batch_size, "batch_size")
    y = torch.full((batch_size,), start_id, dtype=torch.long)  # (B,)
    done = torch.zeros(batch_size, dtype=torch.bool)  # (B,) has this row written <end>?
    outputs, weights = [], []
    for _ in range(max_len):
        result = step(y, state)
        logits, state = result[0], result[1]  # (B, n_vocab), new state
        if logits.shape[0] != batch_size or logits.dim() != 2:
            raise ValueError(f"step must return logits of shape ({batch_size}, n_vocab); "
                             f"got {shape_str(logits.shape)}")
        if len(result) > 2 and result[2] is not None:
            weights.append(result[2])  # (B, S)
        y = logits.argmax(dim=-1)  # (B,) the model's own choice is the next input
        outputs.append(torch.where(done, torch.full_like(y, pad_id), y))  # (B,)
        done = done | (y == end_id)
        if bool(done.all()):
            break
    ids = torch.stack(outputs, dim=1)  # T_out x (B,) -> (B, T_out)
    if not return_weights:
        return ids
    return ids, (torch.stack(weights, dim=1) if weights else None)  # (B, T_out, S)


# ----------------------------------------------------------------------------- metrics

def _align_widths(pred: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both padded with <pad> on the right to the wider of the two, T' = max(T_out, T):
    (B, T'), (B, T')."""
    require_ids(pred, "pred", "(B, T_out)", 2)
    require_ids(gold, "gold", "(B, T)", 2)
    if pred.shape[0] != gold.shape[0]:
        raise ValueError(f"pred and gold must have the same batch size; got "
                         f"{shape_str(pred.shape)} and {shape_str(gold.shape)}")
    width = max(pred.shape[1], gold.shape[1])
    pad = lambda x: nn.functional.pad(x, (0, width - x.shape[1]), value=PAD_ID)  # noqa: E731
    return pad(pred), pad(gold)  # (B, T'), (B, T')


def exact_match(pred: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Per sequence: is the prediction equal to the gold target up to and including <end>,
    with nothing but <pad> after it?

    Both are padded with <pad> to the same width and compared at every position, so a
    prediction that is right up to <end> but has other tokens after it does not count
    (`greedy_decode` writes only <pad> after <end>, so its output is never penalised for
    this); nor does one that stops early or never writes <end>.
    pred (B, T_out) from `greedy_decode`, gold (B, T) = y_1 .. y_n <end> <pad>.. -> (B,) bool.
    """
    p, g = _align_widths(pred, gold)
    return (p == g).all(dim=1)  # (B, T') -> (B,)


def token_accuracy(pred: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of the real gold tokens (<end> included, <pad> not) that the prediction has
    right at the same position:  #{b,t: gold_bt != pad, pred_bt = gold_bt} / #{gold_bt != pad}.

    Positions where gold is <pad> are not counted, so (unlike `exact_match`) tokens a
    prediction writes after the gold <end> cost nothing here.
    """
    p, g = _align_widths(pred, gold)
    real = g != PAD_ID  # (B, T')
    if not real.any():
        raise ValueError("gold holds only padding: there is no token to score")
    return float(((p == g) & real).sum() / real.sum())
