"""course_utils.data.vocab: vocabularies, padding, minibatches."""

import pytest
import torch

from course_utils.data import END, PAD, START, UNK, Vocabulary, minibatches, pad_batch
from course_utils.data.translation import source_vocabulary, target_vocabulary
from course_utils.data.vocab import END_ID, PAD_ID, START_ID, UNK_ID


def test_specials_come_first_and_padding_is_zero():
    vocab = Vocabulary.build([["b", "a", "b"], ["c"]])
    assert vocab.tokens[:4] == [PAD, START, END, UNK]
    assert (vocab.pad_id, vocab.start_id, vocab.end_id, vocab.unk_id) == (0, 1, 2, 3)
    assert vocab.tokens[4:] == ["b", "a", "c"]  # most frequent first, ties by first seen


def test_the_special_ids_are_the_constants_in_every_vocabulary():
    assert (PAD_ID, START_ID, END_ID, UNK_ID) == (0, 1, 2, 3)
    for vocab in (Vocabulary.build([["b", "a"]]), source_vocabulary(), target_vocabulary()):
        assert [vocab.ids[t] for t in (PAD, START, END, UNK)] == [PAD_ID, START_ID, END_ID, UNK_ID]
        assert (vocab.pad_id, vocab.start_id, vocab.end_id, vocab.unk_id) == \
            (PAD_ID, START_ID, END_ID, UNK_ID)
        assert vocab.encode(["never seen"], start=True, end=True) == [START_ID, UNK_ID, END_ID]
    ids, _ = pad_batch([[5], [5, 6]])
    assert ids[0, 1] == PAD_ID


def test_min_count_and_max_size():
    seqs = [["x"] * 3 + ["y"] * 2 + ["z"]]
    assert Vocabulary.build(seqs, min_count=2).tokens[4:] == ["x", "y"]
    assert Vocabulary.build(seqs, max_size=5).tokens[4:] == ["x"]
    with pytest.raises(ValueError, match="max_size must be an int >= 4"):
        Vocabulary.build(seqs, max_size=2)
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.build(seqs, min_count=0)


def test_encode_decode_round_trip_with_unknowns_and_end():
    vocab = Vocabulary.build([list("hello")])
    ids = vocab.encode(list("hex"), start=True, end=True)
    assert ids[0] == vocab.start_id and ids[-1] == vocab.end_id and ids[3] == vocab.unk_id
    assert vocab.decode(ids) == ["h", "e", UNK]
    assert vocab.decode([vocab.ids["h"], vocab.end_id, vocab.ids["e"]]) == ["h"]
    assert vocab.decode([vocab.ids["h"], vocab.pad_id, vocab.ids["e"]]) == ["h", "e"]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.decode([99])


def test_a_vocabulary_must_start_with_the_specials_and_be_unique():
    with pytest.raises(ValueError, match="starts with the special tokens"):
        Vocabulary(["a", "b"])
    with pytest.raises(ValueError, match="duplicates"):
        Vocabulary([PAD, START, END, UNK, "a", "a"])


def test_pad_batch_pads_right_with_pad_id():
    ids, lengths = pad_batch([[5, 6, 7], [8], [9, 10]])
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert lengths.tolist() == [3, 1, 2] and ids.dtype == lengths.dtype == torch.long
    with pytest.raises(ValueError, match="empty sequence"):
        pad_batch([[1], []])
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([])


def test_minibatches_cover_every_index_once_and_are_seeded():
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    a = list(minibatches(10, 3, generator=g1))
    b = list(minibatches(10, 3, generator=g2))
    assert [len(x) for x in a] == [3, 3, 3, 1]
    assert sorted(torch.cat(a).tolist()) == list(range(10))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.cat(list(minibatches(5, 2, shuffle=False))).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="batch_size"):
        list(minibatches(5, 0))
