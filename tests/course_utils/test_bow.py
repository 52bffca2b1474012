"""course_utils.bow: the bag-of-words language models of unit 01, checked against explicit
formulas and against PyTorch's own scaled_dot_product_attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import bow


def randn(*shape, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def rand_mask(*shape, seed=0, p=0.7):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=gen) < p


def small_model(pooling="attention", score="dot", vocab=30, seed=0):
    torch.manual_seed(seed)
    config = bow.BowConfig(vocab, d_emb=8, n_ctx=4, pooling=pooling, score=score, d_a=6)
    return bow.BagOfWordsLM(config)


# --------------------------------------------------------------------------- windows


def test_context_windows_hold_the_words_before_each_position():
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    context, mask = bow.context_windows(ids, 3)
    assert context.shape == mask.shape == (1, 5, 3) and mask.dtype == torch.bool
    assert context[0].tolist() == [[0, 0, 0], [0, 0, 5], [0, 5, 6], [5, 6, 7], [6, 7, 8]]
    assert mask[0].tolist() == [[False] * 3, [False, False, True], [False, True, True],
                                [True] * 3, [True] * 3]


def test_context_windows_mask_padding_inside_a_sequence_too():
    ids = torch.tensor([[4, 0, 6], [7, 8, 9]])  # a <pad> (id 0) inside the first row
    context, mask = bow.context_windows(ids, 2, pad_id=0)
    assert mask[0].tolist() == [[False, False], [False, True], [True, False]]
    assert mask[1].tolist() == [[False, False], [False, True], [True, True]]
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        bow.context_windows(torch.tensor([1, 2, 3]), 2)
    with pytest.raises(ValueError, match="n_ctx must be a positive int"):
        bow.context_windows(ids, 0)


# --------------------------------------------------------------------------- scores


def test_dot_scores_shape_values_and_symmetry():
    q, k = randn(2, 5, 8, seed=1), randn(2, 5, 3, 8, seed=2)  # (B, T, D), (B, T, W, D)
    e = bow.dot_scores(q, k)
    assert e.shape == (2, 5, 3)
    torch.testing.assert_close(e, torch.einsum("btd,btwd->btw", q, k))
    a, b = randn(8, seed=3), randn(8, seed=4)
    torch.testing.assert_close(bow.dot_scores(a, b[None]), bow.dot_scores(b, a[None]))


def test_feedforward_scores_match_the_concatenation_formula():
    D, H = 4, 6
    q, k = randn(2, 3, D, seed=1), randn(2, 3, 5, D, seed=2)
    weight, bias, v = randn(H, 2 * D, seed=3), randn(H, seed=4), randn(H, seed=5)
    e = bow.feedforward_scores(q, k, weight, bias, v)
    assert e.shape == (2, 3, 5)
    pairs = torch.cat([k, q.unsqueeze(-2).expand_as(k)], dim=-1)  # [E(w_k); E(w_{i-1})]
    torch.testing.assert_close(e, torch.tanh(pairs @ weight.T + bias) @ v)


def test_feedforward_scores_break_the_symmetry():
    D, H = 4, 6
    a, b = randn(D, seed=1), randn(D, seed=2)
    weight, bias, v = randn(H, 2 * D, seed=3), randn(H, seed=4), randn(H, seed=5)
    e_ab = bow.feedforward_scores(b, a[None], weight, bias, v)  # key a, query b
    e_ba = bow.feedforward_scores(a, b[None], weight, bias, v)  # key b, query a
    assert abs(float(e_ab) - float(e_ba)) > 1e-3
    # with W = [M | M] the two halves act alike and the score becomes symmetric again
    sym = torch.cat([weight[:, :D], weight[:, :D]], dim=1)
    torch.testing.assert_close(bow.feedforward_scores(b, a[None], sym, bias, v),
                               bow.feedforward_scores(a, b[None], sym, bias, v))


@pytest.mark.parametrize(
    ("query", "keys", "match"),
    [
        (torch.zeros(2, 3, 4), torch.zeros(2, 3, 4), r"\(2, 3, n_ctx, 4\)"),  # keys without n_ctx
        (torch.zeros(2, 3, 4), torch.zeros(2, 3, 5, 6), r"\(2, 3, n_ctx, 4\)"),  # wrong width
        (torch.zeros(2, 3, 4), torch.zeros(3, 2, 5, 4), r"\(2, 3, n_ctx, 4\)"),  # wrong batch
        (torch.zeros(2, 3, 4, dtype=torch.long), torch.zeros(2, 3, 5, 4), r"\(\.\.\., d_emb\)"),
    ],
)
def test_scores_reject_bad_shapes_naming_the_expected_one(query, keys, match):
    with pytest.raises(ValueError, match=match):
        bow.dot_scores(query, keys)
    weight, bias, v = torch.zeros(3, 8), torch.zeros(3), torch.zeros(3)
    with pytest.raises(ValueError, match=match):
        bow.feedforward_scores(query, keys, weight, bias, v)


def test_feedforward_scores_reject_bad_parameters():
    q, k = torch.zeros(2, 4), torch.zeros(2, 5, 4)
    with pytest.raises(ValueError, match=r"\(d_a, 8\)"):
        bow.feedforward_scores(q, k, torch.zeros(3, 4), torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"\(3,\)"):
        bow.feedforward_scores(q, k, torch.zeros(3, 8), torch.zeros(2), torch.zeros(3))


# --------------------------------------------------------------------------- bags of words


def test_attention_bag_weights_sum_to_one_and_skip_padding():
    B, T, W, D = 3, 6, 5, 4
    scores, values = randn(B, T, W, seed=1) * 3, randn(B, T, W, D, seed=2)
    mask = rand_mask(B, T, W, seed=3)
    mask[0, 0] = False  # an empty window
    bag, alpha = bow.attention_bag_of_words(scores, values, mask)
    assert bag.shape == (B, T, D) and alpha.shape == (B, T, W)
    assert float(alpha[~mask].abs().max()) == 0.0, "padding got weight"
    has_word = mask.any(-1)
    torch.testing.assert_close(alpha.sum(-1)[has_word], torch.ones(int(has_word.sum())))
    assert float(alpha[0, 0].abs().sum()) == 0.0 and float(bag[0, 0].abs().sum()) == 0.0
    assert torch.isfinite(bag).all()
    expected = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1).nan_to_num(0.0)
    torch.testing.assert_close(alpha, expected)
    torch.testing.assert_close(bag, torch.einsum("btw,btwd->btd", expected, values))


def test_attention_bag_with_dot_scores_agrees_with_pytorch_sdpa():
    """Unscaled dot-product attention of one query over its window is PyTorch's SDPA with
    scale=1, queries of length 1 and keys = values = the window's embeddings."""
    B, T, W, D = 2, 7, 5, 6
    query, keys = randn(B, T, D, seed=1), randn(B, T, W, D, seed=2)
    mask = rand_mask(B, T, W, seed=3)
    mask[..., -1] = True  # SDPA returns NaN for a fully masked row; keep one word in each
    bag, _ = bow.attention_bag_of_words(bow.dot_scores(query, keys), keys, mask)
    expected = F.scaled_dot_product_attention(
        query.unsqueeze(-2), keys, keys, attn_mask=mask.unsqueeze(-2), scale=1.0,
    ).squeeze(-2)  # (B, T, 1, D) -> (B, T, D)
    torch.testing.assert_close(bag, expected)


