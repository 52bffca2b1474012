"""Tests for course_utils.widgets: the temperature explorer builds without a browser (Agg),
moving its slider redraws with the new weights, it leaves a PNG for static readers, and bad
input raises a ValueError that says what was expected."""

import base64
import math

import matplotlib
import numpy as np
import pytest
import torch

from course_utils.attention import masked_softmax
from course_utils.widgets import TemperatureExplorer, row_entropy, temperature_explorer

matplotlib.use("Agg")  # also when MPLBACKEND is not set

SCORES = torch.tensor([[2.0, 0.5, -1.0, 1.0],
                       [0.0, 3.0, 1.0, 1.0],
                       [1.0, 1.0, 1.0, 4.0]])  # (T_q, T_k) = (3, 4): not square on purpose
QUERIES = ["who", "what", "where"]
KEYS = ["the", "cat", "sat", "mat"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def shown_weights(explorer: TemperatureExplorer) -> np.ndarray:
    return np.asarray(explorer.heatmap_ax.images[0].get_array())


def shown_entropy(explorer: TemperatureExplorer) -> np.ndarray:
    return np.array([bar.get_width() for bar in explorer.entropy_ax.patches])


def test_builds_headless_with_the_weights_at_the_starting_temperature():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    assert explorer.tau == 1.0 and explorer.slider.value == 1.0
    expected = masked_softmax(SCORES.double())
    torch.testing.assert_close(explorer.weights, expected)
    np.testing.assert_allclose(shown_weights(explorer), expected.numpy(), rtol=1e-6)
    assert [t.get_text() for t in explorer.heatmap_ax.get_xticklabels()] == KEYS
    assert [t.get_text() for t in explorer.heatmap_ax.get_yticklabels()] == QUERIES


@pytest.mark.parametrize("tau", [0.1, 7.5])
def test_moving_the_slider_redraws_with_softmax_of_scores_over_tau(tau):
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    before = shown_weights(explorer).copy()
    explorer.slider.value = tau  # what a user does in the browser
    expected = masked_softmax(SCORES.double() / tau)
    assert explorer.tau == pytest.approx(tau)
    torch.testing.assert_close(explorer.weights, expected)
    np.testing.assert_allclose(shown_weights(explorer), expected.numpy(), rtol=1e-6)
    assert not np.allclose(shown_weights(explorer), before)
    assert f"{tau:.3g}" in explorer.heatmap_ax.get_title()


def test_update_from_code_moves_the_slider_and_redraws():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    explorer.update(0.1)
    assert explorer.slider.value == pytest.approx(0.1)
    np.testing.assert_allclose(shown_weights(explorer),
                               masked_softmax(SCORES.double() / 0.1).numpy(), rtol=1e-6)


def test_entropy_is_shown_per_row_and_goes_from_zero_to_log_n():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS, temperatures=(0.01, 1000.0))
    explorer.update(1000.0)  # nearly uniform over 4 keys
    np.testing.assert_allclose(explorer.entropy.numpy(), math.log(4), atol=1e-3)
    np.testing.assert_allclose(shown_entropy(explorer), explorer.entropy.numpy())
    explorer.update(0.01)  # nearly one-hot: every row has a single largest score
    np.testing.assert_allclose(explorer.entropy.numpy(), 0.0, atol=1e-6)
    np.testing.assert_allclose(shown_entropy(explorer), explorer.entropy.numpy())


def test_row_entropy_matches_the_formula_and_treats_zero_weights_as_zero():
    weights = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 0.0]])
    expected = torch.tensor([math.log(2), -(0.2 * math.log(0.2) + 0.3 * math.log(0.3)
                                            + 0.5 * math.log(0.5)), 0.0])
    torch.testing.assert_close(row_entropy(weights), expected)


def test_a_mask_gives_masked_keys_zero_weight_at_every_temperature():
    mask = torch.tensor([True, True, False, True])  # (T_k,): "sat" is hidden
    explorer = temperature_explorer(SCORES, QUERIES, KEYS, mask=mask)
    for tau in (0.05, 1.0, 20.0):
        explorer.update(tau)
        torch.testing.assert_close(explorer.weights, masked_softmax(SCORES.double() / tau, mask))
        assert np.all(shown_weights(explorer)[:, 2] == 0.0)
    np.testing.assert_allclose(explorer.entropy.numpy(), math.log(3), atol=0.02)


