"""Tests for course_utils.widgets: the temperature explorer and the attention explorer build
without a browser (Agg), moving their controls redraws with the new weights and a new text
alternative, they leave a PNG for static readers (and the same image with its alt for
JupyterLab), the controls choose among labelled values, and bad input raises a ValueError that
says what was expected. How they behave in a browser, with the keyboard and a screen reader:
tests/notebooks/test_widget_browser.py."""

import base64
import html.parser
import math

import matplotlib
import numpy as np
import pytest
import torch
import traitlets

from course_utils.attention import masked_softmax
from course_utils.bert import Bert, BertConfig, load_minilm, minilm_files
from course_utils.tokenization import WordPiece
from course_utils.widgets import (
    AttentionExplorer,
    Choice,
    TemperatureExplorer,
    attention_explorer,
    row_entropy,
    temperature_explorer,
    temperature_stops,
)

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


@pytest.mark.parametrize("tau", [0.1, 8.0])
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
    # what the widget shows in JupyterLab
    assert explorer.figure_view.png == bundle["image/png"]
    assert explorer.figure_view.alt == explorer.alt and "τ = 0.1 " in explorer.alt


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


def test_the_slider_stops_at_round_temperatures_evenly_spaced_on_a_log_scale():
    assert temperature_stops(0.05, 20.0) == [
        0.05, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8,
        1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0]
    stops = temperature_stops(0.07, 3.0)  # ends that are not round numbers are stops too
    assert stops[:2] == [0.07, 0.08] and stops[-1] == 3.0
    ratios = np.diff(np.log(temperature_stops(0.01, 1000.0)))
    assert ratios.min() > math.log(1.19) and ratios.max() < math.log(1.34)
    with pytest.raises(ValueError, match=r"0 < lowest < highest"):
        temperature_stops(2.0, 1.0)


def test_the_slider_says_tau_as_the_figure_prints_it_not_its_logarithm():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    assert explorer.slider.kind == "slider" and explorer.slider.description == "τ (temperature)"
    assert explorer.slider.labels[0] == "0.05" and explorer.slider.labels[-1] == "20"
    for label, tau in explorer.slider.options[::5]:
        explorer.slider.value = tau
        assert f"τ = {label}" in explorer.heatmap_ax.get_title()
        assert f"τ = {label} " in explorer.alt
        assert float(label) == pytest.approx(tau, rel=5e-3)  # three significant digits


def test_a_temperature_set_from_code_is_a_stop_until_the_slider_leaves_it():
    explorer = temperature_explorer(SCORES, QUERIES, KEYS)
    explorer.update(0.123)
    assert explorer.slider.value == 0.123 and "0.123" in explorer.slider.labels
    explorer.slider.value = 0.15  # the next stop up, as the arrow key would choose
    assert explorer.tau == 0.15 and "0.123" not in explorer.slider.labels
    with pytest.raises(ValueError, match=r"τ \(temperature\) must be one of \[0.05, 0.06"):
        explorer.slider.value = 0.123
    assert explorer.tau == 0.15


def test_the_figure_is_described_in_words_as_it_is_drawn():
    mask = torch.tensor([[True] * 4, [False] * 4, [True, False, True, True]])
    explorer = temperature_explorer(SCORES, QUERIES, KEYS, mask=mask, tau=0.5,
                                    title="Try τ")
    assert explorer.alt.startswith("Try τ. Heatmap of the weights α = softmax(e / τ) at "
                                   "τ = 0.5 of the queries who, what, where over the keys "
                                   "the, cat, sat, mat")
    weights = masked_softmax(SCORES.double() / 0.5, mask)
    assert f"who most on the ({weights[0, 0]:.2f}), entropy {explorer.entropy[0]:.2f} of at " \
           f"most {math.log(4):.2f}" in explorer.alt
    assert "; what sees no key; " in explorer.alt
    assert f"where most on mat ({weights[2, 3]:.2f})" in explorer.alt
    assert f"of at most {math.log(3):.2f}." in explorer.alt


