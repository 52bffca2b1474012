"""course_utils.data.pointer and course_utils.pointer_model: unit 05's pointer task and model."""

from __future__ import annotations

import pytest
import torch

from course_utils.data.pointer import (
    PointerData,
    describe,
    make_pointer_data,
    pointer_id,
    vocab_size,
)
from course_utils.pointer_model import (
    POSITIONS,
    PointerConfig,
    PointerModel,
    accuracy,
    config_for,
    hit_rate,
    pointer_loss,
    pointer_weights,
    train,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is far faster

# ----------------------------------------------------------------------------- the task


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    a, b = make_pointer_data(50, 8, 12, seed=3), make_pointer_data(50, 8, 12, seed=3)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.target, b.target)
    assert torch.equal(a.answer, b.answer)
    other = make_pointer_data(50, 8, 12, seed=4)
    assert not torch.equal(a.ids, other.ids)


def test_a_row_is_distinct_symbols_then_the_pointer_and_the_answer_is_the_symbol_there():
    data = make_pointer_data(300, length=6, n_symbols=9, seed=0)
    assert data.ids.shape == (300, 7) and data.ids.dtype == torch.long
    assert data.target.shape == data.answer.shape == (300,)
    assert data.length == 6 and data.n_symbols == 9 and data.vocab_size == 15
    symbols = data.ids[:, :-1]
    assert int(symbols.min()) >= 0 and int(symbols.max()) < 9
    for row in symbols.tolist():
        assert len(set(row)) == 6                       # all different
    assert torch.equal(data.ids[:, -1], 9 + data.target)  # the pointer names the target
    assert torch.equal(data.answer, symbols[torch.arange(300), data.target])
    assert set(data.target.tolist()) == set(range(6))  # every position gets asked for


def test_with_as_many_symbols_as_positions_every_row_holds_the_same_bag():
    data = make_pointer_data(20, length=5, n_symbols=5, seed=1)
    bags = {tuple(sorted(row)) for row in data.ids[:, :-1].tolist()}
    assert bags == {(0, 1, 2, 3, 4)}


def test_vocabulary_pointer_ids_indexing_and_description():
    assert vocab_size(16, 24) == 40
    assert pointer_id(0, 16, 24) == 24 and pointer_id(15, 16, 24) == 39
    data = make_pointer_data(10, 4, 6, seed=0)
    assert len(data) == 10 and len(data[2:5]) == 3 and len(data[torch.tensor([0, 9])]) == 2
    one = data[3]
    assert isinstance(one, PointerData) and torch.equal(one.ids, data.ids[3:4])
    symbols, question = describe(data, 3).split(" | ")
    assert symbols.split() == [str(s) for s in data.ids[3, :-1].tolist()]
    assert question == f"@{int(data.target[3])} -> {int(data.answer[3])}"


@pytest.mark.parametrize("kwargs, message", [
    ({"n": 0}, "n must be a positive int"),
    ({"n": 2.0}, "n must be a positive int"),
    ({"length": 1}, "length must be an int >= 2"),
    ({"n_symbols": True}, "n_symbols must be an int >= 2"),
    ({"length": 10, "n_symbols": 8}, "n_symbols must be at least length = 10"),
    ({"seed": -1}, "seed must be an int >= 0"),
])
def test_bad_arguments_of_the_generator_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_pointer_data(**({"n": 5, "length": 4, "n_symbols": 6} | kwargs))


def test_bad_arguments_of_the_helpers_raise():
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 3\]"):
        pointer_id(4, 4, 6)
    with pytest.raises(ValueError, match="n_symbols must be at least length"):
        vocab_size(5, 4)
    with pytest.raises(ValueError, match=r"i must be an int in \[0, 9\]"):
        describe(make_pointer_data(10, 4, 6), 10)
    with pytest.raises(ValueError, match="data must be PointerData"):
        describe([1, 2], 0)


# ----------------------------------------------------------------------------- the model

DATA = make_pointer_data(64, length=7, n_symbols=10, seed=5)


def model(positions="none", **fields):
    torch.manual_seed(0)
    return PointerModel(config_for(DATA, positions=positions, d_model=16, n_heads=2, d_ff=24,
                                   **fields)).eval()


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("n_layers", [1, 2])
def test_shapes_of_logits_states_and_weights(positions, n_layers):
    m = model(positions, n_layers=n_layers)
    logits, weights = m(DATA.ids[:5])
    assert logits.shape == (5, 10)                       # (B, n_symbols)
    assert weights.shape == (5, n_layers, 2, 8, 8)       # (B, n_layers, n_heads, T, T)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, n_layers, 2, 8))
    states, _ = m.encode(DATA.ids[:5])
    assert states.shape == (5, 8, 16)
    assert pointer_weights(weights).shape == (5, 8)


def test_only_learned_positions_add_parameters():
    counts = {p: sum(x.numel() for x in model(p).parameters()) for p in POSITIONS}
    assert counts["sinusoidal"] == counts["none"]
    assert counts["learned"] - counts["none"] == 8 * 16  # n_positions x d_model
    assert "pe" not in model("sinusoidal").state_dict()  # a fixed buffer, not saved