def test_mean_bag_is_attention_with_equal_scores_and_agrees_with_sdpa():
    B, T, W, D = 2, 5, 4, 3
    values, mask = randn(B, T, W, D, seed=1), rand_mask(B, T, W, seed=2)
    mask[0, 1] = False
    mean = bow.mean_bag_of_words(values, mask)
    assert mean.shape == (B, T, D)
    assert float(mean[0, 1].abs().sum()) == 0.0  # an empty window gives the zero vector
    uniform, _ = bow.attention_bag_of_words(torch.zeros(B, T, W), values, mask)
    torch.testing.assert_close(mean, uniform)
    keep = mask.any(-1)
    expected = F.scaled_dot_product_attention(
        torch.zeros(B, T, 1, D), values, values, attn_mask=mask.unsqueeze(-2)).squeeze(-2)
    torch.testing.assert_close(mean[keep], expected[keep])


def test_bags_reject_bad_masks_and_scores():
    values = torch.zeros(2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool .*shape \(2, 3, 4\)"):
        bow.mean_bag_of_words(values, torch.ones(2, 3, 4))
    with pytest.raises(ValueError, match=r"mask must have shape \(2, 3, 4\)"):
        bow.attention_bag_of_words(torch.zeros(2, 3, 4), values, torch.ones(2, 3, 5, dtype=bool))
    with pytest.raises(ValueError, match=r"scores must have shape \(2, 3, 4\)"):
        bow.attention_bag_of_words(torch.zeros(2, 4, 3), values, torch.ones(2, 3, 4, dtype=bool))


def test_weighted_bag_normalises_hand_set_weights_over_the_real_words():
    B, T, W, D = 2, 5, 4, 3
    values, mask = randn(B, T, W, D, seed=1), rand_mask(B, T, W, seed=2)
    mask[0, 1] = False  # an empty window
    weights = torch.tensor([1.0, 2.0, 4.0, 8.0])  # one weight per slot, broadcast
    bag, alpha = bow.weighted_bag_of_words(weights, values, mask)
    assert bag.shape == (B, T, D) and alpha.shape == (B, T, W)
    expected = weights * mask / (weights * mask).sum(-1, keepdim=True).clamp_min(1e-30)
    torch.testing.assert_close(alpha, expected)
    torch.testing.assert_close(bag, torch.einsum("btw,btwd->btd", expected, values))
    assert float(alpha[~mask].abs().max()) == 0.0 and float(bag[0, 1].abs().sum()) == 0.0
    # equal weights are the mean bag; weights of zero on every real word give A = 0
    torch.testing.assert_close(bow.weighted_bag_of_words(torch.ones(W), values, mask)[0],
                               bow.mean_bag_of_words(values, mask))
    zero_bag, zero_alpha = bow.weighted_bag_of_words(torch.zeros(W), values, mask)
    assert float(zero_bag.abs().sum()) == 0.0 and float(zero_alpha.abs().sum()) == 0.0
    with pytest.raises(ValueError, match="weights must be non-negative"):
        bow.weighted_bag_of_words(torch.tensor([1.0, -1.0, 1.0, 1.0]), values, mask)
    with pytest.raises(ValueError, match="weights must be non-negative"):
        bow.weighted_bag_of_words(torch.tensor([1.0, math.nan, 1.0, 1.0]), values, mask)


def test_inverse_document_frequency_counts_documents_not_occurrences():
    # documents end after id 2: [4 5 4 2] [5 6 2] [4 7] -> df: 4 in 2, 5 in 2, 6 in 1, 7 in 1,
    # 2 in 2 (it closes the first two); 0, 1, 3 and 8 never occur (counted as in one)
    ids = torch.tensor([4, 5, 4, 2, 5, 6, 2, 4, 7])
    idf = bow.inverse_document_frequency(ids, 9, ends=[2])
    assert idf.shape == (9,) and idf.dtype == torch.float32
    df = torch.tensor([1, 1, 2, 1, 2, 2, 1, 1, 1], dtype=torch.float64)
    torch.testing.assert_close(idf, torch.log(3 / df).float())
    # a word in every document gets 0; one document only: every word that occurs gets 0
    assert float(bow.inverse_document_frequency(torch.tensor([4, 2, 4, 2]), 5, [2])[4]) == 0.0
    assert bow.inverse_document_frequency(torch.tensor([4, 5]), 6, [2])[4:].tolist() == [0, 0]
    with pytest.raises(ValueError, match=r"ids in \[0, 4\] \(the vocabulary\); got from 0 to 7"):
        bow.inverse_document_frequency(torch.tensor([0, 7]), 5, [2])
    with pytest.raises(ValueError, match="ends must name at least one token id"):
        bow.inverse_document_frequency(ids, 9, [])
    with pytest.raises(ValueError, match=r"ids \(the whole text\) must have dtype torch.int64"):
        bow.inverse_document_frequency(ids.float(), 9, [2])


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize(
    ("pooling", "score"), [("none", "dot"), ("mean", "dot"), ("attention", "dot"),
                           ("attention", "feedforward")])
def test_model_shapes_masks_and_gradients(pooling, score):
    model = small_model(pooling, score)
    ids = torch.randint(1, 30, (3, 9), generator=torch.Generator().manual_seed(0))
    logits, alpha = model(ids)
    assert logits.shape == (3, 9, 30)
    if pooling == "attention":
        assert alpha.shape == (3, 9, 4)
        _, mask = bow.context_windows(ids, 4)
        assert float(alpha.detach()[~mask].abs().max()) == 0.0
        torch.testing.assert_close(alpha[:, 1:].sum(-1), torch.ones(3, 8))
    else:
        assert alpha is None
    F.cross_entropy(logits.flatten(0, 1), ids.flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, f"no gradient for {name}"


def test_model_forward_follows_the_formula():
    model = small_model("attention", "dot")
    ids = torch.tensor([[5, 9, 5, 12, 3, 7]])
    logits, alpha = model(ids)
    E, W_o, b_o = model.embed.weight, model.out.weight, model.out.bias
    t = 5  # predicts the word after ids[0, 5]; its window is ids[0, 1:5]
    window = E[ids[0, 1:5]]  # (W, D)
    weights = torch.softmax(window @ E[ids[0, t]], dim=0)  # scored against w_{i-1} = ids[0, t]
    expected = W_o @ torch.cat([E[ids[0, t]], weights @ window]) + b_o
    torch.testing.assert_close(alpha[0, t], weights)
    torch.testing.assert_close(logits[0, t], expected)
    # position 0 has no earlier words: the bag is zero and the prediction is the bigram part
    torch.testing.assert_close(logits[0, 0], W_o[:, :8] @ E[ids[0, 0]] + b_o)


def test_model_and_config_reject_bad_inputs():
    model = small_model()
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"\[0, 29\]"):
        model(torch.tensor([[1, 30]]))
    with pytest.raises(ValueError, match="pooling must be one of"):
        bow.BowConfig(10, pooling="max")
    with pytest.raises(ValueError, match="score must be 'dot' or 'feedforward'; got 'cosine'"):
        bow.BowConfig(10, score="cosine")
    with pytest.raises(ValueError, match="positions must be a bool"):
        bow.BowConfig(10, positions="False")


def test_get_batch_and_perplexity_of_a_uniform_model():
    text = torch.arange(4, 104)
    x, y = bow.get_batch(text, 5, 8, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8)
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y, x + 1)
    model = small_model("mean", vocab=120)
    for p in model.parameters():
        torch.nn.init.zeros_(p)  # every logit 0: the uniform distribution over 120 words
    assert bow.perplexity(model, text, seq_len=16) == pytest.approx(120.0, rel=1e-5)
    with pytest.raises(ValueError, match="at least seq_len"):
        bow.get_batch(text[:5], 2, 8)


