"""course_utils.analysis: attention to tokens, pattern types, norm-based attention, syntax
accuracy and heads switched off, on hand-computed maps, prototypes and a small BERT."""

from __future__ import annotations

import pytest
import torch

from course_utils.analysis import (
    PATTERN_TYPES,
    _transformed_values,
    attention_to_tokens,
    best_offset_baseline,
    choose_and_report,
    classify_pattern,
    each_head_off,
    head_pattern_types,
    heads_off_mask,
    held_out_offset,
    n_queries,
    nearest_word_baseline,
    norm_weighted_attention,
    offset_baseline,
    pattern_features,
    pattern_shares,
    relation_accuracy,
    value_norms,
    value_vectors,
)
from course_utils.multihead import MultiHeadAttention

# ----------------------------------------------------------------------------- attention to tokens

# one sentence, ids 5 7 5: token 5 sits at keys 0 and 2
MAP_A = [[0.5, 0.2, 0.3],
         [0.3, 0.4, 0.3],
         [0.6, 0.0, 0.4]]   # mass on keys {0, 2} per query: 0.8, 0.6, 1.0
# a padded sentence, ids 5 7 [PAD]: the third query is padding and must not count
MAP_B = [[0.25, 0.75, 0.0],
         [1.0, 0.0, 0.0],
         [0.5, 0.5, 0.0]]   # real queries: 0.25, 1.0


def test_attention_to_tokens_one_sentence_by_hand():
    a = torch.tensor([[MAP_A]])                                  # (1, 1, 3, 3)
    got = attention_to_tokens(a, torch.tensor([[5, 7, 5]]), 5)
    assert got.shape == (1, 1)
    assert got.item() == pytest.approx((0.8 + 0.6 + 1.0) / 3)
    # the wrong axis: the mean over keys of the mass that token 5 sends as a query
    wrong = a[0, 0].T[:, [0, 2]].sum(1).mean()                   # 2/3 whatever the map
    assert wrong.item() == pytest.approx(2 / 3) and got.item() != pytest.approx(2 / 3)


def test_attention_to_tokens_leaves_padding_queries_and_keys_out():
    a = torch.tensor([[MAP_A], [MAP_B]])                         # (2, 1, 3, 3)
    ids = torch.tensor([[5, 7, 5], [5, 7, 0]])
    keep = torch.tensor([[True, True, True], [True, True, False]])
    got = attention_to_tokens([a], ids, {5}, keep)
    assert got.item() == pytest.approx((0.8 + 0.6 + 1.0 + 0.25 + 1.0) / 5)
    # with the padding query counted it would be (... + 0.5) / 6
    assert got.item() != pytest.approx((0.8 + 0.6 + 1.0 + 0.25 + 1.0 + 0.5) / 6)
    # the [PAD] id among token_ids changes nothing: padded keys are not real
    assert attention_to_tokens([a], ids, [5, 0], keep).item() == pytest.approx(got.item())


def test_attention_to_tokens_keeps_layers_and_heads_apart():
    uniform = torch.full((3, 3), 1 / 3)
    layer0 = torch.stack([torch.tensor(MAP_A), uniform])[None]   # (1, 2, 3, 3)
    layer1 = torch.stack([uniform, torch.eye(3)])[None]
    got = attention_to_tokens((layer0, layer1), torch.tensor([[5, 7, 5]]), (5,))
    want = torch.tensor([[0.8, 2 / 3], [2 / 3, 2 / 3]], dtype=torch.float64)
    torch.testing.assert_close(got, want)
    # every id: the whole mass
    all_ids = attention_to_tokens((layer0, layer1), torch.tensor([[5, 7, 5]]), {5, 7})
    torch.testing.assert_close(all_ids, torch.ones(2, 2, dtype=torch.float64))