def test_without_positions_the_model_is_permutation_equivariant():
    m = model("none", n_layers=2)
    ids = DATA.ids[:6]
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])          # the symbols shuffled, pointer last
    full = torch.cat([perm, torch.tensor([7])])          # (T,)
    logits, weights = m(ids)
    logits_p, weights_p = m(ids[:, full])
    # the answer read at the pointer does not change, though the symbol at the target moved
    torch.testing.assert_close(logits_p, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights_p, weights[..., full, :][..., full], atol=1e-6, rtol=1e-5)
    # and every state moves with its token, the pointer included
    anywhere = torch.tensor([7, 2, 0, 4, 6, 1, 3, 5])
    states, _ = m.encode(ids)
    states_p, _ = m.encode(ids[:, anywhere])
    torch.testing.assert_close(states_p, states[:, anywhere], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_with_positions_shuffling_changes_the_answer(positions):
    m = model(positions)
    ids = DATA.ids[:6]
    full = torch.tensor([3, 0, 6, 1, 5, 2, 4, 7])
    assert not torch.allclose(m(ids)[0], m(ids[:, full])[0], atol=1e-3)


def test_embed_checks_ids_and_length():
    m = model("sinusoidal")
    with pytest.raises(ValueError, match="ids must lie in 0 .. vocab_size - 1 = 16"):
        m(torch.full((1, 8), 17))
    with pytest.raises(ValueError, match="n_positions = 8"):
        m(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="int64"):
        m(DATA.ids.float())


@pytest.mark.parametrize("fields, message", [
    ({"positions": "absolute"}, "positions must be one of"),
    ({"d_model": 30, "n_heads": 4}, "must be divisible by n_heads"),
    ({"n_layers": 0}, "n_layers must be a positive int"),
    ({"n_symbols": 50}, r"n_symbols must be an int in \[2, 40\]"),
])
def test_bad_configs_raise(fields, message):
    with pytest.raises(ValueError, match=message):
        PointerConfig(**({"vocab_size": 40, "n_symbols": 24, "n_positions": 17} | fields))


def test_a_few_steps_of_training_lower_the_loss_and_repeat_exactly():
    def run():
        torch.manual_seed(0)
        m = PointerModel(config_for(DATA, d_model=16, n_heads=2, d_ff=24))
        history = train(m, DATA, n_steps=12, batch_size=16, lr=1e-2,
                        generator=torch.Generator().manual_seed(0), progress=False)
        return m, history
    (m, first), (_, second) = run(), run()
    assert len(first.loss) == 12 and first.loss == second.loss
    assert first.steps_per_epoch == 4
    assert not m.training
    assert 0.0 <= accuracy(m, DATA) <= 1.0
    assert pointer_loss(m, DATA).item() < first.loss[0]
    with pytest.raises(ValueError, match="batch_size must be an int in"):
        train(m, DATA, n_steps=1, batch_size=65)


# ----------------------------------------------------------------------------- hit rate

def test_hit_rate_on_hand_made_weights():
    weights = torch.tensor([[0.1, 0.7, 0.2],
                            [0.5, 0.3, 0.2],
                            [0.2, 0.2, 0.6],
                            [0.4, 0.4, 0.2]])              # (N, T_k)
    assert hit_rate(weights, torch.tensor([1, 1, 2, 0])) == 0.75  # a tie counts for the first
    assert hit_rate(weights, torch.tensor([1, 0, 2, 0])) == 1.0
    assert hit_rate(weights, torch.tensor([0, 1, 0, 1])) == 0.0


def test_pointer_weights_are_the_last_query_row_of_one_layer_and_head():
    weights = torch.arange(2 * 3 * 2 * 4 * 4, dtype=torch.float32).view(2, 3, 2, 4, 4)
    assert torch.equal(pointer_weights(weights, layer=1, head=0), weights[:, 1, 0, 3])
    assert torch.equal(pointer_weights(weights), weights[:, 2, 0, 3])
    with pytest.raises(ValueError, match=r"head must be an int in \[-2, 1\]"):
        pointer_weights(weights, head=2)
    with pytest.raises(ValueError, match="5 dimension"):
        pointer_weights(weights[0])


@pytest.mark.parametrize("weights, target, message", [
    (torch.rand(3, 4), torch.tensor([0, 1]), r"target must have shape \(3,\)"),
    (torch.rand(3, 4), torch.tensor([0, 1, 4]), r"lie in 0 .. T_k - 1 = 3"),
    (torch.rand(3, 4), torch.tensor([0.0, 1.0, 2.0]), "int64"),
    (torch.rand(2, 3, 4), torch.tensor([0, 1]), "2 dimension"),
    (torch.rand(0, 4), torch.zeros(0, dtype=torch.long), "nothing to score"),
])
def test_bad_arguments_of_hit_rate_raise(weights, target, message):
    with pytest.raises(ValueError, match=message):
        hit_rate(weights, target)