# --------------------------------------------------------------------------- training


def test_training_lowers_the_loss():
    """A short run on the real corpus learns (lecture 01 trains its models in full, and
    tests/notebooks/test_lectures.py checks its claims about them: which bag wins, by how
    much; retraining them here would only repeat that work)."""
    from course_utils import seed_everything
    from course_utils.data.corpus import load_corpus

    corpus = load_corpus()
    generator = seed_everything(0)
    model = bow.BagOfWordsLM(bow.BowConfig(len(corpus.vocab), d_emb=16, n_ctx=4,
                                           pooling="mean"))
    history = bow.train_lm(model, corpus.train_ids, n_steps=120, batch_size=16, seq_len=16,
                           lr=0.01, generator=generator, progress=False)
    losses = history.loss
    assert len(losses) == 120 and sum(losses[-20:]) < sum(losses[:20]) - 20 * 1.0
    assert math.isfinite(bow.perplexity(model, corpus.heldout_ids[:2000]))


def test_training_is_deterministic():
    from course_utils import seed_everything

    text = torch.arange(4, 400) % 50 + 4
    runs = []
    for _ in range(2):
        generator = seed_everything(3)
        model = small_model("attention", "feedforward", vocab=60)
        runs.append(bow.train_lm(model, text, n_steps=20, batch_size=4, seq_len=8,
                                 generator=generator, progress=False).loss)
    assert runs[0] == runs[1]