def test_attention_to_tokens_errors():
    ids = torch.tensor([[5, 7, 5]])
    good = torch.full((1, 2, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"attentions\[1\] must have shape \(B, n_heads, T, "
                                         r"T\) = \(1, 2, 3, 3\).*got \(1, 3, 3, 3\)"):
        attention_to_tokens([good, torch.full((1, 3, 3, 3), 1 / 3)], ids, 5)
    with pytest.raises(ValueError, match=r"attentions\[0\] must have 4 dimension"):
        attention_to_tokens([good[0]], ids, 5)
    with pytest.raises(ValueError, match=r"ids must have shape \(B, T\) = \(1, 3\)"):
        attention_to_tokens(good, torch.tensor([[5, 7]]), 5)
    with pytest.raises(ValueError, match="int64"):
        attention_to_tokens(good, ids.float(), 5)
    with pytest.raises(ValueError, match="attention_mask must have dtype torch.bool"):
        attention_to_tokens(good, ids, 5, torch.ones(1, 3))
    with pytest.raises(ValueError, match="no real token in sentence"):
        attention_to_tokens(good, ids, 5, torch.zeros(1, 3, dtype=torch.bool))
    for bad in ([], "5", [5.0]):
        with pytest.raises(ValueError, match="token_ids must be an int or"):
            attention_to_tokens(good, ids, bad)
    with pytest.raises(ValueError, match="tuple or list of L tensors"):
        attention_to_tokens([], ids, 5)


# ----------------------------------------------------------------------------- pattern types

def sentence(n_a, n_b=0):
    """[CLS] a.. [SEP] (b.. [SEP]): is_special (T,), segment (T,)."""
    special = [True] + [False] * n_a + [True] + ([False] * n_b + [True] if n_b else [])
    segment = [0] * (n_a + 2) + [1] * (n_b + 1 if n_b else 0)
    return torch.tensor(special), torch.tensor(segment)


def rows(fill, T):
    """A (T, T) map whose row i is fill(i) (a dict key -> weight); rows must sum to 1."""
    w = torch.zeros(T, T, dtype=torch.float64)
    for i in range(T):
        for j, value in fill(i).items():
            w[i, j] += value
    torch.testing.assert_close(w.sum(1), torch.ones(T, dtype=torch.float64))
    return w


def prototypes():
    special, seg = sentence(12)                          # T = 14, [SEP] at 13
    T = len(special)
    content = lambda i: not special[i]   # noqa: E731
    own = lambda i: {i: 1.0}             # noqa: E731
    special2, seg2 = sentence(7, 6)                       # T = 16, [SEP] at 8 and 15
    a_words, b_words = range(1, 8), range(9, 15)

    def in_segment(i, extra=None):
        words = a_words if i < 9 else b_words
        out = {j: (1 - sum((extra or {}).values())) / len(words) for j in words}
        return out | (extra or {})

    return [
        ("vertical", rows(lambda i: {0: 0.5, 13: 0.5} if content(i) else own(i), T), special,
         seg),
        ("vertical", rows(lambda i: {13: 1.0}, T), special, seg),
        ("diagonal", rows(lambda i: {i - 1: 1.0} if content(i) else own(i), T), special, seg),
        ("diagonal", rows(lambda i: {i + 1: 0.7, i: 0.3} if i < 12 else own(i), T), special,
         seg),
        ("vertical+diagonal", rows(lambda i: {13: 0.5, i - 1: 0.5} if i else own(i), T),
         special, seg),
        ("block", rows(lambda i: in_segment(i) if not special2[i] else own(i), 16), special2,
         seg2),
        ("block", rows(lambda i: in_segment(i, {8: 0.2}) if not special2[i] else own(i), 16),
         special2, seg2),
    ]


@pytest.mark.parametrize("index", range(7))
def test_each_prototype_gets_its_type(index):
    kind, weights, special, segment = prototypes()[index]
    assert classify_pattern(weights, special, segment) == kind
    assert classify_pattern(weights.float(), special, segment) == kind


def peaky_types(special, segment, n, seed=0):
    """The types of n random maps whose rows put nearly all their mass on one random key."""
    T, gen = len(special), torch.Generator().manual_seed(seed)
    return [classify_pattern(torch.softmax(8 * torch.randn(T, T, generator=gen), dim=-1),
                             special, segment) for _ in range(n)]


def test_uniform_and_random_peaky_maps_are_heterogeneous():
    for special, segment in (sentence(12), sentence(7, 6), sentence(20), sentence(10, 9)):
        T = len(special)
        assert classify_pattern(torch.full((T, T), 1 / T), special, segment) == "heterogeneous"
        assert classify_pattern(torch.full((T, T), 1 / T), special) == "heterogeneous"
    for special, segment in (sentence(20), sentence(10, 9)):      # T = 22
        assert set(peaky_types(special, segment, 50)) == {"heterogeneous"}
    # over 14-16 tokens the specials and the band cover a third of the keys: a random peaky
    # map is misread now and then by chance (about 1-2%)
    for special, segment in (sentence(12), sentence(7, 6)):
        assert peaky_types(special, segment, 200).count("heterogeneous") >= 0.95 * 200


def test_pattern_features_by_hand():
    special, segment = torch.tensor([True, False, False, True, False, True]), \
        torch.tensor([0, 0, 0, 0, 1, 1])                 # [CLS] a b [SEP] c [SEP]
    w = torch.tensor([[1.0, 0, 0, 0, 0, 0],
                      [0.5, 0.2, 0.1, 0, 0.2, 0],        # row a: special .5, band .3, own .3
                      [0, 0.4, 0, 0.6, 0, 0],            # row b: special .6, band .4, own .4
                      [0, 0, 0, 1.0, 0, 0],
                      [0, 0.5, 0, 0, 0.25, 0.25],        # row c: special .25, band .25, own .25
                      [0, 0, 0, 0, 0, 1.0]])
    got = pattern_features(w, special, segment)
    assert got == pytest.approx({"special": (0.5 + 0.6 + 0.25) / 3,
                                 "diagonal": (0.3 + 0.4 + 0.25) / 3,
                                 "block": ((0.3 + 0.4) / 2 + 0.25) / 2})   # segments count once
    assert pattern_features(w, special)["block"] == 0.0  # one segment: no block


def test_pattern_feature_errors():
    special, _ = sentence(3)
    with pytest.raises(ValueError, match=r"square \(T, T\)"):
        pattern_features(torch.full((5, 4), 0.25), special)
    with pytest.raises(ValueError, match="is_special must have dtype torch.bool"):
        pattern_features(torch.full((5, 5), 0.2), special.long())
    with pytest.raises(ValueError, match=r"is_special must have shape \(5,\)"):
        pattern_features(torch.full((5, 5), 0.2), special[:4])
    with pytest.raises(ValueError, match="marks every token"):
        pattern_features(torch.full((2, 2), 0.5), torch.tensor([True, True]))
    with pytest.raises(ValueError, match=r"segment must have shape \(T,\) = \(5,\)"):
        pattern_features(torch.full((5, 5), 0.2), special, torch.zeros(4, dtype=torch.long))


def test_head_pattern_types_votes_over_sentences_and_cuts_padding():
    found = {kind: (w, s) for kind, w, s, _ in prototypes()[:5]}
    T = 14
    vertical, diagonal, both = (found[k][0].float() for k in
                                ("vertical", "diagonal", "vertical+diagonal"))
    ids = torch.full((3, T + 2), 9)
    ids[:, 0], ids[:, T - 1] = 1, 2                       # [CLS] = 1, [SEP] = 2
    keep = torch.ones(3, T + 2, dtype=torch.bool)
    keep[:, T:] = False                                   # two padding positions each
    ids[:, T:] = 0

    def padded(w):   # padding rows and keys filled with junk that would change the masses
        out = torch.full((T + 2, T + 2), 0.5)
        out[:T, :T] = w
        return out

    # head 0: vertical, vertical, diagonal -> vertical; head 1: diagonal, both, vertical:
    # a three-way tie -> vertical (first in PATTERN_TYPES); head 2: both twice
    maps = [[vertical, diagonal, both], [vertical, both, both], [diagonal, vertical, vertical]]
    a = torch.stack([torch.stack([padded(w) for w in heads]) for heads in maps])  # (3, 3, ..)
    got = head_pattern_types([a, a], ids, {1, 2}, attention_mask=keep)
    assert got == [["vertical", "vertical", "vertical+diagonal"]] * 2
    # a single map, without padding, is classified as classify_pattern does
    one = head_pattern_types(vertical[None, None], ids[:1, :T], [1, 2])
    assert one == [["vertical"]]
    with pytest.raises(ValueError, match="only special tokens"):
        head_pattern_types(vertical[None, None], torch.ones(1, T, dtype=torch.long), [1])
    with pytest.raises(ValueError, match=r"segments must have shape \(B, T\) = \(1, 14\)"):
        head_pattern_types(vertical[None, None], ids[:1, :T], [1, 2],
                           torch.zeros(1, 3, dtype=torch.long))


def test_head_pattern_types_match_classify_pattern_on_random_maps():
    gen = torch.Generator().manual_seed(3)
    B, h, T = 4, 5, 12
    a = torch.softmax(3 * torch.randn(B, h, T, T, generator=gen), dim=-1)
    ids = torch.randint(3, 20, (B, T), generator=gen)
    ids[:, 0], ids[:, -1] = 1, 2
    segments = (torch.arange(T) >= 6).long().expand(B, T).contiguous()
    got = head_pattern_types(a, ids, {1, 2}, segments)
    assert len(got) == 1 and all(t in PATTERN_TYPES for t in got[0]) and len(got[0]) == h
    for head in range(h):
        votes = [classify_pattern(a[b, head], torch.isin(ids[b], torch.tensor([1, 2])),
                                  segments[b]) for b in range(B)]
        best = max(PATTERN_TYPES, key=lambda k: (votes.count(k), -PATTERN_TYPES.index(k)))
        assert got[0][head] == best


def test_pattern_shares():
    shares = pattern_shares([["vertical", "block"], ["vertical", "heterogeneous"]])
    assert shares == {"vertical": 0.5, "diagonal": 0.0, "vertical+diagonal": 0.0,
                      "block": 0.25, "heterogeneous": 0.25}
    assert sum(shares.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="must be among"):
        pattern_shares([["vertical", "horizontal"]])
    with pytest.raises(ValueError, match="at least one"):
        pattern_shares([[]])


# ----------------------------------------------------------------------------- norms

def attention(d_model=12, n_heads=3, bias=True, seed=0):
    torch.manual_seed(seed)
    attn = MultiHeadAttention(d_model, n_heads, bias=bias).double()
    if bias:
        with torch.no_grad():
            for layer in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
                layer.bias.normal_()
    return attn


def f_by_loop(attn, x):
    """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, one head at a time: (B, h, T, d_model)."""
    out = []
    for h in range(attn.n_heads):
        cols = slice(h * attn.d_k, (h + 1) * attn.d_k)
        v = x @ attn.w_v.weight[cols].T                   # (B, T, d_k)
        if attn.w_v.bias is not None:
            v = v + attn.w_v.bias[cols]
        out.append(v @ attn.w_o.weight[:, cols].T)        # (B, T, d_model)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("bias", [True, False])
def test_kobayashi_identity_with_biases_and_padding(bias):
    attn = attention(bias=bias)
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    out, alpha = attn(x, x, x, keep[:, None, None, :])
    f = _transformed_values(attn, x)                       # (B, h, T, d_model)
    torch.testing.assert_close(f, f_by_loop(attn, x), rtol=0, atol=1e-12)
    y = torch.einsum("bhij,bhjd->bid", alpha, f)          # summed over keys and heads
    if bias:
        y = y + attn.w_o.bias
    assert (y - out).abs().max() < 1e-10
    got = norm_weighted_attention(attn, x, keep)
    want = alpha * f.norm(dim=-1)[:, :, None, :]
    assert (got - want).abs().max() < 1e-12
    # the norms of alpha_ij f(x_j), one vector at a time
    direct = (alpha[..., None] * f[:, :, None, :, :]).norm(dim=-1)   # (B, h, T, T)
    assert (got - direct).abs().max() < 1e-12
    assert (got[1, :, :, 3:] == 0).all()                   # padded keys
    # a 4-d mask gives the same, and so does no mask when nothing is padded
    torch.testing.assert_close(norm_weighted_attention(attn, x, keep[:, None, None, :]), got)
    torch.testing.assert_close(norm_weighted_attention(attn, x[:1])[0], got[0])


def test_norm_weighted_attention_with_a_causal_mask():
    attn = attention()
    x = torch.randn(1, 4, 12, dtype=torch.float64)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]   # (1, 1, T, T)
    got = norm_weighted_attention(attn, x, causal)
    assert (got[0, :, 0, 1:] == 0).all() and (got[0, :, 3] > 0).all()


