"""Little generated stories whose grammar is known by construction.

A story is 3 to 5 sentences about one or two people (a man and a woman, so that a pronoun
always says whom it means) and the things they find, carry, eat or feed:

    mary met tom in the park , and she gave him a red ball .
    then he dropped the ball .
    later , she took the ball to the river .

Every word is a common lower-case English word that is a whole word of BERT's uncased
vocabulary, and "." and "," are words of their own. Because the generator writes each
sentence word by word, it knows which word relates to which. `Sentence.relations` lists,
for six relations, pairs (i, j) of word indices: word i points at word j.

    determiner   the determiner -> its noun               "a" -> "ball"
    possessive   his / her -> the noun it owns            "her" -> "dog" in "her dog"
    object       a verb -> the head of its direct object  "gave" -> "ball", "met" -> "tom"
    subject      a verb -> its subject                    "met" -> "mary", "gave" -> "she"
    antecedent   a pronoun -> the name it means, when     "she" -> "mary", "him" -> "tom"
                 that name is in the same sentence
    adjective    the adjective -> its noun                "red" -> "ball"

For the first sentence above (mary=0 met=1 tom=2 in=3 the=4 park=5 ,=6 and=7 she=8 gave=9
him=10 a=11 red=12 ball=13 .=14): determiner ((4, 5), (11, 13)), possessive (),
object ((1, 2), (9, 13)), subject ((1, 0), (9, 8)), antecedent ((8, 0), (10, 2)),
adjective ((12, 13),). An indirect object ("him" in "gave him a ball") is not an object.

What is here, all generated from a seed with Python's `random` (the same on every machine):

    make_stories(n)         stories to pretrain a tiny BERT on (masked words + next sentence)
    nsp_pairs(stories, n)   (A, B, is_next) pairs for next-sentence prediction
    story_texts(stories)    every sentence of the stories as text (to train a tokenizer on)
    make_classification(n)  a fine-tuning task: what kind of thing (object, food, animal)?
    analysis_sentences()    ~40 fixed sentences, and analysis_pairs() 20 fixed pairs, to
    analysis_pairs()        measure which attention heads of a real BERT follow a relation
    cross_relations(a, b)   the words of B that refer back to words of A (for the pairs)
    vocabulary_words()      every word the generator can write

    from course_utils.data import stories
    story = stories.make_stories(1, seed=0)[0]
    [s.text for s in story]         # ['michael went to the market and found a sandwich .',
                                    #  'he lost the sandwich , so he bought an egg .', ...]
    story[0].relations["subject"]   # ((1, 0), (6, 0)): went -> michael, found -> michael
    pairs = stories.nsp_pairs(stories.make_stories(20_000), 50_000)  # (A, B, is_next)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

from course_utils._checks import require_choice, require_int

__all__ = [
    "ADJECTIVES",
    "DETERMINERS",
    "FEMALE_NAMES",
    "KINDS",
    "MALE_NAMES",
    "NOUNS",
    "PRONOUNS",
    "RELATIONS",
    "VERBS",
    "Sentence",
    "Story",
    "analysis_pairs",
    "analysis_sentences",
    "classification_things",
    "cross_relations",
    "make_classification",
    "make_stories",
    "nsp_pairs",
    "story_texts",
    "vocabulary_words",
]

RELATIONS = ("determiner", "possessive", "object", "subject", "antecedent", "adjective")

# ----------------------------------------------------------------------------- the words

MALE_NAMES = ("john", "tom", "james", "david", "peter", "paul", "michael", "george", "henry",
              "robert", "richard", "william")
FEMALE_NAMES = ("mary", "anna", "emma", "sarah", "lucy", "kate", "jane", "alice", "susan",
                "helen", "laura", "julia")
_SUBJECT = {"m": "he", "f": "she"}
_OBJECT = {"m": "him", "f": "her"}
_POSSESSIVE = {"m": "his", "f": "her"}
PRONOUNS = {"he": "m", "him": "m", "his": "m", "she": "f", "her": "f"}  # word -> gender

_SINGULAR_DETERMINERS = ("the", "a", "an", "this", "that", "every", "one")
_PLURAL_DETERMINERS = ("these", "those", "some", "two", "three", "many")
DETERMINERS = _SINGULAR_DETERMINERS + _PLURAL_DETERMINERS

# The things of a story, by kind: singular -> plural (None when the plural is not a whole
# word of BERT's vocabulary; such a thing is always one).
_THINGS = {
    "object": {"ball": "balls", "book": "books", "box": "boxes", "cup": "cups", "hat": "hats",
               "key": "keys", "kite": None, "lamp": "lamps", "bag": "bags",
               "basket": "baskets", "letter": "letters", "ring": "rings", "map": "maps",
               "coat": "coats", "bottle": "bottles", "boat": "boats", "picture": "pictures",
               "umbrella": None, "toy": "toys", "shoe": "shoes"},
    "food": {"apple": "apples", "cake": "cakes", "egg": "eggs", "orange": None, "pie": None,
             "banana": "bananas", "cookie": "cookies", "sandwich": "sandwiches", "pear": None},
    "animal": {"dog": "dogs", "cat": "cats", "horse": "horses", "bird": "birds",
               "duck": "ducks", "rabbit": "rabbits", "cow": "cows", "pig": "pigs",
               "goat": "goats", "chicken": "chickens", "puppy": None, "kitten": None},
}
_CONTAINERS = ("bag", "basket", "box")  # "she put the apples in her basket"
_ADJECTIVES = {
    "object": ("red", "blue", "green", "yellow", "white", "black", "brown", "big", "small",
               "little", "old", "new", "heavy", "pretty"),
    "food": ("fresh", "big", "small", "little", "good"),
    "animal": ("little", "big", "old", "young", "brown", "black", "white", "small", "happy"),
    "place": ("old", "big", "small", "little", "quiet"),
}
_VERBS = {  # a person <verb> the thing, in the past
    "object": ("found", "bought", "carried", "dropped", "lost", "took", "wanted", "liked",
               "cleaned", "kept", "hid"),
    "food": ("ate", "cooked", "bought", "wanted", "liked", "shared", "took", "cut"),
    "animal": ("fed", "saw", "watched", "washed", "liked", "found", "followed", "called"),
}
_ING = {  # a person was <verb>ing the thing
    "object": ("carrying", "holding", "cleaning"),
    "food": ("eating", "cooking", "cutting", "sharing"),
    "animal": ("feeding", "watching", "washing", "following"),
}
_GIVE = ("gave", "showed", "brought")        # a person <verb> a person a thing
_MEET = ("met", "saw")  # a person <verb> a person
_ANIMAL_DOES = ("followed", "found", "saw")  # the animal <verb> a person
_GO = ("walked", "went", "ran", "came")      # ... to the place
_STAY = ("played", "sat", "waited", "stayed")  # ... at a place
_STAY_ING = ("playing", "sitting", "waiting")

_DESTINATIONS = ("park", "garden", "market", "school", "station", "beach", "river", "lake",
                 "farm", "village", "library", "shop", "forest")
_LOCATIONS = (("in", "park"), ("near", "park"), ("in", "garden"), ("in", "kitchen"),
              ("in", "forest"), ("at", "market"), ("at", "school"), ("near", "school"),
              ("at", "station"), ("on", "beach"), ("near", "river"), ("by", "river"),
              ("near", "lake"), ("on", "farm"), ("in", "village"), ("in", "library"),
              ("in", "shop"), ("behind", "house"), ("near", "house"), ("under", "bridge"),
              ("under", "tree"), ("behind", "tree"), ("under", "table"), ("on", "table"),
              ("on", "hill"), ("by", "road"), ("behind", "door"), ("under", "bed"))
_INDOORS = ("table", "bed", "door")  # a key can be under the bed, people and animals not
_PLACES = tuple(location for location in _LOCATIONS if location[1] not in _INDOORS)
_OUTDOORS = (("under", "tree"), ("behind", "tree"), ("near", "lake"), ("by", "river"),
             ("on", "hill"), ("on", "beach"), ("under", "bridge"), ("by", "road"))
_TIMES = (("one", "day"), ("that", "morning"), ("this", "morning"), ("that", "evening"),
          ("every", "morning"))
_OTHER_NOUNS = ("house", "friend")  # "lived in a small house", "her friend tom"
_OTHER_WORDS = (".", ",", "and", "then", "but", "so", "when", "later", "home", "was",
                "to", "with", "for")

NOUNS = tuple(sorted({w for kind in _THINGS.values() for pair in kind.items() for w in pair
                      if w} | {p for _, p in _LOCATIONS} | {n for _, n in _TIMES}
                     | set(_OTHER_NOUNS)))
ADJECTIVES = tuple(sorted({a for kind in _ADJECTIVES.values() for a in kind}))
VERBS = tuple(sorted({v for table in (_VERBS, _ING) for kind in table.values() for v in kind}
                     | {*_GIVE, *_MEET, *_ANIMAL_DOES, *_GO, *_STAY, *_STAY_ING, "walking",
                        "put", "lived", "visited"}))


def vocabulary_words() -> list[str]:
    """Every word the generator can write (about 250), sorted."""
    prepositions = {p for p, _ in _LOCATIONS}
    return sorted({*MALE_NAMES, *FEMALE_NAMES, *PRONOUNS, *DETERMINERS, *NOUNS, *ADJECTIVES,
                   *VERBS, *prepositions, *_OTHER_WORDS})


# ----------------------------------------------------------------------------- sentences

@dataclass(frozen=True)
class Sentence:
    """The words of one sentence and, for each of RELATIONS, the pairs (i, j) of word
    indices where word i points at word j (an empty tuple when the sentence has none)."""

    words: tuple[str, ...]
    relations: dict[str, tuple[tuple[int, int], ...]] = field(hash=False)

    @property
    def text(self) -> str:
        return " ".join(self.words)


Story = tuple[Sentence, ...]
Person = tuple[str, str]  # (name, gender "m" or "f")


@dataclass
class _Thing:
    noun: str      # as written: "ball" or "balls"
    base: str      # the singular: no story has two things of one noun
    kind: str      # "object", "food" or "animal"
    adjective: str | None
    plural: bool


@dataclass
class _Scene:
    """What a story has mentioned so far: its people (one or two, of different genders),
    the people already named, and its things."""

    people: list[Person]
    named: list[Person] = field(default_factory=list)
    things: list[_Thing] = field(default_factory=list)  # the last mentioned last

    def new_thing(self, rng: random.Random, kind: str, among=None) -> _Thing:
        """A thing of `kind` (of the nouns `among`, if given) that the story does not have."""
        used = [t.base for t in self.things]
        base = rng.choice([n for n in (among or _THINGS[kind]) if n not in used])
        plural = _THINGS[kind][base] is not None and rng.random() < 0.25
        adjective = rng.choice(_ADJECTIVES[kind]) if rng.random() < 0.6 else None
        thing = _Thing(_THINGS[kind][base] if plural else base, base, kind, adjective, plural)
        self.things.append(thing)
        return thing

    def old_thing(self, rng: random.Random, kinds) -> _Thing:
        """A thing of one of `kinds` that the story already has: mostly the one mentioned
        last, so that a sentence tends to go on with the one before it."""
        things = [t for t in self.things if t.kind in kinds]
        thing = things[-1] if rng.random() < 0.75 else rng.choice(things)
        self.things.remove(thing)
        self.things.append(thing)
        return thing


class _Writer:
    """Writes one sentence word by word and records the relations on the way.

    A person is written as a name the first time the story meets them; later in the story
    their first mention in a sentence is a pronoun with probability `pronouns` (else the
    name again), and any further mention in that sentence a pronoun. A pronoun is linked
    to its name when that is in this sentence."""

    def __init__(self, rng: random.Random, scene: _Scene, pronouns: float = 0.8):
        self.rng, self.scene, self.pronouns = rng, scene, pronouns
        self.words: list[str] = []
        self.links: dict[str, list[tuple[int, int]]] = {r: [] for r in RELATIONS}
        self.name_at: dict[str, int] = {}  # gender -> index of that person's name here
        self.seen: list[Person] = []  # the people this sentence has mentioned

    def add(self, text: str) -> int:
        """Append the words of `text`; the index of the last one."""
        self.words.extend(text.split())
        return len(self.words) - 1

    def link(self, relation: str, i: int, j: int) -> None:
        self.links[relation].append((i, j))

    def _pronoun(self, word: str, gender: str) -> int:
        i = self.add(word)
        self.seen.extend(p for p in self.scene.people if p[1] == gender and p not in self.seen)
        if gender in self.name_at:
            self.link("antecedent", i, self.name_at[gender])
        return i

    def person(self, person: Person, case: str = "subject") -> int:
        """A name or a pronoun; once in a sentence, always a pronoun after that."""
        gender = person[1]
        if person in self.seen or (person in self.scene.named
                                   and self.rng.random() < self.pronouns):
            return self._pronoun((_SUBJECT if case == "subject" else _OBJECT)[gender], gender)
        return self.name(person)

    def name(self, person: Person) -> int:
        self.seen.append(person)
        if person not in self.scene.named:
            self.scene.named.append(person)
        self.name_at[person[1]] = self.add(person[0])
        return self.name_at[person[1]]

    def noun(self, noun: str, det: str | None = None, adjective: str | None = None,
             owner: Person | None = None) -> int:
        """[his/her] [determiner] [adjective] noun; the index of the noun."""
        dependents = []
        if owner is not None:
            dependents.append(("possessive", self._pronoun(_POSSESSIVE[owner[1]], owner[1])))
        if det is not None:
            if det == "a" and (adjective or noun)[0] in "aeiou":
                det = "an"
            dependents.append(("determiner", self.add(det)))
        if adjective is not None:
            dependents.append(("adjective", self.add(adjective)))
        i = self.add(noun)
        for relation, j in dependents:
            self.link(relation, j, i)
        return i

    def new(self, thing: _Thing, owner: Person | None = None) -> int:
        """A thing the story has not mentioned yet: "a red ball", "some apples", "his dog"."""
        if thing.plural:
            det = self.rng.choice(("two", "three", None) if owner else _PLURAL_DETERMINERS[2:])
        else:
            det = None if owner else "a"
        return self.noun(thing.noun, det, thing.adjective, owner)

    def old(self, thing: _Thing) -> int:
        """A thing mentioned before: "the ball", "the red ball", "those apples"."""
        det = "the"
        if self.rng.random() < 0.2:
            det = self.rng.choice(("these", "those") if thing.plural else ("this", "that"))
        adjective = thing.adjective if self.rng.random() < 0.4 else None
        return self.noun(thing.noun, det, adjective)

    def place(self, preposition: str, place: str) -> int:
        """ "in the park", now and then "in the quiet park" (not "under the quiet tree")."""
        self.add(preposition)
        adjective = None
        if place in _DESTINATIONS and self.rng.random() < 0.2:
            adjective = self.rng.choice(_ADJECTIVES["place"])
        return self.noun(place, "the", adjective)

    def location(self, choices=_PLACES) -> int:
        return self.place(*self.rng.choice(choices))

    def time(self) -> None:
        """ "one day ,", "that morning ," ... at the start of a sentence."""
        self.noun(*reversed(self.rng.choice(_TIMES)))
        self.add(",")

    def verb(self, word: str, subject: int) -> int:
        """The verb, linked to its subject (already written); the index of the verb."""
        i = self.add(word)
        self.link("subject", i, subject)
        return i

    def sentence(self) -> Sentence:
        self.add(".")
        relations = {r: tuple(self.links[r]) for r in RELATIONS}
        return Sentence(tuple(self.words), relations)


# ----------------------------------------------------------------------------- templates
# Each template writes one sentence about person p (and person q, when it needs two).
# A verb comes before its object, so it is linked to the object once that is written:
# `v = w.verb(...)`, then `w.link("object", v, w.new(...))`.

def _met_gave(w, p, q):  # mary met tom in the park , and she gave him a red ball .
    s = w.person(p)
    v = w.verb(w.rng.choice(("met", "saw")), s)
    w.link("object", v, w.person(q, "object"))
    w.location()
    w.add(", and")
    s = w.person(p)
    v = w.verb(w.rng.choice(_GIVE[:2]), s)
    w.person(q, "object")
    w.link("object", v, w.new(w.scene.new_thing(w.rng, w.rng.choice(("object", "food")))))


def _went_with(w, p, q):  # tom and mary went to the park with her little dog .
    s1 = w.person(p)
    w.add("and")
    s2 = w.person(q)
    v = w.add(w.rng.choice(_GO[:2]))
    w.link("subject", v, s1)
    w.link("subject", v, s2)
    w.add("to")
    w.noun(w.rng.choice(_DESTINATIONS), "the")
    w.add("with")
    w.new(w.scene.new_thing(w.rng, "animal"), owner=w.rng.choice((p, q)))


def _ing_when(w, p, q):  # john was carrying a big box near the river when he saw anna .
    s = w.person(p)
    w.add("was")
    thing = w.scene.new_thing(w.rng, w.rng.choice(tuple(_ING)))
    v = w.verb(w.rng.choice(_ING[thing.kind]), s)
    w.link("object", v, w.new(thing))
    w.location()
    w.add("when")
    s = w.person(p)
    v = w.verb(w.rng.choice(_MEET), s)
    w.link("object", v, w.person(q, "object"))


def _found(w, p, q):  # one day , john found an old key under the bridge .
    w.time()
    s = w.person(p)
    v = w.verb("found", s)
    thing = w.scene.new_thing(w.rng, w.rng.choice(tuple(_THINGS)))
    w.link("object", v, w.new(thing))
    w.location(_PLACES if thing.kind == "animal" else _LOCATIONS)


def _lived_with(w, p, q):  # mary lived in a small house near the lake with her old cat .
    s = w.person(p)
    w.verb("lived", s)
    w.add("in")
    w.noun("house", "a", w.rng.choice(("small", "little", "big", "old")))
    w.place("near", w.rng.choice(("river", "lake", "park", "forest", "school", "station")))
    w.add("with")
    w.new(w.scene.new_thing(w.rng, "animal"), owner=p)


def _bought_for(w, p, q):  # anna bought three apples at the market for her friend tom .
    s = w.person(p)
    v = w.verb("bought", s)
    w.link("object", v, w.new(w.scene.new_thing(w.rng, "food")))
    w.place("at", "market")
    w.add("for")
    w.noun("friend", owner=p)
    w.person(q, "object")


def _visited(w, p, q):  # that morning , tom visited mary at her house , and he brought ...
    w.time()
    s = w.person(p)
    v = w.verb("visited", s)
    w.link("object", v, w.person(q, "object"))
    w.add("at")
    w.noun("house", owner=q)
    w.add(", and")
    s = w.person(p)
    v = w.verb("brought", s)
    w.person(q, "object")
    w.link("object", v, w.new(w.scene.new_thing(w.rng, w.rng.choice(("object", "food")))))


def _walking_met(w, p, q):  # john was walking to the lake with his dog when he met emma .
    s = w.person(p)
    w.add("was")
    w.verb("walking", s)
    w.add("to")
    w.noun(w.rng.choice(_DESTINATIONS), "the")
    w.add("with")
    w.new(w.scene.new_thing(w.rng, "animal"), owner=p)
    w.add("when")
    s = w.person(p)
    v = w.verb("met", s)
    w.link("object", v, w.person(q, "object"))


def _went_bought(w, p, q):  # kate went to the market and bought some fresh eggs .
    s = w.person(p)
    w.verb(w.rng.choice(_GO[:3]), s)
    w.place("to", "market")
    w.add("and")
    v = w.verb(w.rng.choice(("bought", "found")), s)
    w.link("object", v, w.new(w.scene.new_thing(w.rng, "food")))


def _then_verb(w, p, q):  # then he dropped the ball .
    thing = w.scene.old_thing(w.rng, _THINGS)
    w.add(w.rng.choice(("then", "later ,")))
    s = w.person(p)
    v = w.verb(w.rng.choice(_VERBS[thing.kind]), s)
    w.link("object", v, w.old(thing))


def _gave_the(w, p, q):  # she gave him the cake .  /  she gave the cake to tom .
    thing = w.scene.old_thing(w.rng, ("object", "food"))
    s = w.person(p)
    v = w.verb(w.rng.choice(_GIVE), s)
    if w.rng.random() < 0.5:
        w.person(q, "object")
        w.link("object", v, w.old(thing))
    else:
        w.link("object", v, w.old(thing))
        w.add("to")
        w.person(q, "object")


def _took_to(w, p, q):  # later , she took the ball to the river .
    thing = w.scene.old_thing(w.rng, _THINGS)
    w.add(w.rng.choice(("later ,", "then")))
    s = w.person(p)
    v = w.verb(w.rng.choice(("took", "carried")), s)
    w.link("object", v, w.old(thing))
    if w.rng.random() < 0.3:
        w.add("home")
    else:
        w.place("to", w.rng.choice(_DESTINATIONS))


def _animal_followed(w, p, q):  # the dog followed him to the park .
    thing = w.scene.old_thing(w.rng, ("animal",))
    s = w.old(thing)
    v = w.verb(w.rng.choice(_ANIMAL_DOES), s)
    w.link("object", v, w.person(p, "object"))
    if w.rng.random() < 0.5:
        w.place("to", w.rng.choice(_DESTINATIONS))
    else:
        w.location(_OUTDOORS)


def _both_ing(w, p, q):  # he was cleaning the box , and she was cooking an egg .
    thing = w.scene.old_thing(w.rng, _THINGS)
    s = w.person(p)
    w.add("was")
    v = w.verb(w.rng.choice(_ING[thing.kind]), s)
    w.link("object", v, w.old(thing))
    w.add(", and")
    s = w.person(q)
    w.add("was")
    other = w.scene.new_thing(w.rng, w.rng.choice(tuple(_THINGS)))
    v = w.verb(w.rng.choice(_ING[other.kind]), s)
    w.link("object", v, w.new(other))


def _put_in(w, p, q):  # she put the apples in her basket .
    thing = w.scene.old_thing(w.rng, ("object", "food"))
    s = w.person(p)
    v = w.verb("put", s)
    w.link("object", v, w.old(thing))
    free = [c for c in _CONTAINERS if c not in [t.base for t in w.scene.things]]
    if free and w.rng.random() < 0.6:
        w.add("in")
        w.new(w.scene.new_thing(w.rng, "object", among=free), owner=p)
    else:
        w.place(*w.rng.choice((("on", "table"), ("under", "table"), ("under", "bed"))))


def _liked_but(w, p, q):  # she liked the kite , but he wanted a green boat .
    thing = w.scene.old_thing(w.rng, _THINGS)
    s = w.person(p)
    v = w.verb("liked", s)
    w.link("object", v, w.old(thing))
    w.add(", but")
    s = w.person(q)
    v = w.verb("wanted", s)
    w.link("object", v, w.new(w.scene.new_thing(w.rng, thing.kind)))


def _when_home(w, p, q):  # when he came home , he fed the dog .
    thing = w.scene.old_thing(w.rng, _THINGS)
    w.add("when")
    s = w.person(p)
    w.verb("came", s)
    w.add("home ,")
    s = w.person(p)
    v = w.verb(w.rng.choice(_VERBS[thing.kind]), s)
    w.link("object", v, w.old(thing))


def _showed_own(w, p, q):  # she showed him her new hat .
    s = w.person(p)
    v = w.verb(w.rng.choice(_GIVE[:2]), s)
    w.person(q, "object")
    w.link("object", v, w.new(w.scene.new_thing(w.rng, "object"), owner=p))


def _together(w, p, q):  # tom and mary ate the cake on the hill .  / played with the dog
    thing = w.scene.old_thing(w.rng, ("food", "animal"))
    s1 = w.name(p)  # names: not "he and she"
    w.add("and")
    s2 = w.name(q)
    if thing.kind == "food":
        v = w.add(w.rng.choice(("ate", "shared")))
        w.link("object", v, w.old(thing))
    else:
        v = w.add("played")
        w.add("with")
        w.old(thing)
    w.link("subject", v, s1)
    w.link("subject", v, s2)
    w.location(_OUTDOORS)


def _lost_so(w, p, q):  # he lost the key , so he bought a new map .
    thing = w.scene.old_thing(w.rng, ("object", "food"))
    s = w.person(p)
    v = w.verb(w.rng.choice(("lost", "dropped")), s)
    w.link("object", v, w.old(thing))
    w.add(", so")
    s = w.person(p)
    v = w.verb("bought", s)
    w.link("object", v, w.new(w.scene.new_thing(w.rng, thing.kind)))


def _walked_sat(w, p, q):  # she walked to the lake [with the dog] and sat under the tree .
    s = w.person(p)
    w.verb(w.rng.choice(_GO), s)
    w.place("to", w.rng.choice(_DESTINATIONS))
    if any(t.kind == "animal" for t in w.scene.things):
        w.add("with")
        w.old(w.scene.old_thing(w.rng, ("animal",)))
    w.add("and")
    w.verb(w.rng.choice(_STAY), s)
    w.location(_OUTDOORS)


def _sitting_when(w, p, q):  # he was sitting by the river when he saw the cat .
    thing = w.scene.old_thing(w.rng, _THINGS)
    s = w.person(p)
    w.add("was")
    w.verb(w.rng.choice(_STAY_ING), s)
    w.location(_OUTDOORS)
    w.add("when")
    s = w.person(p)
    v = w.verb(w.rng.choice(("saw", "found")), s)
    w.link("object", v, w.old(thing))


class _Template(NamedTuple):
    write: object   # write(writer, p, q)
    people: int     # 1: about p only; 2: about p and q
    kinds: tuple    # the story must already have a thing of one of these kinds ( () : none)


_OPENINGS = (
    _Template(_met_gave, 2, ()), _Template(_went_with, 2, ()), _Template(_ing_when, 2, ()),
    _Template(_found, 1, ()), _Template(_lived_with, 1, ()), _Template(_bought_for, 2, ()),
    _Template(_visited, 2, ()), _Template(_walking_met, 2, ()), _Template(_went_bought, 1, ()),
)
_ANY = tuple(_THINGS)
_CONTINUATIONS = (
    _Template(_then_verb, 1, _ANY), _Template(_gave_the, 2, ("object", "food")),
    _Template(_took_to, 1, _ANY), _Template(_animal_followed, 1, ("animal",)),
    _Template(_both_ing, 2, _ANY), _Template(_put_in, 1, ("object", "food")),
    _Template(_liked_but, 2, _ANY), _Template(_when_home, 1, _ANY),
    _Template(_showed_own, 2, ()), _Template(_together, 2, ("food", "animal")),
    _Template(_lost_so, 1, ("object", "food")), _Template(_walked_sat, 1, ()),
    _Template(_sitting_when, 1, _ANY),
)


def _fits(template: _Template, scene: _Scene, people: int) -> bool:
    has_kind = not template.kinds or any(t.kind in template.kinds for t in scene.things)
    return template.people <= people and has_kind


def _cast(rng: random.Random, people: int) -> list[Person]:
    """One or two people; two are a man and a woman, in random order."""
    cast = [(rng.choice(MALE_NAMES), "m"), (rng.choice(FEMALE_NAMES), "f")]
    rng.shuffle(cast)
    return cast[:people]


def _write(rng, scene, template, p, q=None, pronouns=0.8) -> Sentence:
    writer = _Writer(rng, scene, pronouns)
    template.write(writer, p, q)
    return writer.sentence()


def _story(rng: random.Random) -> Story:
    people = 2 if rng.random() < 0.75 else 1
    scene = _Scene(_cast(rng, people))
    opening = rng.choice([t for t in _OPENINGS if t.people == people])
    sentences = [_write(rng, scene, opening, *scene.people)]
    used = []
    for _ in range(rng.randint(2, 4)):
        template = rng.choice([t for t in _CONTINUATIONS
                               if t not in used and _fits(t, scene, people)])
        used.append(template)
        p, q = rng.sample(scene.people, 2) if people == 2 else (scene.people[0], None)
        sentences.append(_write(rng, scene, template, p, q))
    return tuple(sentences)


# ----------------------------------------------------------------------------- the data

def make_stories(n: int, seed: int = 0) -> list[Story]:
    """`n` stories of 3 to 5 sentences, drawn with `seed` (the same seed, the same stories).

    The first sentence names the story's one or two people (a man and a woman) and brings
    in a thing; each later sentence goes on with them: a person comes back as he / she /
    him / her (or the name again), a thing as "the <noun>", and so a sentence taken from
    another story usually does not fit (other names, other things). 20,000 stories take a
    second or two."""
    n = require_int(n, "n")
    rng = random.Random(require_int(seed, "seed", low=0))
    return [_story(rng) for _ in range(n)]


def _require_stories(stories) -> list[Story]:
    """A list of stories (tuples of Sentences), at least two of them of two or more
    sentences: a true pair needs a next sentence, a false one a second story."""
    wanted = "a list of stories (tuples of Sentences, from make_stories)"
    if not isinstance(stories, list | tuple):
        raise ValueError(f"stories must be {wanted}; got {type(stories).__name__}")
    for story in stories:
        if not isinstance(story, tuple) or not all(isinstance(s, Sentence) for s in story):
            raise ValueError(f"stories must be {wanted}; got an element of type "
                             f"{type(story).__name__}")
    if sum(len(story) >= 2 for story in stories) < 2:
        raise ValueError(f"stories must be {wanted}, at least two of them of two or more "
                         f"sentences; got {len(stories)} stories")
    return list(stories)


def story_texts(stories) -> list[str]:
    """Every sentence of `stories` (from make_stories) as text, story after story."""
    if not isinstance(stories, list | tuple):
        raise ValueError(f"stories must be a list of stories (tuples of Sentences, from "
                         f"make_stories); got {type(stories).__name__}")
    texts = []
    for story in stories:
        if not isinstance(story, tuple) or not all(isinstance(s, Sentence) for s in story):
            raise ValueError(f"stories must hold stories (tuples of Sentences, from "
                             f"make_stories); got an element of type {type(story).__name__}")
        texts += [sentence.text for sentence in story]
    return texts


def nsp_pairs(stories, n: int, seed: int = 0) -> list[tuple[Sentence, Sentence, bool]]:
    """`n` next-sentence-prediction pairs (A, B, is_next) from `stories`, in random order.

    Half of them (n // 2, rounded up for odd n) are true: B is the sentence that follows A
    in its story. The others pair A with any sentence B of a different story, as BERT's
    random sentences are drawn. In both halves A is a sentence that has a next one. Two
    clues tell the halves apart: whether B goes on with A's people and things (it takes
    comparing B with A), and whether B opens a story (B alone shows it: about one false B
    in four is a first sentence, never a true one)."""
    stories = _require_stories(stories)
    n = require_int(n, "n")
    rng = random.Random(require_int(seed, "seed", low=0))
    long = [story for story in stories if len(story) >= 2]
    flags = [k % 2 == 0 for k in range(n)]
    rng.shuffle(flags)
    pairs = []
    for is_next in flags:
        i = rng.randrange(len(long))
        story = long[i]
        a = rng.randrange(len(story) - 1)
        if is_next:
            pairs.append((story[a], story[a + 1], True))
            continue
        j = rng.randrange(len(long) - 1)  # any story but the i-th: skip over it
        other = long[j + 1] if j >= i else long[j]
        pairs.append((story[a], other[rng.randrange(len(other))], False))
    return pairs


KINDS = ("object", "food", "animal")  # the labels of make_classification: 0, 1, 2


def classification_things(things: str = "seen") -> dict[str, tuple[str, ...]]:
    """The nouns that make_classification writes, by kind: every other singular noun of
    each kind in alphabetical order for things="seen", the others for things="unseen".
    No noun is in both: {"object": ("bag", "basket", ...), "food": ("apple", ...), ...}."""
    require_choice(things, "things", ("seen", "unseen"))
    start = 0 if things == "seen" else 1
    return {kind: tuple(sorted(_THINGS[kind])[start::2]) for kind in KINDS}


def make_classification(n: int, seed: int = 0, things: str = "seen"
                        ) -> list[tuple[str, int]]:
    """`n` examples (text, label) of a task for fine-tuning: what kind of thing is the
    sentence about? label 0 = an object, 1 = food, 2 = an animal (KINDS[label]):

        david liked this small egg .                      1
        the big bag was near the lake .                   0
        emma liked that little kitten in the shop .       2

    Every text is one of a few frames ("<name> liked <the thing> [<place>] .", "<the thing>
    was <place> .") with the name, determiner, adjective (big / small / little, said of
    things of every kind) and place drawn independently of the label, so the noun is the
    only clue. things="seen" draws the noun from classification_things("seen"), "unseen"
    from the other half of each kind's nouns: a classifier trained on "seen" examples and
    tested on "unseen" ones meets nouns that no labelled example has. It can tell their kind
    only from what it learnt about them before (in the stories food is eaten and cooked,
    animals are fed and followed); a bag of words, or a network trained on the labels alone,
    is at chance (1/3) there. The labels are as balanced as n allows (each n // 3 or one
    more)."""
    n = require_int(n, "n")
    rng = random.Random(require_int(seed, "seed", low=0))
    nouns = classification_things(things)
    labels = [k % len(KINDS) for k in range(n)]
    rng.shuffle(labels)
    examples = []
    for label in labels:
        noun = rng.choice(nouns[KINDS[label]])
        adjective = rng.choice(("big", "small", "little", None))
        det = rng.choice(("the", "a", "this", "that"))
        if det == "a" and (adjective or noun)[0] in "aeiou":
            det = "an"
        thing = " ".join(w for w in (det, adjective, noun) if w)
        preposition, place = rng.choice(_PLACES)
        name = rng.choice(MALE_NAMES + FEMALE_NAMES)
        form = rng.randrange(3)
        if form == 0:
            text = f"{name} liked {thing} ."
        elif form == 1:
            text = f"{name} liked {thing} {preposition} the {place} ."
        else:
            text = f"{thing} was {preposition} the {place} ."
        examples.append((text, label))
    return examples


# ----------------------------------------------------------------------------- analysis

_ANALYSIS_SEED = 20240601


def analysis_sentences(seed: int = _ANALYSIS_SEED) -> list[Sentence]:
    """40 fixed sentences (the same on every call and machine) in which each relation
    occurs many times: each first-sentence template three times, with the second mention
    of a person always a pronoun (so "she" -> "mary" is in the sentence), then each
    later-sentence template once, its people named. Another `seed` gives another 40 of the
    same kinds: a held-out set on which to report what was chosen on the first."""
    require_int(seed, "seed")
    rng = random.Random(seed)
    sentences = []
    for template in _OPENINGS * 3:
        scene = _Scene(_cast(rng, template.people))
        sentences.append(_write(rng, scene, template, *scene.people, pronouns=1.0))
    for template in _CONTINUATIONS:
        scene = _Scene(_cast(rng, template.people))
        while not _fits(template, scene, template.people):  # bring in things, unwritten
            scene.new_thing(rng, rng.choice(_ANY))
        p, q = (scene.people + [None])[:2]
        sentences.append(_write(rng, scene, template, p, q, pronouns=1.0))
    return sentences


def cross_relations(first: Sentence, second: Sentence) -> dict[str, tuple[tuple[int, int], ...]]:
    """The words of `second` that refer back to words of `first`, as pairs (i, j): word i of
    `second` -> word j of `first`. For two sentences of one story (whose people differ in
    gender, whose things differ in noun) these are exact:

        antecedent  he / she / him / her / his -> the name of that gender in `first`
        repeat      a noun or name -> the same word in `first` ("the ball" -> "a ball")
    """
    for name, value in (("first", first), ("second", second)):
        if not isinstance(value, Sentence):
            raise ValueError(f"{name} must be a Sentence; got {type(value).__name__}")
    gender = {**{m: "m" for m in MALE_NAMES}, **{f: "f" for f in FEMALE_NAMES}}
    names: dict[str, dict[str, int]] = {"m": {}, "f": {}}  # gender -> {name: first index}
    for j, word in enumerate(first.words):
        if word in gender:
            names[gender[word]].setdefault(word, j)
    antecedent, repeat = [], []
    for i, word in enumerate(second.words):
        if word in PRONOUNS and len(names[PRONOUNS[word]]) == 1:  # one name of that gender
            antecedent.append((i, *names[PRONOUNS[word]].values()))
        elif (word in NOUNS or word in gender) and word in first.words:
            repeat.append((i, len(first.words) - 1 - first.words[::-1].index(word)))
    return {"antecedent": tuple(antecedent), "repeat": tuple(repeat)}


def analysis_pairs(seed: int = _ANALYSIS_SEED) -> list[tuple[Sentence, Sentence]]:
    """20 fixed pairs (A, B), B the sentence after A in a story: the first two sentences of
    stories drawn with a fixed seed, kept when B refers back to A (see cross_relations).
    Another `seed` gives another 20, held out."""
    require_int(seed, "seed")
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < 20:
        a, b = _story(rng)[:2]
        if all(cross_relations(a, b).values()):
            pairs.append((a, b))
    return pairs
