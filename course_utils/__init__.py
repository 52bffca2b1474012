"""course_utils: the reference code that the lectures, the exercises and the tests share.

One module per concept:
    attention  softmax, masked softmax, score functions, scaled dot-product attention
    data       vocabularies and batching; unit 01's Shakespeare corpus; the translation task
    bow        unit 01: bigram, mean and attention bag-of-words language models
    seq2seq    units 02-03: GRU encoder-decoder, attention decoder (Bahdanau), padded loss,
               greedy decoding, metrics, alignment hit rate, training
    viz        attention heatmaps and accuracy-by-length curves (plots only, no model code)
    widgets    ipywidgets explorers (a softmax-temperature slider); they also leave a static
               figure in notebooks executed without a browser
    training   seeding, accuracy per length bucket
    grading    the checks that exercise tests use
    integrity  the record of genuine functions that test cells check for tampering
    sandbox    the jail that autograded student code runs in
    autograde  batch grading (`make autograde`); report: the instructor's report
"""

__version__ = "0.1.0"
__all__ = ["seed_everything"]


def __getattr__(name: str):
    # Imported on first use, so that tools which need no PyTorch (the sandbox launcher,
    # the grading driver) start fast.
    if name == "seed_everything":
        from course_utils.training import seed_everything

        return seed_everything
    raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