def test_value_norms_against_a_loop_over_heads():
    attn = attention(d_model=16, n_heads=4, seed=1)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    got = value_norms(attn, x)
    assert got.shape == (3, 4, 6)
    for h in range(4):
        cols = slice(4 * h, 4 * h + 4)
        for b in range(3):
            for j in range(6):
                v = attn.w_v.weight[cols] @ x[b, j] + attn.w_v.bias[cols]
                want = (attn.w_o.weight[:, cols] @ v).norm()
                assert abs(got[b, h, j] - want) < 1e-12


def test_value_vectors_sum_to_the_attention_output():
    """sum_h sum_j alpha^h_ij f^h(x_j) + b_O is the layer's own output (Kobayashi et al.)."""
    attn = attention(d_model=16, n_heads=4, seed=2)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        out, weights = attn(x, x, x)                 # (B, T, d_model), (B, h, T, T)
    f = value_vectors(attn, x)                       # (B, h, T, d_model)
    rebuilt = torch.einsum("bhij,bhjd->bid", weights, f) + attn.w_o.bias
    torch.testing.assert_close(rebuilt, out)
    torch.testing.assert_close(f.norm(dim=-1), value_norms(attn, x))
    with pytest.raises(ValueError, match="d_model = 16"):
        value_vectors(attn, torch.randn(2, 5, 8, dtype=torch.float64))


