"""Tests for course_utils.viz: attention_heatmap and accuracy_by_length_plot (Agg backend, no
window is opened)."""

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_utils.viz import (
    accuracy_by_length_plot,
    attention_heatmap,
    attention_lines,
    decoder_step_diagram,
    head_heatmap,
    multihead_diagram,
    self_attention_diagram,
    split_heads_diagram,
    transformer_diagram,
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


def test_decoder_step_diagrams_draw_each_decoders_flow():
    """Bahdanau: the query is s_{t'-1} and c_{t'} goes into the GRU; Luong: the query is s_{t'},
    the context meets it after the GRU in s~_{t'}, which is fed to the next step."""
    fig, (left, right) = plt.subplots(1, 2)
    assert decoder_step_diagram("bahdanau", ax=left) is left
    assert decoder_step_diagram("luong", ax=right) is right
    bahdanau, luong = ({t.get_text() for t in ax.texts} for ax in (left, right))
    for labels in (bahdanau, luong):
        assert {"$c_{t'}$", "$s_{t'}$", "$s_{t'-1}$", "$y_{t'-1}$", "query",
                "keys, values"} <= labels
    assert "GRU\n(context in every gate)" in bahdanau
    assert "attention\n$e_{t'j} = \\mathrm{score}(s_{t'-1}, h_j)$" in bahdanau
    assert not any("tilde" in label for label in bahdanau)
    assert {"$\\tilde s_{t'}$", "$\\tilde s_{t'-1}$", "$\\tanh(W_c[c_{t'}; s_{t'}])$",
            "input feeding", "attention\n$e_{t'j} = h_j^\\top W_e\\, s_{t'}$"} <= luong
    # one arrow per edge: 10 for Bahdanau, 13 for Luong (two of them dashed: input feeding)
    arrows = [[t for t in ax.texts if t.get_text() == "" and t.arrow_patch is not None]
              for ax in (left, right)]
    assert [len(a) for a in arrows] == [10, 13]
    assert sum(a.arrow_patch.get_linestyle() == "--" for a in arrows[1]) == 2
    assert left.get_title().startswith("Bahdanau") and right.get_title().startswith("Luong")
    fig.canvas.draw()  # the mathtext of every label renders


def test_decoder_step_diagram_makes_its_own_axes_and_rejects_other_kinds():
    ax = decoder_step_diagram("luong", title="one step")
    assert ax.get_title() == "one step" and not ax.axison
    with pytest.raises(ValueError, match=r"kind must be 'bahdanau' or 'luong'; got 'local'"):
        decoder_step_diagram("local")


# ------------------------------------------------------------------------ unit 05's diagrams

def labels_of(ax):
    return [t.get_text() for t in ax.texts]


def test_self_attention_diagram_draws_every_matrix_with_its_shape():
    ax = self_attention_diagram(n_positions=6, d_model=8, d_k=4, d_v=3)
    assert isinstance(ax.figure, plt.Figure) and not ax.axison
    labels = labels_of(ax)
    assert labels.count("$X$") == 3 and labels.count("$\\alpha$") == 2
    assert {"$W^Q$", "$W^K$", "$W^V$", "$Q$", "$K$", "$V$", "$K^\\top$", "$Z$", "softmax(",
            "$/ \\sqrt{d_k}$ )"} <= set(labels)
    assert {"(T, d_model)\n(6, 8)", "(d_model, d_k)\n(8, 4)", "(d_model, d_v)\n(8, 3)",
            "(T, d_k)\n(6, 4)", "(d_k, T)\n(4, 6)", "(T_q, T_k)\n(6, 6)",
            "(T, d_v)\n(6, 3)"} <= set(labels)
    # each matrix a rectangle of its shape: X is 6 x 8 entries, W^Q 8 x 4
    outlines = [p for p in ax.patches if p.get_facecolor()[3] == 0]
    sizes = {(round(p.get_height() / 0.3), round(p.get_width() / 0.3)) for p in outlines}
    assert {(6, 8), (8, 4), (8, 3), (6, 4), (4, 6), (6, 6), (6, 3)} == sizes
    assert "XW^Q" in ax.get_title()
    ax.figure.canvas.draw()  # the mathtext of every label renders


def test_multihead_diagram_splits_attends_per_head_concatenates_and_applies_w_o():
    ax = multihead_diagram(n_positions=4, d_model=6, n_heads=3)
    labels = labels_of(ax)
    assert {"$X$", "$Q$", "$K$", "$V$", "concat", "$W^O$", "output"} <= set(labels)
    for i in range(3):
        assert f"$\\mathrm{{head}}_{{{i}}}$" in labels
        assert (f"head {i}\nsoftmax$(Q_{{{i}}} K_{{{i}}}^\\top / \\sqrt{{d_k}})\\, V_{{{i}}}$"
                in labels)
    assert "(T, n_heads d_k)\n(4, 6)" in labels and "(T, d_k)\n(4, 2)" in labels
    assert any("3 heads of d_k = 2" in label for label in labels)
    assert "n_heads = 3" in ax.get_title()
    ax.figure.canvas.draw()
    with pytest.raises(ValueError, match=r"d_model = 6 must be divisible by n_heads = 4"):
        multihead_diagram(d_model=6, n_heads=4)


def test_split_heads_diagram_gives_each_head_its_columns_and_shows_the_wrong_reshape():
    fig, (right, wrong) = plt.subplots(1, 2)
    assert split_heads_diagram(ax=right) is right
    assert split_heads_diagram(wrong=True, ax=wrong) is wrong

    def cells(ax, x_from):
        # the "t,j" labels of the matrices right of x = x_from, in drawing order
        return [t.get_text() for t in ax.texts
                if re.fullmatch(r"\d+,\d+", t.get_text()) and t.get_position()[0] > x_from]

    # T = 4, d_model = 6, 2 heads of d_k = 3; the heads start at x = d_model + 2.6
    right_heads, wrong_heads = cells(right, 8.0), cells(wrong, 8.0)
    assert right_heads[:3] == ["0,0", "0,1", "0,2"] and right_heads[3:6] == ["1,0", "1,1", "1,2"]
    assert right_heads[12:15] == ["0,3", "0,4", "0,5"]   # head 1: features 3-5 of position 0
    assert wrong_heads[:6] == ["0,0", "0,1", "0,2", "0,3", "0,4", "0,5"]  # position 0 twice
    assert "head 0 (T, d_k)" in labels_of(right) and "'head 0' (T, d_k)" in labels_of(wrong)
    assert "split" in labels_of(right) and "reshape" in labels_of(wrong)
    assert right.get_title().startswith("split_heads") and wrong.get_title().startswith("WRONG")
    assert len(cells(right, -1.0)) == 2 * 24   # x and its two heads, every cell labelled


def test_transformer_diagram_draws_the_whole_model_from_the_ids_to_the_softmax():
    ax = transformer_diagram()
    labels = [t.get_text() for t in ax.texts]
    height = {t.get_text(): t.get_position()[1] for t in ax.texts}
    for label in ("input embedding × √d_model", "output embedding × √d_model",
                  "multi-head self-attention", "masked multi-head\nself-attention",
                  "multi-head\ncross-attention", "position-wise feed-forward",
                  "memory  (B, S, d_model)", "linear  d_model → n_vocab", "softmax"):
        assert label in labels, label
    assert labels.count("+ positional encoding") == 2      # source and target
    assert labels.count("position-wise feed-forward") == 2  # one in each layer
    assert labels.count("add & LayerNorm") == 5             # 2 encoder + 3 decoder sub-layers
    assert labels.count("× L") == 2                         # both stacks
    # from the bottom up: ids, embedding, positions, the layer, linear, softmax
    assert (height["output embedding × √d_model"] < height["+ positional encoding"]
            < height["masked multi-head\nself-attention"] < height["multi-head\ncross-attention"]
            < height["linear  d_model → n_vocab"] < height["softmax"])
    assert ax.get_title().startswith("The Transformer")
    _, mine = plt.subplots()
    assert transformer_diagram(ax=mine, title="mine") is mine and mine.get_title() == "mine"


def test_the_bag_of_words_diagram_draws_the_model():
    from course_utils.viz import bag_of_words_diagram

    ax = bag_of_words_diagram(n_ctx=3)
    texts = " ".join(t.get_text() for t in ax.texts)
    for label in ("$w_{i-1}$", "$w_{i-4}$", "$q = E(w_{i-1})$", "$e_3$", "softmax"):
        assert label in texts, label
    assert "$e_4$" not in texts
    assert "P_{1}" not in " ".join(t.get_text() for t in bag_of_words_diagram(
        n_ctx=2, positions=False).texts)
    with pytest.raises(ValueError, match="n_ctx"):
        bag_of_words_diagram(n_ctx=0)
    plt.close("all")


def test_the_norm_decomposition_diagram_draws_each_term_to_scale():
    from course_utils.viz import norm_decomposition_diagram

    directions = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])
    ax = norm_decomposition_diagram([0.5, 0.25, 0.25], [2.0, 4.0, 1.0], directions,
                                    ["[CLS]", "a", "b"])
    from matplotlib.text import Annotation

    arrows = [t for t in ax.texts if isinstance(t, Annotation)]
    starts = [np.array(a.xyann) for a in arrows]
    ends = [np.array(a.xy) for a in arrows]
    lengths = sorted(round(float(np.linalg.norm(e - s)), 6)
                     for s, e in zip(starts, ends, strict=True))
    assert lengths == [0.25, 1.0, 1.0]           # alpha_j ||f(x_j)||: 0.25, 1.0 and 1.0
    tip = ends[-1]
    assert np.allclose(tip, [0.6 + 1.0, 0.8 - 0.25])   # the sum of the three terms
    with pytest.raises(ValueError, match=r"\(T, 2\) = \(3, 2\)"):
        norm_decomposition_diagram([0.5, 0.5, 0.0], [1.0, 1.0, 1.0], directions[:, :1],
                                   ["x", "y", "z"])
    plt.close("all")