class ImageTags(html.parser.HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.images: list[dict] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


def test_static_readers_get_the_image_with_its_alt_as_markdown_for_jupyterlab():
    explorer = temperature_explorer(SCORES, QUERIES, ['"the"', "cat & co", "<sat>", "mat"])
    bundle = explorer._repr_mimebundle_()
    (image,) = ImageTags(bundle["text/markdown"]).images
    assert image == {"alt": explorer.alt, "src": f"data:image/png;base64,{bundle['image/png']}"}
    assert '"the", cat & co, <sat>' in image["alt"]


def test_a_choice_maps_its_position_to_its_value_and_refuses_others():
    menu = Choice("head", [("0", 0), ("1", 1), ("mean of heads", "mean")], 1)
    assert (menu.index, menu.value, menu.kind) == (1, 1, "menu")
    menu.index = 2  # what the browser sets
    assert menu.value == "mean"
    menu.value = 0
    assert menu.index == 0
    with pytest.raises(ValueError, match=r"head must be one of \[0, 1, 'mean'\]; got 3"):
        menu.value = 3
    assert (menu.index, menu.value) == (0, 0)
    with pytest.raises(traitlets.TraitError, match=r"head: choice 3 of 3"):
        menu.index = 3
    menu.choose([("a", "x"), ("b", "y")], "y")
    assert (menu.labels, menu.index, menu.value) == (["a", "b"], 1, "y")
    with pytest.raises(ValueError, match=r"must be one of \['x'\]; got 'y'"):
        menu.choose([("a", "x")], "y")
    assert menu.options == [("a", "x"), ("b", "y")]
    with pytest.raises(traitlets.TraitError, match=r"kind"):
        Choice("layer", [("0", 0)], 0, kind="dial")


# ----------------------------------------------------------------------------- attention explorer

def random_maps(L=3, B=2, n_heads=4, T_q=6, T_k=6, seed=0):
    """L attention maps (B, n_heads, T_q, T_k) whose rows sum to 1, all different."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(3 * torch.randn(B, n_heads, T_q, T_k, generator=generator), -1)
                 for _ in range(L))


MAPS = random_maps()
SENTENCES = [["[CLS]", "tom", "saw", "her", ".", "[SEP]"],  # 6 tokens: no padding
             ["[CLS]", "she", "ran", "[SEP]"]]              # 4 tokens: 2 of padding


def heatmap_of(explorer: AttentionExplorer) -> np.ndarray:
    return np.asarray(explorer.heatmap_ax.images[0].get_array())


def lines_of(explorer: AttentionExplorer) -> set[tuple[int, int]]:
    """The (query, key) pairs joined by a line in the explorer's line view."""
    (lines,) = explorer.lines_ax.collections
    return {(int(-seg[0][1]), int(-seg[1][1])) for seg in lines.get_segments()}


def test_attention_explorer_builds_headless_on_layer_0_head_0_sentence_0():
    explorer = attention_explorer(MAPS, SENTENCES)
    assert (explorer.layer, explorer.head, explorer.sentence, explorer.query) == (0, 0, 0, None)
    expected = MAPS[0][0, 0].double()
    torch.testing.assert_close(explorer.weights, expected)
    np.testing.assert_allclose(heatmap_of(explorer), expected.numpy(), rtol=1e-6)
    assert [t.get_text() for t in explorer.heatmap_ax.get_xticklabels()] == SENTENCES[0]
    assert lines_of(explorer) == {(i, j) for i in range(6) for j in range(6)
                                  if expected[i, j] >= 0.02}
    assert explorer.layer_slider.options == [("0", 0), ("1", 1), ("2", 2)]
    assert explorer.layer_slider.kind == "slider"
    assert [v for _, v in explorer.head_menu.options] == [0, 1, 2, 3, "mean"]


@pytest.mark.parametrize(("layer", "head"), [(2, 1), (1, 3)])
def test_moving_layer_and_head_controls_redraws_that_map(layer, head):
    explorer = attention_explorer(MAPS, SENTENCES)
    explorer.layer_slider.value = layer  # what a user does in the browser
    explorer.head_menu.value = head
    assert (explorer.layer, explorer.head) == (layer, head)
    torch.testing.assert_close(explorer.weights, MAPS[layer][0, head].double())
    np.testing.assert_allclose(heatmap_of(explorer), MAPS[layer][0, head].numpy(), rtol=1e-6)
    assert f"layer {layer}, head {head}" in explorer.heatmap_ax.get_title()


def test_the_mean_of_heads_is_a_choice_of_the_head_menu():
    explorer = attention_explorer(MAPS, SENTENCES, layer=1)
    explorer.head_menu.value = "mean"
    torch.testing.assert_close(explorer.weights, MAPS[1][0].double().mean(0))
    assert "mean of heads" in explorer.heatmap_ax.get_title()


def test_another_sentence_is_cut_to_its_own_tokens_and_resets_the_query():
    explorer = attention_explorer(MAPS, SENTENCES, query=2)
    explorer.sentence_menu.value = 1
    assert explorer.sentence == 1 and explorer.query is None
    assert explorer.weights.shape == (4, 4)  # the padding rows and columns are left out
    torch.testing.assert_close(explorer.weights, MAPS[0][1, 0, :4, :4].double())
    assert [label for label, _ in explorer.query_menu.options] == [
        "every query", "0: [CLS]", "1: she", "2: ran", "3: [SEP]"]
    assert [t.get_text() for t in explorer.heatmap_ax.get_yticklabels()] == SENTENCES[1]


def test_choosing_a_query_draws_only_its_lines_and_frames_its_row():
    explorer = attention_explorer(MAPS, SENTENCES)
    explorer.query_menu.value = 3
    assert explorer.query == 3
    assert lines_of(explorer) == {(3, j) for j in range(6) if MAPS[0][0, 0, 3, j] >= 0.02}
    assert len(explorer.heatmap_ax.patches) == 1  # the frame around row 3
    explorer.query_menu.value = -1  # "every query"
    assert explorer.query is None and len(lines_of(explorer)) > 6


def test_update_from_code_moves_the_controls():
    explorer = attention_explorer(MAPS, SENTENCES)
    explorer.update(layer=2, head="mean", sentence=1, query=1)
    assert explorer.layer_slider.value == 2 and explorer.head_menu.value == "mean"
    assert explorer.sentence_menu.value == 1 and explorer.query_menu.value == 1
    explorer.update(head=0)  # the rest stays
    assert (explorer.layer, explorer.sentence, explorer.query) == (2, 1, 1)
    torch.testing.assert_close(explorer.weights, MAPS[2][1, 0, :4, :4].double())


def test_several_kinds_of_maps_get_buttons_to_switch_between_them():
    other = random_maps(seed=1)
    explorer = attention_explorer({"raw": MAPS, "norm": other}, SENTENCES, layer=1, head=2)
    assert explorer.view == "raw" and explorer.view_buttons.labels == ["raw", "norm"]
    assert explorer.view_buttons.kind == "buttons"
    explorer.view_buttons.value = "norm"
    torch.testing.assert_close(explorer.weights, other[1][0, 2].double())
    assert explorer.heatmap_ax.get_title().startswith("norm: layer 1, head 2")
    assert "view='norm'" in repr(explorer)
    assert attention_explorer(MAPS, SENTENCES).view_buttons is None


def test_cross_attention_maps_with_their_own_key_tokens():
    maps = random_maps(L=2, B=1, T_q=3, T_k=5)
    explorer = attention_explorer(maps, ["2", "4", "<end>"],
                                  key_tokens=["four", "and", "twenty", "<pad>", "<pad>"][:4])
    assert explorer.weights.shape == (3, 4)
    assert [t.get_text() for t in explorer.heatmap_ax.get_xticklabels()] == [
        "four", "and", "twenty", "<pad>"]


def test_it_works_on_the_attentions_of_a_course_bert():
    torch.manual_seed(0)
    model = Bert(BertConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, d_ff=32)).eval()
    ids = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 3, 0, 0]])
    keep = ids != 0
    with torch.no_grad():
        out = model(ids, attention_mask=keep)
    tokens = [["[CLS]", "a", "b", "c", "[SEP]"], ["[CLS]", "d", "[SEP]"]]
    explorer = attention_explorer(out.attentions, tokens, layer=1, head=1, sentence=1)
    torch.testing.assert_close(explorer.weights, out.attentions[1][1, 1, :3, :3].double())
    torch.testing.assert_close(explorer.weights.sum(-1), torch.ones(3, dtype=torch.float64))


