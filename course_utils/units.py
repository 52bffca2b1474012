"""The course's units, in one place: what each is called and which files are its.

    python -m course_utils.units     prints every unit's name, one a line (the Makefile's UNITS)

    Unit        one unit: its number ("00"), slug and title, the course_utils modules that are
                its own, the shipped weights its lecture reads; the paths of its lecture,
                exercise, solution and lecture_specs module follow from its name
    UNITS       every unit, in order (00, 01, ...)
    named       the unit of a name ("03_attention_seq2seq") or a number ("03")
    require_sequence  units numbered 00, 01, ... in order, each slug its own (UNITS is checked
                on import)
    mismatches  how a folder of notebooks (lectures/, exercises/, solutions/) and the
                registry disagree: a unit's notebook missing, a notebook of no unit

The Makefile, the website (course_publish.site), the student edition (course_publish.edition)
and the tests read this list; tests/test_units.py fails when a place that should list a unit
(a folder, README's Units table, the module map, the shipped files, ...) disagrees with it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["UNITS", "Unit", "mismatches", "named", "require_sequence"]

FOLDERS = {"lecture": "lectures", "exercise": "exercises", "solution": "solutions"}


@dataclass(frozen=True)
class Unit:
    """One unit. `title` is its lecture's, as README's Units table and the lecture's first
    heading (`# Unit NN — title`) write it; `modules` are the course_utils modules whose
    entry in the package's map begins with this unit's number ("unit 05:", "units 02-06:");
    `shipped` are the files of course_utils/data/ that its lecture reads. Its name,
    `NN_slug`, is the nbgrader assignment and the stem of each of its notebooks."""

    number: str
    slug: str
    title: str
    modules: tuple[str, ...] = ()
    shipped: tuple[str, ...] = ()

    def __post_init__(self):
        if not re.fullmatch(r"\d\d", self.number):
            raise ValueError(f"a unit's number is two digits ('00'), not {self.number!r}")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.slug):
            raise ValueError(f"unit {self.number}'s slug is lowercase letters, digits and _ "
                             f"('attention_as_lookup'), not {self.slug!r}")
        if not self.title.strip():
            raise ValueError(f"unit {self.number} needs a title")
        for file in self.shipped:
            if Path(file).name != file or not file.endswith(".safetensors"):
                raise ValueError(f"unit {self.number}'s shipped files are names of "
                                 f"course_utils/data/*.safetensors, not {file!r}")

    @property
    def name(self) -> str:
        return f"{self.number}_{self.slug}"

    @property
    def lecture(self) -> Path:
        """lectures/NN_slug.ipynb, relative to the course."""
        return Path(FOLDERS["lecture"]) / f"{self.name}.ipynb"

    @property
    def exercise(self) -> Path:
        """exercises/NN_slug/NN_slug.ipynb: the release, in the assignment's folder."""
        return Path(FOLDERS["exercise"]) / self.name / f"{self.name}.ipynb"

    @property
    def solution(self) -> Path:
        """solutions/NN_slug/NN_slug.ipynb: nbgrader's source, with the hidden tests."""
        return Path(FOLDERS["solution"]) / self.name / f"{self.name}.ipynb"

    @property
    def spec(self) -> str:
        """The module of tests/notebooks/lecture_specs/ with its lecture's claims and its
        questions' steps."""
        return f"lecture_specs.lecture_{self.number}"


UNITS = (
    Unit("00", "attention_as_lookup", "Attention as a soft lookup"),
    Unit("01", "bag_of_words_attention", "Bag-of-words attention in a language model",
         modules=("bow", "shipped_bow"), shipped=("bow_positions.safetensors",)),
    Unit("02", "seq2seq_rnn", "Seq2seq with RNNs, and its bottleneck",
         modules=("seq2seq", "translator", "shipped_translators"),
         shipped=("seq2seq_tricks.safetensors",)),
    Unit("03", "attention_seq2seq", "Attention in seq2seq",
         modules=("attention_decoder", "translator", "shipped_translators"),
         shipped=("translators.safetensors",)),
    Unit("04", "attention_variants", "Attention variants",
         modules=("translator", "shipped_translators"), shipped=("score_functions.safetensors",)),
    Unit("05", "self_attention", "Self-attention, multi-head attention, positional encoding",
         modules=("multihead", "positional", "pointer_model", "translator")),
    Unit("06", "transformer", "The Transformer",
         modules=("translator", "transformer", "decoding", "shipped_transformer"),
         shipped=("translators.safetensors", "transformer.safetensors")),
    Unit("07", "bert", "BERT: input, WordPiece, pretraining, fine-tuning",
         modules=("tokenization", "bert", "bert_pretraining", "tiny_bert", "fine_tuning"),
         shipped=("tiny_bert.safetensors",)),
    Unit("08", "bert_attention", "What BERT's attention looks at",
         modules=("tiny_bert", "shipped_tiny_bert", "analysis"),
         shipped=("tiny_bert.safetensors",)),
    Unit("09", "attention_at_scale", "Attention at scale",
         modules=("tiled_attention", "attention_cost", "grouped_query", "shipped_grouped_query",
                  "long_inputs", "shipped_long_inputs"),
         shipped=("grouped_query.safetensors", "long_inputs.safetensors")),
)


def require_sequence(units: tuple[Unit, ...]) -> tuple[Unit, ...]:
    """`units`, if they are numbered 00, 01, ... in order with distinct slugs; else a
    ValueError that says which number was expected."""
    for at, unit in enumerate(units):
        if unit.number != f"{at:02d}":
            raise ValueError(f"units are numbered in order from 00: expected {at:02d} at "
                             f"position {at}, found unit {unit.number} ({unit.slug})")
    slugs = [unit.slug for unit in units]
    shared = sorted({slug for slug in slugs if slugs.count(slug) > 1})
    if shared:
        raise ValueError(f"each unit has a slug of its own; shared: {shared}")
    return units


require_sequence(UNITS)


def named(name: str, units: tuple[Unit, ...] = UNITS) -> Unit:
    """The unit whose name ("03_attention_seq2seq") or number ("03") is `name`."""
    for unit in units:
        if name in (unit.name, unit.number):
            return unit
    raise ValueError(f"no unit {name!r}; the units are {[unit.name for unit in units]}")


def mismatches(folder: Path, kind: str, units: tuple[Unit, ...] = UNITS) -> list[str]:
    """How the notebooks in `folder` disagree with `units`, one sentence each (empty when
    they agree). `kind` is "lecture" (`folder` holds NN_slug.ipynb), "exercise" or
    "solution" (NN_slug/NN_slug.ipynb); `folder` is the course's lectures/, exercises/ or
    solutions/, or a copy of it."""
    if kind not in FOLDERS:
        raise ValueError(f"kind is one of {sorted(FOLDERS)}, not {kind!r}")
    base = Path(FOLDERS[kind])
    expected = {getattr(unit, kind).relative_to(base): unit for unit in units}
    pattern = "*.ipynb" if kind == "lecture" else "*/*.ipynb"
    found = {path.relative_to(folder) for path in Path(folder).glob(pattern)
             if ".ipynb_checkpoints" not in path.parts}
    problems = [f"{base / path} is missing (unit {expected[path].number} in "
                "course_utils/units.py)" for path in sorted(set(expected) - found)]
    problems += [f"{base / path} belongs to no unit of course_utils/units.py"
                 for path in sorted(found - set(expected))]
    return problems


def main() -> int:
    print("\n".join(unit.name for unit in UNITS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