def test_the_scaling_plot_draws_each_series_and_guides_through_the_first_series_last_point():
    from course_utils.viz import scaling_plot

    lengths = [256, 512, 1024]
    ax = scaling_plot(lengths, {"quadratic": [1.0, 4.0, 16.0], "linear": [2.0, 4.0, np.nan]},
                      title="cost", ylabel="bytes")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_title() == "cost"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1,024"]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["quadratic", "linear", "$\\propto T$",
                                                    "$\\propto T^2$"]
    t_1, t_2 = (line.get_ydata() for line in lines[2:4])  # the guides, T and T^2
    assert np.allclose(t_1, [4.0, 8.0, 16.0]) and np.allclose(t_2, [1.0, 4.0, 16.0])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "quadratic", "linear", "$\\propto T$", "$\\propto T^2$"]
    with pytest.raises(ValueError, match=r"series\['bad'\] must hold 3 positive values"):
        scaling_plot(lengths, {"bad": [1.0, 0.0, 2.0]})
    with pytest.raises(ValueError, match=r"series\['short'\] must hold 3"):
        scaling_plot(lengths, {"short": [1.0, 2.0]})
    with pytest.raises(ValueError, match="series must be a non-empty mapping"):
        scaling_plot(lengths, {})
    plt.close("all")