def test_it_works_on_minilm_with_the_course_tokenizer():
    model = load_minilm()
    tokenizer = WordPiece.from_vocab_file(minilm_files().vocab)
    texts = ["mary gave tom a red ball .", "he ran ."]
    ids, segments, keep = tokenizer.encode_batch(texts)
    with torch.no_grad():
        out = model(ids, segments, keep)
    tokens = [["[CLS]", *tokenizer.tokenize(t), "[SEP]"] for t in texts]
    explorer = attention_explorer(out.attentions, tokens, layer=5, head=11, sentence=1)
    assert explorer.n_layers == 6 and explorer.n_heads == 12
    torch.testing.assert_close(explorer.weights, out.attentions[5][1, 11, :5, :5].double())
    assert [t.get_text() for t in explorer.heatmap_ax.get_xticklabels()] == [
        "[CLS]", "he", "ran", ".", "[SEP]"]


def test_attention_explorer_leaves_a_png_and_a_stable_text_for_readers_without_widgets():
    explorer = attention_explorer(MAPS, SENTENCES)
    bundle = explorer._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_MAGIC)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == ("AttentionExplorer(layer=0, head=0, sentence=0, query=None; "
                                    "3 layers x 4 heads, 2 sentences)")
    first_png = bundle["image/png"]
    explorer.update(layer=1)
    bundle = explorer._repr_mimebundle_()
    assert bundle["image/png"] != first_png, "the PNG must follow the controls"
    assert explorer.figure_view.png == bundle["image/png"]  # what the widget shows
    assert explorer.figure_view.alt == explorer.alt and "layer 1," in explorer.alt