def test_norm_errors():
    attn = attention()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, d_model = 12\)"):
        value_norms(attn, torch.randn(2, 5, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="x must have 3 dimension"):
        norm_weighted_attention(attn, x[0])
    with pytest.raises(ValueError, match="dtype of attn's weights"):
        value_norms(attn, x.float())
    with pytest.raises(ValueError, match="MultiHeadAttention"):
        value_norms(torch.nn.MultiheadAttention(12, 3, batch_first=True), x)
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 5\)"):
        norm_weighted_attention(attn, x, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must have dtype torch.bool"):
        norm_weighted_attention(attn, x, torch.ones(2, 5))


# ----------------------------------------------------------------------------- syntax

#           [CLS] w0   w1a  w1b  w2   [SEP]
WORD_IDS = [None, 0, 1, 1, 2, None]
RELATIONS = [(0, 1), (2, 1), (1, 0)]
HEAD0 = [[1.0, 0, 0, 0, 0, 0],
         [0.5, 0.1, 0.1, 0.12, 0.18, 0],   # w0 -> w1 (0.22 summed over pieces) beats w2 (0.18)
         [0, 0.2, 0, 0.5, 0.3, 0],         # w1 (first piece) -> w2: wrong (head is w0)
         [0, 0.9, 0, 0, 0.1, 0],           # w1's second piece -> w0: not read
         [0, 0.15, 0.1, 0.1, 0.6, 0.05],   # w2 -> w1 (0.2) beats w0 (0.15); itself left out
         [0, 0, 0, 0, 0, 1.0]]


def test_relation_accuracy_on_a_crafted_map():
    uniform = torch.full((6, 6), 1 / 6)    # w0 -> w1, w2 -> w1, w1 -> w0 (a tie, lower index)
    a = torch.stack([torch.tensor(HEAD0), uniform])[None]   # (1, 2, 6, 6)
    got = relation_accuracy([a], [WORD_IDS], [RELATIONS])
    assert got.shape == (1, 2)
    torch.testing.assert_close(got, torch.tensor([[2 / 3, 1.0]], dtype=torch.float64))


def test_relation_accuracy_over_a_padded_batch():
    a = torch.stack([torch.tensor(HEAD0), torch.full((6, 6), 1 / 6)])   # (2, 6, 6)
    second = torch.zeros(2, 6, 6)
    second[:, :4, :4] = torch.tensor([[1.0, 0, 0, 0], [0, 0, 1.0, 0], [0, 0.3, 0.7, 0],
                                      [0, 0, 0, 1.0]])   # [CLS] v0 v1 [SEP] [PAD] [PAD]
    second[:, 4:, 4:] = 0.5                               # junk under the padding
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    word_ids = [WORD_IDS, [None, 0, 1, None, 5, 5]]       # padded positions ignored
    relations = [RELATIONS, [(0, 1), (1, 0)]]
    got = relation_accuracy((torch.stack([a, second]),), word_ids, relations, keep)
    torch.testing.assert_close(got, torch.tensor([[4 / 5, 1.0]], dtype=torch.float64))


def test_relation_accuracy_errors():
    a = torch.full((1, 1, 6, 6), 1 / 6)
    with pytest.raises(ValueError, match="word 3 has no real token"):
        relation_accuracy(a, [WORD_IDS], [[(0, 3)]])
    with pytest.raises(ValueError, match="two different word indices"):
        relation_accuracy(a, [WORD_IDS], [[(1, 1)]])
    with pytest.raises(ValueError, match=r"word_ids\[0\] must hold T = 6 entries"):
        relation_accuracy(a, [WORD_IDS[:5]], [RELATIONS])
    with pytest.raises(ValueError, match="B = 1 lists"):
        relation_accuracy(a, [WORD_IDS, WORD_IDS], [RELATIONS])
    with pytest.raises(ValueError, match="no \\(dependent, head\\) pair"):
        relation_accuracy(a, [WORD_IDS], [[]])


def test_baselines():
    assert nearest_word_baseline([RELATIONS]) == pytest.approx(2 / 3)   # next, next, last
    assert nearest_word_baseline([RELATIONS], n_words=[4]) == pytest.approx(1 / 3)
    assert offset_baseline([RELATIONS], 1) == pytest.approx(1 / 3)
    assert offset_baseline([RELATIONS], -1) == pytest.approx(2 / 3)
    assert offset_baseline([RELATIONS], 3) == 0.0
    assert best_offset_baseline([RELATIONS]) == (-1, pytest.approx(2 / 3))
    assert best_offset_baseline([[(0, 2), (1, 3)], [(3, 1)]]) == (2, pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="nonzero int"):
        offset_baseline([RELATIONS], 0)
    with pytest.raises(ValueError, match="outside a sentence of 2 words"):
        nearest_word_baseline([RELATIONS], n_words=[2])


def test_a_query_with_two_targets_counts_once_and_either_is_right():
    """A verb with two subjects is one query: right when it picks either subject."""
    #           [CLS] w0   w1   w2   [SEP]      w2 attends most to w0
    word_ids = [None, 0, 1, 2, None]
    a = torch.zeros(1, 1, 5, 5)
    a[0, 0] = torch.eye(5)
    a[0, 0, 3] = torch.tensor([0.1, 0.6, 0.2, 0.1, 0.0])
    relations = [[(2, 0), (2, 1)]]
    assert n_queries(relations) == 1
    torch.testing.assert_close(relation_accuracy([a], [word_ids], relations),
                               torch.tensor([[1.0]], dtype=torch.float64))
    assert offset_baseline(relations, -1) == 1.0 and offset_baseline(relations, -2) == 1.0
    assert nearest_word_baseline(relations, n_words=[3]) == 1.0   # the last word: previous
    assert n_queries([[(2, 0), (2, 1)], [(0, 1), (1, 0)]]) == 3


def test_choose_and_report_scores_the_chosen_head_on_the_other_data():
    choose = torch.tensor([[0.2, 0.9], [0.9, 0.1]], dtype=torch.float64)   # a tie: (0, 1)
    report = torch.tensor([[0.8, 0.3], [0.7, 0.6]], dtype=torch.float64)
    assert choose_and_report(choose, report) == ((0, 1), pytest.approx(0.9), pytest.approx(0.3))
    with pytest.raises(ValueError, match="same shape"):
        choose_and_report(choose, report[:1])
    with pytest.raises(ValueError, match="choose"):
        choose_and_report([[0.1]], report)


def test_held_out_offset_picks_on_one_set_and_measures_on_the_other():
    choose = [[(0, 1), (2, 3)], [(1, 2)]]        # +1 always
    report = [[(0, 1), (3, 1)], [(2, 0)]]        # +1 once in three
    assert held_out_offset(choose, report) == (1, pytest.approx(1.0), pytest.approx(1 / 3))


# ----------------------------------------------------------------------------- heads off

def test_heads_off_mask():
    mask = heads_off_mask(3, 4, [(0, 1), (2, 3), (0, 1)])
    want = torch.ones(3, 4)
    want[0, 1] = want[2, 3] = 0
    assert mask.dtype == torch.float32 and torch.equal(mask, want)
    assert torch.equal(heads_off_mask(2, 2, []), torch.ones(2, 2))
    for bad in ([(3, 0)], [(0, 4)], [(-1, 0)], [(0,)], [(0, 1.0)], [(True, 0)]):
        with pytest.raises(ValueError, match=r"layer in \[0, 2\] and head in \[0, 3\]"):
            heads_off_mask(3, 4, bad)
    with pytest.raises(ValueError, match="iterable of \\(layer, head\\) pairs"):
        heads_off_mask(3, 4, 5)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        heads_off_mask(0, 4, [])


def test_each_head_off_calls_the_metric_once_per_head():
    seen = []

    def metric(mask):
        seen.append(mask.clone())
        (layer, head), = (mask == 0).nonzero().tolist()
        return 10 * layer + head + 0.5

    got = each_head_off(metric, 2, 3)
    assert len(seen) == 6
    assert all(int((m == 0).sum()) == 1 for m in seen)
    torch.testing.assert_close(got, torch.tensor([[0.5, 1.5, 2.5], [10.5, 11.5, 12.5]],
                                                 dtype=torch.float64))
    assert each_head_off(lambda m: torch.tensor(1.0), 1, 1).item() == 1.0
    with pytest.raises(ValueError, match="metric must return a number"):
        each_head_off(lambda m: "high", 1, 2)


# ----------------------------------------------------------------------------- a small BERT

def test_on_a_small_random_bert():
    bert = pytest.importorskip("course_utils.bert")
    torch.manual_seed(0)
    cfg = bert.BertConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    model = bert.Bert(cfg).eval()
    ids = torch.randint(5, 50, (2, 9))
    ids[:, 0], ids[0, 8], ids[1, 5] = 1, 2, 2             # [CLS] = 1, [SEP] = 2
    ids[1, 6:] = 0                                         # [PAD] = 0
    keep = ids != 0
    with torch.no_grad():
        out = model(ids, attention_mask=keep)
    for layer in range(cfg.n_layers):   # hidden_states[l] is the input of layer l
        attn = model.layers[layer].self_attn
        x = out.hidden_states[layer]
        got = norm_weighted_attention(attn, x, keep)
        want = out.attentions[layer] * value_norms(attn, x)[:, :, None, :]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    to_sep = attention_to_tokens(out.attentions, ids, 2, keep)
    assert to_sep.shape == (2, 4) and ((to_sep > 0) & (to_sep < 1)).all()
    everything = attention_to_tokens(out.attentions, ids, range(50), keep)
    torch.testing.assert_close(everything, torch.ones(2, 4, dtype=torch.float64))
    types = head_pattern_types(out.attentions, ids, {0, 1, 2}, attention_mask=keep)
    assert len(types) == 2 and all(len(row) == 4 and set(row) <= set(PATTERN_TYPES)
                                   for row in types)
    # a head switched off attends nowhere, and changes the output
    with torch.no_grad():
        off = model(ids, attention_mask=keep, head_mask=heads_off_mask(2, 4, [(1, 2)]))
    assert attention_to_tokens(off.attentions, ids, range(50), keep)[1, 2] == 0

    def metric(mask):
        with torch.no_grad():
            y = model(ids, attention_mask=keep, head_mask=mask).last_hidden_state
        return float((y - out.last_hidden_state).abs().max())

    changes = each_head_off(metric, cfg.n_layers, cfg.n_heads)
    assert changes.shape == (2, 4) and (changes > 0).all()
    assert metric(heads_off_mask(2, 4, [])) == 0.0
