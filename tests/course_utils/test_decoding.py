"""course_utils.decoding: beam search (K = 1 is greedy decoding; it finds what greedy misses on
a hand-built model; finished hypotheses are kept; the cache changes nothing), sampling
(reproducible with a seeded generator, greedy at temperature -> 0, top-k), sequence scores,
decoders compared against greedy search (search errors found and fixed, model errors), and
errors for bad input."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils import seed_everything
from course_utils.data import translation
from course_utils.data.vocab import END_ID, PAD_ID, START_ID
from course_utils.decoding import (
    beam_decode,
    beam_search,
    compare_decoders,
    length_normaliser,
    sample,
    sample_next,
    sequence_log_prob,
)
from course_utils.seq2seq import exact_match, greedy_decode
from course_utils.transformer import Transformer, TransformerConfig
from course_utils.translator import config_for, train

A, B, C = 4, 5, 6  # three ordinary tokens of a hand-built model with V = 7


# ----------------------------------------------------------------------------- a hand-built model

def table_model(table: dict[tuple[int, ...], dict[int, float]], V: int = 7):
    """A "model" given by its next-token probabilities: table[prefix] = {token: p}, where
    prefix is the tuple of tokens written so far (without <start>); prefixes not in the table
    end for certain. The state is the (rows, t) tensor of tokens read so far, <start> first.
    Returns (step, reorder) for `greedy_decode` and `beam_decode`."""

    def step(y_prev, read):
        read = torch.cat([read, y_prev[:, None]], dim=1)  # (rows, t + 1)
        logits = torch.full((len(read), V), -math.inf)
        for row, ids in enumerate(read.tolist()):
            for token, p in table.get(tuple(ids[1:]), {END_ID: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits, read

    def reorder(read, rows):
        return read[rows]

    return step, reorder


def run_beam(table, K, rows=1, max_len=6, **kwargs):
    step, reorder = table_model(table)
    return beam_decode(step, torch.empty(rows * K, 0, dtype=torch.long), rows, K,
                       max_len=max_len, reorder=reorder, return_scores=True, **kwargs)


def run_greedy(table, rows=1, max_len=6):
    step, _ = table_model(table)
    return greedy_decode(step, torch.empty(rows, 0, dtype=torch.long), rows, max_len=max_len)


# greedy takes A (0.6), then at best 0.4: 0.24 in all; B then <end> is 0.4 x 0.9 = 0.36
TRAP = {(): {A: 0.6, B: 0.4},
        (A,): {END_ID: 0.4, B: 0.3, C: 0.3},
        (B,): {END_ID: 0.9, C: 0.1}}


def test_beam_search_finds_the_more_probable_output_that_greedy_misses():
    greedy = run_greedy(TRAP)
    assert greedy.tolist() == [[A, END_ID]]
    ids, scores = run_beam(TRAP, K=2)
    assert ids.tolist() == [[B, END_ID]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.36)]))
    ids, scores = run_beam(TRAP, K=1)  # a beam of one is greedy
    assert ids.tolist() == [[A, END_ID]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.24)]))


def test_a_finished_hypothesis_is_kept_while_others_go_on():
    # after one step A (0.5) leads <end> (0.3); every continuation of A has p <= 0.25, so the
    # short finished hypothesis, kept in the beam, must win; greedy writes A A A ...
    table = {(): {A: 0.5, END_ID: 0.3, B: 0.2}}
    table.update({(A,) * n: {A: 0.5, B: 0.5} for n in range(1, 8)})
    assert run_greedy(table, max_len=5).tolist() == [[A] * 5]
    ids, scores = run_beam(table, K=2, max_len=5)
    assert ids.tolist() == [[END_ID]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.3)]))
    ids, _ = run_beam(table, K=2, rows=3, max_len=5)  # every sentence of a batch
    assert ids.tolist() == [[END_ID]] * 3


def test_a_finished_hypothesis_beats_a_live_one_of_the_same_probability():
    table = {(): {A: 0.5, B: 0.5}, (A,): {END_ID: 1.0}, (B,): {C: 1.0}, (B, C): {C: 1.0},
             (B, C, C): {C: 1.0}}
    ids, _ = run_beam(table, K=2, max_len=3)
    assert ids.tolist() == [[A, END_ID]]  # B C C has the same p but never ends


def test_length_penalty_is_wu_et_al_and_can_favour_a_longer_output():
    assert torch.allclose(length_normaliser(torch.tensor([1, 5]), 0.0), torch.ones(2))
    torch.testing.assert_close(length_normaliser(torch.tensor([1, 7]), 1.0),
                               torch.tensor([1.0, 2.0]))
    # <end> now: log 0.5 / lp(1); A B <end>: log 0.4 / lp(3), better once alpha is large
    table = {(): {END_ID: 0.5, A: 0.5}, (A,): {B: 0.9, END_ID: 0.1},
             (A, B): {END_ID: 0.9, C: 0.1}}
    assert run_beam(table, K=2)[0].tolist() == [[END_ID]]
    ids, scores = run_beam(table, K=2, length_penalty=2.0)
    assert ids.tolist() == [[A, B, END_ID]]
    torch.testing.assert_close(scores, torch.tensor([math.log(0.5 * 0.9 * 0.9)]))  # log p


# ----------------------------------------------------------------------------- the Transformer

@pytest.fixture(scope="module")
def task():
    return translation.make_task(n_train=300, n_test=40, seed=0, max_numbers=3)


@pytest.fixture(scope="module")
def trained(task):
    """A small Transformer trained briefly: confident in places, unsure in others."""
    generator = seed_everything(0)
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                   norm_first=True, max_len=12))
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    train(model, data, epochs=2, batch_size=32, lr=1e-2, generator=generator, progress=False)
    return model.eval()


@pytest.fixture(scope="module")
def test_batch(task):
    return translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_of_one_is_greedy_decoding_exactly(trained, test_batch, use_cache):
    greedy = trained.translate(test_batch.src, test_batch.src_lengths)
    beam = beam_search(trained, test_batch.src, test_batch.src_lengths, 1, use_cache=use_cache)
    assert torch.equal(beam, greedy)


def test_beam_search_with_and_without_the_cache_agree(trained, test_batch):
    src, lengths = test_batch.src, test_batch.src_lengths
    with_cache, s1 = beam_search(trained, src, lengths, 3, return_scores=True)
    without, s2 = beam_search(trained, src, lengths, 3, use_cache=False, return_scores=True)
    assert torch.equal(with_cache, without)
    torch.testing.assert_close(s1, s2, atol=1e-4, rtol=0)


def test_beam_scores_are_the_log_probabilities_of_the_outputs(trained, test_batch):
    src, lengths = test_batch.src, test_batch.src_lengths
    greedy = trained.translate(src, lengths)
    for K in (2, 4):
        ids, scores = beam_search(trained, src, lengths, K, return_scores=True)
        assert ids.dtype == torch.long and ids.shape[0] == len(src)
        torch.testing.assert_close(scores, sequence_log_prob(trained, src, lengths, ids),
                                   atol=1e-4, rtol=0)
        # on the whole, a wider search finds outputs at least as probable as greedy's
        assert scores.sum() >= sequence_log_prob(trained, src, lengths, greedy).sum() - 1e-4
        for row in ids.tolist():  # y_1 .. <end>, then only <pad>
            if END_ID in row:
                assert set(row[row.index(END_ID) + 1:]) <= {PAD_ID}


def test_sequence_log_prob_counts_tokens_up_to_the_first_end(trained, test_batch):
    src, lengths = test_batch.src[:2], test_batch.src_lengths[:2]
    ids = torch.tensor([[7, END_ID, PAD_ID, PAD_ID], [7, END_ID, 8, 9]])  # after <end>: ignored
    scores = sequence_log_prob(trained, src, lengths, ids)
    with torch.no_grad():
        log_p = torch.log_softmax(trained(src, lengths, torch.tensor([[START_ID, 7]] * 2)), -1)
    want = log_p[:, 0, 7] + log_p[:, 1, END_ID]
    torch.testing.assert_close(scores, want)


def test_sampling_is_reproducible_with_a_seeded_generator(trained, test_batch):
    src, lengths = test_batch.src, test_batch.src_lengths
    first = sample(trained, src, lengths, generator=torch.Generator().manual_seed(3))
    again = sample(trained, src, lengths, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    hot = [sample(trained, src, lengths, temperature=3.0,
                  generator=torch.Generator().manual_seed(s)) for s in range(2)]
    assert not torch.equal(hot[0], hot[1])  # another seed, other outputs


@pytest.mark.parametrize("temperature", [0.0, 1e-4])
def test_sampling_at_temperature_near_zero_is_greedy(trained, test_batch, temperature):
    src, lengths = test_batch.src, test_batch.src_lengths
    ids = sample(trained, src, lengths, temperature=temperature,
                 generator=torch.Generator().manual_seed(0))
    assert torch.equal(ids, trained.translate(src, lengths))


def test_sample_next_top_k_draws_only_among_the_k_largest():
    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0, 2.8]]).repeat(2000, 1)
    drawn = sample_next(logits, top_k=2, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {1, 2}
    assert sample_next(logits, top_k=1).tolist() == [1] * 2000
    # temperature 1, no top_k: about softmax's frequencies
    share = (sample_next(logits, generator=torch.Generator().manual_seed(1)) == 1).float().mean()
    assert abs(float(share) - float(torch.softmax(logits[0], -1)[1])) < 0.04


@pytest.mark.parametrize("call, message", [
    (lambda m, s, n: beam_search(m, s, n, 0), "beam_size"),
    (lambda m, s, n: beam_search(m, s, n, 2.0), "beam_size"),
    (lambda m, s, n: beam_search(m, s, n, 2, max_len=0), "max_len"),
    (lambda m, s, n: beam_search(m, s, n, 2, length_penalty=-0.5), "length_penalty"),
    (lambda m, s, n: beam_search(m, s, n[:1], 2), "lengths"),
    (lambda m, s, n: beam_search(m, s[0], n, 2), "src"),
    (lambda m, s, n: beam_search(m, s, n, 2, use_cache=1), "use_cache"),
    (lambda m, s, n: sample(m, s, n, temperature=-1.0), "temperature"),
    (lambda m, s, n: sample(m, s, n, top_k=0), "top_k"),
    (lambda m, s, n: sample(m, s, n, top_k=1000), "top_k"),
    (lambda m, s, n: sample(m, s, n, generator=0), "generator"),
    (lambda m, s, n: sample_next(torch.zeros(3), 1.0), "logits"),
    (lambda m, s, n: sequence_log_prob(m, s, n, torch.zeros(1, 3, dtype=torch.long)), "ids"),
])
def test_bad_input_raises_errors_that_name_it(trained, test_batch, call, message):
    with pytest.raises(ValueError, match=message):
        call(trained, test_batch.src[:3], test_batch.src_lengths[:3])


def test_beam_decode_refuses_a_step_with_the_wrong_number_of_rows():
    def step(y, state):
        return torch.zeros(1, 7), state  # one row, whatever the beam

    with pytest.raises(ValueError, match=r"\(4, n_vocab\)"):
        beam_decode(step, None, 2, 2, max_len=3, reorder=lambda s, r: s)


# ----------------------------------------------------------------------------- comparing decoders

def test_compare_decoders_counts_search_errors_fixes_and_model_errors(trained, test_batch):
    src, lengths, gold = test_batch.src, test_batch.src_lengths, test_batch.tgt[:, 1:]
    results = compare_decoders(trained, src, lengths, gold, {
        "greedy": lambda: trained.translate(src, lengths),
        "beam 3": lambda: beam_search(trained, src, lengths, 3),
        "the right answers": lambda: gold})
    greedy, beam, right = results["greedy"], results["beam 3"], results["the right answers"]
    assert list(results) == ["greedy", "beam 3", "the right answers"]
    greedy_ids = trained.translate(src, lengths)
    greedy_log_p = sequence_log_prob(trained, src, lengths, greedy_ids)
    greedy_right = exact_match(greedy_ids, gold)
    gold_log_p = sequence_log_prob(trained, src, lengths, gold)
    assert torch.equal(greedy.ids, greedy_ids) and greedy.seconds > 0
    assert greedy.exact_match == pytest.approx(float(greedy_right.float().mean()))
    assert greedy.log_p == pytest.approx(float(greedy_log_p.mean()), abs=1e-5)
    assert (greedy.differ, greedy.more_probable, greedy.fixed) == (0, 0, 0)
    model_errors = int((~greedy_right & (greedy_log_p > gold_log_p)).sum())
    assert greedy.model_errors == model_errors
    # this briefly trained model is unsure: greedy is wrong often, not always for the model
    assert 0 < model_errors < int((~greedy_right).sum())
    # the right answers: every wrong greedy output that is no model error is one they fix
    assert (right.exact_match, right.model_errors) == (1.0, 0)
    assert right.differ == int((~greedy_right).sum())
    assert right.fixed == right.more_probable == int((~greedy_right).sum()) - model_errors
    # beam search: more probable outputs than greedy's where they differ, counted as such
    beam_log_p = sequence_log_prob(trained, src, lengths, beam.ids)
    differ = ~exact_match(beam.ids, greedy_ids)
    more = differ & (beam_log_p > greedy_log_p)
    assert beam.differ == int(differ.sum()) and beam.more_probable == int(more.sum()) > 0
    assert beam.fixed == int((more & exact_match(beam.ids, gold) & ~greedy_right).sum())
    assert beam.log_p >= greedy.log_p - 1e-5


def test_compare_decoders_refuses_bad_decoders_with_their_name(trained, test_batch):
    src, lengths, gold = test_batch.src, test_batch.src_lengths, test_batch.tgt[:, 1:]
    with pytest.raises(ValueError, match="decoder 'half' must return one row per source"):
        compare_decoders(trained, src, lengths, gold, {"half": lambda: gold[:5]})
    with pytest.raises(ValueError, match="at least one name"):
        compare_decoders(trained, src, lengths, gold, {})
    with pytest.raises(ValueError, match="gold must have one row per source"):
        compare_decoders(trained, src, lengths, gold[:3], {"gold": lambda: gold})
    with pytest.raises(ValueError, match="decoder 'floats'"):
        compare_decoders(trained, src, lengths, gold, {"floats": lambda: gold.float()})