def test_the_attention_figure_is_described_in_words_as_it_is_drawn():
    explorer = attention_explorer({"raw": MAPS, "norm": random_maps(seed=1)}, SENTENCES,
                                  layer=2, head=1, query=2, title="Maps")
    row = MAPS[2][0, 1, 2].double()
    drawn = [j for j in torch.argsort(row, descending=True).tolist() if row[j] >= 0.02]
    assert explorer.alt == (
        "Maps. raw, layer 2, head 1, sentence 0 ([CLS] tom saw her . [SEP]): a heatmap of the "
        "weights of its 6 queries (rows) over its 6 keys, the row of query 2 (saw) framed, and "
        "lines from it to each key it gives at least 0.02: "
        + ", ".join(f"{SENTENCES[0][j]} ({row[j]:.2f})" for j in drawn) + ".")
    explorer.update(head="mean", sentence=1)  # every query of a sentence with padding
    mean = MAPS[2][1, :, :4, :4].double().mean(0)
    assert "layer 2, the mean of its heads, sentence 1 ([CLS] she ran [SEP])" in explorer.alt
    assert explorer.alt.endswith("The largest weight of each query: " + "; ".join(
        f"{q} on {SENTENCES[1][int(mean[i].argmax())]} ({mean[i].max():.2f})"
        for i, q in enumerate(SENTENCES[1])) + ".")


