"""Tests for course_utils.viz: attention_heatmap and accuracy_by_length_plot (Agg backend, no
window is opened)."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils.viz import (
    accuracy_by_length_plot,
    attention_heatmap,
    attention_lines,
    head_heatmap,
)

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


# ------------------------------------------------------------------------ accuracy_by_length_plot

BY_BUCKET = {
    "forward": {"<5": (0.85, 13), "5-10": (0.74, 152), "11-20": (0.12, 266)},
    "reversed": {"<5": (0.92, 13), "5-10": (0.90, 152), "11-20": (0.40, 266)},
}


def test_length_plot_draws_one_line_per_model_with_its_accuracies():
    ax = accuracy_by_length_plot(BY_BUCKET)
    assert len(ax.lines) == 2
    for line, model in zip(ax.lines, BY_BUCKET, strict=True):
        assert line.get_label() == model
        np.testing.assert_allclose(line.get_xdata(), [0, 1, 2])
        np.testing.assert_allclose(line.get_ydata(), [a for a, _ in BY_BUCKET[model].values()])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "reversed"]


def test_length_plot_labels_buckets_in_order_with_their_counts():
    ax = accuracy_by_length_plot(BY_BUCKET)
    assert texts(ax.get_xticklabels()) == ["<5\nn=13", "5-10\nn=152", "11-20\nn=266"]
    assert "length" in ax.get_xlabel()
    assert ax.get_ylabel() == "exact match"


def test_length_plot_shows_percentages_on_a_full_0_to_1_scale():
    ax = accuracy_by_length_plot({"m": {"a1": 0.5}})
    low, high = ax.get_ylim()
    assert low <= 0.0 and high >= 1.0
    assert ax.yaxis.get_major_formatter()(0.5, 0) == "50%"


def test_length_plot_accepts_plain_accuracies_without_counts():
    ax = accuracy_by_length_plot({"m": {"1-2": 0.25, "3-4": 1.0}}, title="t", ylabel="token acc")
    assert texts(ax.get_xticklabels()) == ["1-2", "3-4"]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.25, 1.0])
    assert ax.get_title() == "t"
    assert ax.get_ylabel() == "token acc"


def test_length_plot_leaves_a_gap_where_a_model_lacks_a_bucket_and_drops_unequal_counts():
    results = {"a": {"x1": (1.0, 3), "x2": (0.5, 2)}, "b": {"x2": (0.0, 5), "x3": (0.25, 4)}}
    ax = accuracy_by_length_plot(results)
    assert texts(ax.get_xticklabels()) == ["x1\nn=3", "x2", "x3\nn=4"]
    a, b = (line.get_ydata() for line in ax.lines)
    np.testing.assert_allclose(a, [1.0, 0.5, np.nan])
    np.testing.assert_allclose(b, [np.nan, 0.0, 0.25])


def test_length_plot_draws_on_the_axes_it_is_given():
    fig, given = plt.subplots()
    assert accuracy_by_length_plot(BY_BUCKET, ax=given) is given
    assert plt.get_fignums() == [fig.number]


@pytest.mark.parametrize(
    ("results", "message"),
    [
        pytest.param({}, "non-empty mapping", id="empty"),
        pytest.param([0.5], "non-empty mapping", id="not-a-mapping"),
        pytest.param({"m": {}}, r"results\['m'\] must be a non-empty mapping", id="empty-model"),
        pytest.param({"m": {"a": 85.0}}, r"\[0, 1\] \(a fraction, not a percentage\); got 85.0",
                     id="percentage"),
        pytest.param({"m": {"a": float("nan")}}, r"\[0, 1\].*got nan", id="nan"),
        pytest.param({"m": {"a": "high"}}, r"accuracy in \[0, 1\]; got 'high'", id="string"),
        pytest.param({"m": {"a": (0.5, 2, 3)}},
                     r"an \(accuracy, count\) pair; got \(0.5, 2, 3\)", id="triple"),
        pytest.param({"m": {"a": (0.5, -1)}}, "count.*int >= 0; got -1", id="negative-count"),
    ],
)
def test_length_plot_rejects_bad_input(results, message):
    with pytest.raises(ValueError, match=message):
        accuracy_by_length_plot(results)


# ------------------------------------------------------------------------ attention_lines

LINE_WEIGHTS = np.array([[0.5, 0.5, 0.0], [0.01, 0.09, 0.9]])  # 2 queries x 3 keys


def drawn_lines(ax):
    """{(query, key): opacity} of the lines attention_lines drew."""
    (lines,) = ax.collections
    return {(int(-seg[0][1]), int(-seg[1][1])): float(color[3])
            for seg, color in zip(lines.get_segments(), lines.get_colors(), strict=True)}


def test_lines_join_each_query_to_the_keys_it_attends_to_with_opacity_sqrt_weight():
    ax = attention_lines(LINE_WEIGHTS, QUERIES, KEYS, min_weight=0.02)
    lines = drawn_lines(ax)
    # 0.0 and 0.01 are below min_weight: no line
    assert set(lines) == {(0, 0), (0, 1), (1, 1), (1, 2)}
    for (i, j), opacity in lines.items():
        assert opacity == pytest.approx(LINE_WEIGHTS[i, j] ** 0.5)
    segments = ax.collections[0].get_segments()
    assert all(seg[0][0] == 0.0 and seg[1][0] == 1.0 for seg in segments)  # queries left


def test_lines_show_query_tokens_on_the_left_and_key_tokens_on_the_right():
    ax = attention_lines(LINE_WEIGHTS, QUERIES, KEYS)
    left = [t.get_text() for t in ax.texts if t.get_position()[0] < 0.5]
    right = [t.get_text() for t in ax.texts if t.get_position()[0] > 0.5]
    assert left == QUERIES and right == KEYS


def test_lines_of_one_query_only_and_its_label_in_bold():
    ax = attention_lines(LINE_WEIGHTS, QUERIES, KEYS, query=1)
    assert set(drawn_lines(ax)) == {(1, 1), (1, 2)}
    bold = [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]
    assert bold == ["cat"]


def test_lines_with_min_weight_zero_still_skip_zero_weights():
    ax = attention_lines(LINE_WEIGHTS, QUERIES, KEYS, min_weight=0.0)
    assert set(drawn_lines(ax)) == {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)}


def test_lines_draw_on_the_axes_they_are_given_with_a_title():
    fig, given = plt.subplots()
    assert attention_lines(LINE_WEIGHTS, QUERIES, KEYS, ax=given, title="head 3") is given
    assert given.get_title() == "head 3" and plt.get_fignums() == [fig.number]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"query_tokens": ["a"]}, r"query_tokens must have one label per row",
                     id="too-few-queries"),
        pytest.param({"key_tokens": KEYS[:2]}, r"key_tokens must have one label per column",
                     id="too-few-keys"),
        pytest.param({"weights": np.ones((2, 3, 1))}, r"\(T_q, T_k\)", id="3d"),
        pytest.param({"min_weight": 1.5}, r"min_weight must be a weight in \[0, 1\]",
                     id="min-weight-above-1"),
        pytest.param({"query": 2}, r"query must be an int in \[0, 1\]; got 2",
                     id="query-off-the-end"),
        pytest.param({"query": -1}, r"query must be an int in \[0, 1\]", id="negative-query"),
    ],
)
def test_lines_reject_bad_input(kwargs, message):
    arguments = {"weights": LINE_WEIGHTS, "query_tokens": QUERIES, "key_tokens": KEYS,
                 **kwargs}
    with pytest.raises(ValueError, match=message):
        attention_lines(**arguments)


# ------------------------------------------------------------------------ head_heatmap

PER_HEAD = np.array([[0.1, 0.5, 0.9], [0.2, 0.0, 0.4]])  # 2 layers x 3 heads


def test_head_heatmap_puts_layers_down_the_side_and_heads_along_the_bottom():
    ax = head_heatmap(PER_HEAD, title="to [CLS]", label="mass")
    np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), PER_HEAD)
    assert list(ax.get_xticks()) == [0, 1, 2] and list(ax.get_yticks()) == [0, 1]
    assert ax.get_xlabel() == "head" and ax.get_ylabel() == "layer"
    assert ax.get_title() == "to [CLS]"
    assert ax.figure.axes[-1].get_ylabel() == "mass"  # the colour bar


def test_head_heatmap_writes_each_value_in_its_cell_in_the_given_format():
    ax = head_heatmap(torch.tensor(PER_HEAD), fmt=".0%", colorbar=False)
    cells = {tuple(t.get_position()): t.get_text() for t in ax.texts}
    assert cells[(2, 0)] == "90%" and cells[(1, 1)] == "0%" and len(cells) == 6
    assert not head_heatmap(PER_HEAD, annotate=False).texts


def test_head_heatmap_centred_scale_is_symmetric_about_zero_and_diverging():
    ax = head_heatmap(PER_HEAD - 0.3, centre=True)
    low, high = ax.images[0].get_clim()
    assert low == pytest.approx(-0.6) and high == pytest.approx(0.6)
    assert ax.images[0].get_cmap().name == "RdBu_r"


def test_head_heatmap_keeps_given_colour_limits():
    ax = head_heatmap(PER_HEAD, vmin=0.0, vmax=1.0)
    assert ax.images[0].get_clim() == (0.0, 1.0)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(np.ones(3), r"2-d matrix", id="1d"),
        pytest.param(np.ones((2, 3, 4)), r"2-d matrix", id="3d"),
        pytest.param([[0.1, float("nan")]], "NaN", id="nan"),
    ],
)
def test_head_heatmap_rejects_bad_input(values, message):
    with pytest.raises(ValueError, match=message):
        head_heatmap(values)