def test_train_lm_is_fit_with_random_stretches_and_held_out_perplexity():
    """train_lm = training.fit on get_batch batches with the next-word loss; the perplexity
    is measured every eval_every steps and after the last one."""
    from course_utils import seed_everything
    from course_utils.training import History, fit

    text = torch.arange(4, 400) % 50 + 4
    heldout = torch.arange(7, 140) % 50 + 4
    generator = seed_everything(3)
    model = small_model("attention", "dot", vocab=60)
    history = bow.train_lm(model, text, n_steps=12, batch_size=4, seq_len=8, lr=0.02,
                           generator=generator, heldout_ids=heldout, eval_every=5,
                           progress=False)
    assert isinstance(history, History) and len(history.loss) == 12
    assert history.eval_step == [5, 10, 12] and history.steps_per_epoch is None
    assert history.metrics["perplexity"][-1] == bow.perplexity(model, heldout, seq_len=8)
    assert not model.training
    generator = seed_everything(3)
    by_fit = small_model("attention", "dot", vocab=60)
    batches = (bow.get_batch(text, 4, 8, generator) for _ in range(12))
    same = fit(by_fit, bow.next_word_loss, batches, n_steps=12, lr=0.02, progress=False)
    assert same.loss == history.loss
    for a, b in zip(model.parameters(), by_fit.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="eval_every = 5 needs heldout_ids"):
        bow.train_lm(model, text, n_steps=2, eval_every=5, progress=False)
    with pytest.raises(ValueError, match="n_steps must be a positive int"):
        bow.train_lm(model, text, n_steps=0, progress=False)


