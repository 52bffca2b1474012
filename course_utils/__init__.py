"""course_utils: the reference code that the lectures, the exercises and the tests share.

One module per concept:
    attention  softmax, masked softmax, score functions, scaled dot-product attention
    viz        attention heatmaps (plots only, no model code)
    training   seeding
    grading    the checks that exercise tests use
"""

from course_utils.training import seed_everything

__version__ = "0.1.0"
__all__ = ["seed_everything"]