def test_one_sentence_may_be_given_as_a_plain_list_of_tokens():
    maps = random_maps(L=1, B=1, T_q=4, T_k=4)[0]  # one tensor: one layer
    explorer = attention_explorer(maps, ["[CLS]", "a", "b", "[SEP]"])
    assert explorer.n_layers == 1 and explorer.tokens == [["[CLS]", "a", "b", "[SEP]"]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"attentions": ()}, r"tuple or list of L tensors .* of length 0",
                     id="no-layers"),
        pytest.param({"attentions": MAPS[0][0]}, r"attentions\[0\] must have 4 dimension",
                     id="3-d-map"),
        pytest.param({"attentions": (MAPS[0], MAPS[1][:, :2])},
                     r"attentions\[1\] must have the shape of attentions\[0\]",
                     id="layers-of-different-shapes"),
        pytest.param({"attentions": (MAPS[0], torch.full((2, 4, 6, 6), float("nan")))},
                     r"attentions\[1\] contains NaN", id="nan"),
        pytest.param({"attentions": tuple(m.long() for m in MAPS)}, r"floating-point",
                     id="integer-maps"),
        pytest.param({"attentions": {}}, r"at least one kind of maps", id="empty-mapping"),
        pytest.param({"attentions": {"raw": MAPS, "other": random_maps(L=2)}},
                     r"same number of layers and shape", id="views-that-differ"),
        pytest.param({"tokens": SENTENCES[:1]}, r"tokens must hold B = 2 lists", id="one-list"),
        pytest.param({"tokens": "tom saw her"}, r"tokens must be a list of B = 2 lists",
                     id="a-string"),
        pytest.param({"tokens": [SENTENCES[0] + ["extra"], SENTENCES[1]]},
                     r"tokens\[0\] must hold 1 to 6 tokens.* got 7", id="too-many-tokens"),
        pytest.param({"tokens": [SENTENCES[0], []]}, r"tokens\[1\] must hold 1 to 6 tokens",
                     id="empty-sentence"),
        pytest.param({"attentions": random_maps(T_k=7)}, r"not square .* pass key_tokens",
                     id="non-square-without-key-tokens"),
        pytest.param({"names": ["one"]}, r"names must have one label per sentence",
                     id="too-few-names"),
        pytest.param({"layer": 3}, r"layer must be an int in \[0, 2\]; got 3",
                     id="layer-off-the-end"),
        pytest.param({"head": 4}, r"head .* must be an int in \[0, 3\]; got 4",
                     id="head-off-the-end"),
        pytest.param({"head": "all"}, r"head .* must be an int", id="head-not-mean"),
        pytest.param({"sentence": 2}, r"sentence must be an int in \[0, 1\]; got 2",
                     id="sentence-off-the-end"),
        pytest.param({"query": 6}, r"query must be an int in \[0, 5\]; got 6",
                     id="query-off-the-end"),
        pytest.param({"view": "norm"}, r"view must be one of \('attention',\)",
                     id="unknown-view"),
        pytest.param({"min_weight": -0.1}, r"min_weight must be a weight in \[0, 1\]",
                     id="negative-min-weight"),
    ],
)
def test_attention_explorer_rejects_bad_input_with_a_message(kwargs, message):
    arguments = {"attentions": MAPS, "tokens": SENTENCES, **kwargs}
    with pytest.raises(ValueError, match=message):
        attention_explorer(**arguments)


def test_a_bad_update_changes_nothing():
    explorer = attention_explorer(MAPS, SENTENCES, layer=1, head=2)
    with pytest.raises(ValueError, match=r"query must be an int in \[0, 3\]"):
        explorer.update(sentence=1, query=5)  # sentence 1 has 4 tokens
    assert (explorer.layer, explorer.head, explorer.sentence) == (1, 2, 0)
    torch.testing.assert_close(explorer.weights, MAPS[1][0, 2].double())