def test_position_options():
    ids = torch.randint(1, 30, (2, 9), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    config = bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="attention", score="dot",
                           positions=True)
    model = bow.BagOfWordsLM(config)
    assert model.key_position.shape == (4, 8)
    _, before = model(ids)
    with torch.no_grad():
        model.key_position[-1] = 5.0 * model.embed.weight.mean(0)  # slot W-1: just before
    # the position vector changes the scores, not the values: the bag still averages E(w_k)
    logits, alpha = model(ids)
    assert not torch.allclose(alpha, before)
    E, W_o, b_o = model.embed.weight, model.out.weight, model.out.bias
    t = 6
    window = E[ids[0, t - 4:t]]  # (W, D)
    scores = (window + model.key_position) @ E[ids[0, t]]
    weights = torch.softmax(scores, dim=0)
    torch.testing.assert_close(alpha[0, t], weights)
    expected = W_o @ torch.cat([E[ids[0, t]], weights @ window]) + b_o
    torch.testing.assert_close(logits[0, t], expected)
    # the position-only control: the same weights for every context
    control = bow.BagOfWordsLM(bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="position"))
    with torch.no_grad():
        control.slot_score.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    _, alpha = control(ids)
    expected = torch.softmax(torch.tensor([0.0, 1.0, 2.0, 3.0]), dim=0)
    torch.testing.assert_close(alpha[:, 4:], expected.expand(2, 5, 4))
    with pytest.raises(ValueError, match="positions=True .* needs pooling='attention'"):
        bow.BowConfig(30, pooling="mean", positions=True)


def test_hand_set_bags_weigh_by_recency_and_by_word_and_learn_nothing_else():
    ids = torch.tensor([[5, 9, 5, 12, 3, 7, 8]])
    torch.manual_seed(0)
    recency = bow.BagOfWordsLM(bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="recency"))
    _, alpha = recency(ids)
    halves = torch.tensor([1 / 8, 1 / 4, 1 / 2, 1.0])  # slot n_ctx - 1 is w_(i-2)
    torch.testing.assert_close(alpha[0, 4:], (halves / halves.sum()).expand(3, 4))
    torch.testing.assert_close(alpha[0, 2], torch.tensor([0.0, 0.0, 1 / 3, 2 / 3]))  # padding
    word_weights = torch.arange(30, dtype=torch.float32)  # word w weighs w
    idf_bag = bow.BagOfWordsLM(bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="idf"), word_weights)
    logits, alpha = idf_bag(ids)
    torch.testing.assert_close(alpha[0, 6], torch.tensor([5.0, 12, 3, 7]) / 27)  # ids[0, 2:6]
    E, W_o, b_o = idf_bag.embed.weight, idf_bag.out.weight, idf_bag.out.bias
    expected = W_o @ torch.cat([E[8], alpha[0, 6] @ E[ids[0, 2:6]]]) + b_o
    torch.testing.assert_close(logits[0, 6], expected)
    # the weights are set by hand: no parameter beyond the embeddings and the output layer
    for model in (recency, idf_bag):
        assert {n for n, _ in model.named_parameters()} == {"embed.weight", "out.weight",
                                                             "out.bias"}
    assert torch.equal(idf_bag.state_dict()["word_weight"], word_weights)
    # decay = 1 is the mean bag
    torch.manual_seed(0)
    flat = bow.BagOfWordsLM(bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="recency", decay=1.0))
    torch.manual_seed(0)
    mean = bow.BagOfWordsLM(bow.BowConfig(30, d_emb=8, n_ctx=4, pooling="mean"))
    torch.testing.assert_close(flat(ids)[0], mean(ids)[0])


