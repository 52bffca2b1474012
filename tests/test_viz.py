"""Tests for course_utils.viz.attention_heatmap (Agg backend, no window is opened)."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils.viz import attention_heatmap

plt.switch_backend("Agg")  # also when MPLBACKEND is not set

WEIGHTS = [[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]]  # 2 queries x 3 keys
QUERIES = ["the", "cat"]
KEYS = ["le", "chat", "noir"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def texts(labels):
    return [label.get_text() for label in labels]


@pytest.mark.parametrize(
    "weights",
    [
        pytest.param(np.array(WEIGHTS), id="numpy"),
        pytest.param(torch.tensor(WEIGHTS), id="torch"),
        pytest.param(torch.tensor(WEIGHTS, requires_grad=True), id="torch-requires-grad"),
        pytest.param(torch.tensor(WEIGHTS, dtype=torch.bfloat16), id="torch-bfloat16"),
        pytest.param(WEIGHTS, id="nested-list"),
    ],
)
def test_heatmap_accepts_tensors_and_arrays_and_shows_the_weights(weights):
    ax = attention_heatmap(weights, QUERIES, KEYS)
    assert len(ax.images) == 1
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), np.array(WEIGHTS))


def test_heatmap_puts_key_tokens_on_x_axis_and_query_tokens_on_y_axis():
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS)
    assert texts(ax.get_xticklabels()) == KEYS
    assert texts(ax.get_yticklabels()) == QUERIES
    assert list(ax.get_xticks()) == [0, 1, 2]
    assert list(ax.get_yticks()) == [0, 1]


def test_heatmap_rows_are_queries_and_columns_are_keys():
    weights = torch.softmax(torch.arange(12.0).view(3, 4), dim=-1)  # non-square on purpose
    ax = attention_heatmap(weights, ["a", "b", "c"], ["w", "x", "y", "z"])
    image = np.asarray(ax.images[0].get_array())
    assert image.shape == (3, 4)
    np.testing.assert_allclose(image, weights.numpy(), rtol=1e-6)


def test_heatmap_labels_that_are_not_strings_are_shown_as_strings():
    ax = attention_heatmap(np.eye(2), [1, 2], (3.5, None))
    assert texts(ax.get_yticklabels()) == ["1", "2"]
    assert texts(ax.get_xticklabels()) == ["3.5", "None"]


def test_heatmap_annotate_writes_each_weight_in_its_cell():
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS, annotate=True, colorbar=False)
    cells = {tuple(t.get_position()): t.get_text() for t in ax.texts}
    # text position is (x = key column, y = query row)
    assert cells == {
        (0, 0): "0.25", (1, 0): "0.75", (2, 0): "0.00",
        (0, 1): "1.00", (1, 1): "0.00", (2, 1): "0.00",
    }


def test_heatmap_annotate_false_writes_no_text():
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS, annotate=False)
    assert len(ax.texts) == 0


@pytest.mark.parametrize(("size", "expected_texts"), [(12, 144), (13, 0)])
def test_heatmap_annotates_by_default_only_small_matrices(size, expected_texts):
    tokens = [f"t{i}" for i in range(size)]
    ax = attention_heatmap(np.full((size, size), 1 / size), tokens, tokens, colorbar=False)
    assert len(ax.texts) == expected_texts


def test_heatmap_draws_on_the_axes_it_is_given():
    fig, given = plt.subplots()
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS, ax=given, colorbar=False)
    assert ax is given
    assert plt.get_fignums() == [fig.number]
    assert len(fig.axes) == 1


def test_heatmap_creates_its_own_figure_without_axes():
    before = set(plt.get_fignums())
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS)
    assert ax.figure.number not in before


@pytest.mark.parametrize(("colorbar", "n_axes"), [(True, 2), (False, 1)])
def test_heatmap_colorbar_is_optional(colorbar, n_axes):
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS, colorbar=colorbar)
    assert len(ax.figure.axes) == n_axes


def test_heatmap_sets_title_and_axis_labels():
    ax = attention_heatmap(np.array(WEIGHTS), QUERIES, KEYS, title="head 0")
    assert ax.get_title() == "head 0"
    assert "keys" in ax.get_xlabel()
    assert "queries" in ax.get_ylabel()


def test_heatmap_does_not_modify_the_weights():
    weights = torch.tensor(WEIGHTS)
    attention_heatmap(weights, QUERIES, KEYS)
    assert torch.equal(weights, torch.tensor(WEIGHTS))


@pytest.mark.parametrize(
    ("weights", "queries", "keys", "message"),
    [
        pytest.param(WEIGHTS, ["a", "b", "c"], KEYS,
                     r"query_tokens must have one label per row: weights are \(2, 3\), "
                     r"so expected 2 labels; got 3", id="too-many-query-labels"),
        pytest.param(WEIGHTS, QUERIES, ["x", "y"],
                     r"key_tokens must have one label per column: weights are \(2, 3\), "
                     r"so expected 3 labels; got 2", id="too-few-key-labels"),
        pytest.param(np.ones((2, 2, 3)), QUERIES, KEYS,
                     r"weights must be a 2-d matrix of shape \(T_q, T_k\).*got shape \(2, 2, 3\)",
                     id="3d-array"),
        pytest.param(torch.ones(1, 2, 2, 3), QUERIES, KEYS,
                     r"\(T_q, T_k\).*got shape \(1, 2, 2, 3\)", id="4d-tensor"),
        pytest.param(np.ones(3), QUERIES, KEYS, r"\(T_q, T_k\).*got shape \(3,\)", id="1d"),
        pytest.param([[0.5, float("nan"), 0.5], [1.0, 0.0, 0.0]], QUERIES, KEYS, "NaN",
                     id="nan"),
        pytest.param(torch.tensor([[0.5, float("inf"), 0.5], [1.0, 0.0, 0.0]]), QUERIES, KEYS,
                     "inf", id="inf"),
    ],
)
def test_heatmap_rejects_bad_input(weights, queries, keys, message):
    with pytest.raises(ValueError, match=message):
        attention_heatmap(weights, queries, keys)