def test_a_fully_masked_row_shows_zero_weights_and_zero_entropy():
    mask = torch.tensor([[True] * 4, [False] * 4, [True] * 4])  # the second query sees nothing
    explorer = temperature_explorer(SCORES, QUERIES, KEYS, mask=mask)
    assert np.all(shown_weights(explorer)[1] == 0.0)
    assert explorer.entropy[1].item() == 0.0
    assert np.isfinite(shown_weights(explorer)).all()


def test_display_leaves_a_png_and_a_stable_text_for_readers_without_widgets():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    bundle = explorer._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == ("TemperatureExplorer(tau=1, 3 queries x 4 keys, "
                                    "range [0.05, 20])")
    first_png = bundle["image/png"]
    explorer.update(0.1)
    bundle = explorer._repr_mimebundle_()
    assert bundle["image/png"] != first_png, "the PNG must follow the slider"
    assert "tau=0.1" in bundle["text/plain"]
    live = explorer._output.outputs  # what the widget shows in JupyterLab
    assert len(live) == 1 and live[0]["data"]["image/png"] == bundle["image/png"]


def test_scores_that_require_grad_and_other_dtypes_are_accepted():
    scores = SCORES.clone().to(torch.float32).requires_grad_(True)
    explorer = temperature_explorer(scores, QUERIES, KEYS)
    torch.testing.assert_close(explorer.weights, masked_softmax(SCORES.double()))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"query_tokens": QUERIES[:2]}, r"query_tokens .* expected 3 labels; got 2",
                     id="too-few-query-tokens"),
        pytest.param({"key_tokens": KEYS + ["on"]}, r"key_tokens .* expected 4 labels; got 5",
                     id="too-many-key-tokens"),
        pytest.param({"key_tokens": "the cat sat mat"}, r"key_tokens must be a list of 4",
                     id="tokens-as-one-string"),
        pytest.param({"scores": SCORES[0]},
                     r"scores must have 2 dimension\(s\), shape \(T_q, T_k\)", id="1-d-scores"),
        pytest.param({"scores": SCORES.long()}, r"floating-point", id="integer-scores"),
        pytest.param({"scores": torch.full((3, 4), float("nan"))}, r"scores contains NaN",
                     id="nan-scores"),
        pytest.param({"mask": torch.ones(3, 4)}, r"dtype torch.bool", id="float-mask"),
        pytest.param({"mask": torch.ones(2, 4, dtype=torch.bool)}, r"does not broadcast",
                     id="mask-of-wrong-shape"),
        pytest.param({"temperatures": (0.0, 10.0)}, r"0 < lowest < highest",
                     id="zero-temperature"),
        pytest.param({"temperatures": (-1.0, 10.0)}, r"0 < lowest < highest",
                     id="negative-temperature"),
        pytest.param({"temperatures": (10.0, 0.1)}, r"0 < lowest < highest",
                     id="reversed-range"),
        pytest.param({"temperatures": (0.1, float("inf"))}, r"both finite",
                     id="infinite-temperature"),
        pytest.param({"temperatures": (0.1, 1.0, 10.0)}, r"a pair \(lowest, highest\)",
                     id="three-temperatures"),
        pytest.param({"tau": 50.0}, r"tau must be .* \[0.05, 20\]; got 50", id="tau-off-range"),
    ],
)
def test_bad_inputs_raise_a_value_error_that_says_what_was_expected(kwargs, message):
    arguments = {"scores": SCORES, "query_tokens": QUERIES, "key_tokens": KEYS, **kwargs}
    with pytest.raises(ValueError, match=message):
        temperature_explorer(**arguments)


@pytest.mark.parametrize("tau", [0.0, -1.0, 100.0, float("nan"), "1"])
def test_update_rejects_temperatures_outside_the_range(tau):
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    with pytest.raises(ValueError, match=r"tau must be"):
        explorer.update(tau)
    assert explorer.tau == 1.0  # unchanged
    np.testing.assert_allclose(shown_weights(explorer), masked_softmax(SCORES.double()).numpy(),
                               rtol=1e-6)