def test_hand_set_bags_reject_bad_settings():
    with pytest.raises(ValueError, match=r"decay must be a weight ratio in \[0, 1\]; got 2"):
        bow.BowConfig(30, pooling="recency", decay=2)
    with pytest.raises(ValueError, match="word_weights .* only of it .* pooling='idf' and "
                                         "word_weights None"):
        bow.BagOfWordsLM(bow.BowConfig(30, pooling="idf"))
    with pytest.raises(ValueError, match="pooling='mean' and word_weights given"):
        bow.BagOfWordsLM(bow.BowConfig(30, pooling="mean"), torch.ones(30))
    with pytest.raises(ValueError, match=r"30 non-negative weights.*got shape \(29,\)"):
        bow.BagOfWordsLM(bow.BowConfig(30, pooling="idf"), torch.ones(29))
    with pytest.raises(ValueError, match="30 non-negative weights"):
        bow.BagOfWordsLM(bow.BowConfig(30, pooling="idf"), -torch.ones(30))


# --------------------------------------------------------------------------- weights by position


def test_weights_by_position_puts_each_slot_at_its_absolute_position():
    B, T, W = 2, 6, 3
    ids = torch.randint(1, 30, (B, T), generator=torch.Generator().manual_seed(0))
    _, mask = bow.context_windows(ids, W)
    alpha = torch.rand(B, T, W, generator=torch.Generator().manual_seed(1)) * mask  # (B, T, W)
    weights = bow.weights_by_position(alpha)
    assert weights.shape == (B, T, T)
    expected = torch.zeros(B, T, T)
    for t in range(T):
        for j in range(W):
            if t - W + j >= 0:
                expected[:, t, t - W + j] = alpha[:, t, j]
    torch.testing.assert_close(weights, expected)
    assert float(weights.triu().abs().sum()) == 0.0, "a position attended to itself or later"
    # a window wider than the sequence: only the last T slots can hold words
    wide_ids = ids[:, :2]
    _, wide_mask = bow.context_windows(wide_ids, 5)
    wide = bow.weights_by_position(wide_mask.float())  # (B, 2, 5) -> (B, 2, 2)
    assert wide.tolist() == [[[0.0, 0.0], [1.0, 0.0]]] * B


def test_weights_by_position_of_a_model_mix_the_embeddings_into_its_bag():
    """Row t of the (T, T) matrix times the embeddings of the sequence is the bag A of t."""
    model = small_model("attention", "feedforward")
    ids = torch.randint(1, 30, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, alpha = model(ids)
        embeddings = model.embed(ids)  # (B, T, D)
        context, mask = bow.context_windows(ids, model.config.n_ctx)
        scores = model.scores(embeddings, model.embed(context))
        bag, _ = bow.attention_bag_of_words(scores, model.embed(context), mask)  # (B, T, D)
    weights = bow.weights_by_position(alpha)  # (B, T, T)
    torch.testing.assert_close(weights @ embeddings, bag)
    torch.testing.assert_close(weights.sum(-1)[:, 1:], torch.ones(2, 8))  # t=0: empty window
    assert float(weights[:, 0].abs().sum()) == 0.0


def test_weights_by_position_rejects_bad_input():
    with pytest.raises(ValueError,
                       match=r"alpha must have 3 dimension\(s\), shape \(B, T, n_ctx\)"):
        bow.weights_by_position(torch.ones(4, 3))
    with pytest.raises(ValueError, match="floating-point"):
        bow.weights_by_position(torch.ones(1, 4, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="before the start of the sequence"):
        bow.weights_by_position(torch.full((1, 4, 3), 1 / 3))  # weight on padding at t = 0
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        bow.weights_by_position(None)  # e.g. the alpha of a mean or bigram model
