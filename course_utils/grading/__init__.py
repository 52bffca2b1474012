"""The check convention of every exercise's tests: a verdict a student can act on.

A test cell calls the student's functions and compares what they return with what is
expected; when it is wrong, it fails with one short message: which function, which input,
what came back, what was expected, and a hint about the usual mistake.

    from course_utils import grading
    grading.check_tensor(softmax(x), expected, what="softmax(x)", hint="...")
    out = grading.call(softmax, x)              # and fail if softmax changed x in place
    grads = grading.gradients(softmax, x)       # the gradient the student's code gives
    with grading.forbidden("torch.softmax", reason="implement the softmax yourself"):
        ...
    with grading.substitute(additive_attention=correct_one):   # judge a function alone
        ...
    grading.summary("softmax", "weighted_average")   # the last cell: where Validate says
                                                     # which tasks pass (validation.py)

The same test cells run in two places. In the student's own kernel (JupyterLab, Validate)
everything here runs directly. When a submission is autograded, test cells run in the
grader's checker process instead (`course_grader.checker`), where each student function is
a stand-in that calls the real one in the sandboxed kernel and brings back plain data;
`forbidden`, `reference_disabled` and `substitute` are then sent along with each call, and
the verdict never depends on anything the student's kernel says but the values.

This file is the face of the package; the work is in its modules:

    failure         GradingFailure, the one kind of verdict, and how a notebook shows it
    checks          check_tensor, call, gradients, check_function, stand_ins, rtol_for
    restrictions    forbidden, reference_disabled, substitute, seeded
    remote          what the grader's checker collects while it runs a test cell
    validation      Validate's account of the tasks (summary)
    agent           what answers the checker inside the student's kernel
    wire            the plain data that goes between the two
"""

from __future__ import annotations

from course_utils.grading import validation
from course_utils.grading.checks import (
    call,
    check_function,
    check_tensor,
    cotangent,
    gradients,
    rtol_for,
    stand_ins,
)
from course_utils.grading.failure import (
    GradingFailure,
    check,
    install_brief_display,
    wrap_message,
)
from course_utils.grading.restrictions import (
    forbidden,
    reference_disabled,
    seeded,
    substitute,
)
from course_utils.grading.validation import summary

# PyTorch's own softmax, under every name it goes by; exercises that ask for a softmax forbid them.
READY_MADE_SOFTMAX = (
    "torch.softmax",
    "torch.Tensor.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
    "torch._softmax",
    "torch.ops.aten.softmax",
    "torch.ops.aten._softmax",
)

__all__ = [
    "GradingFailure",
    "READY_MADE_SOFTMAX",
    "call",
    "check",
    "check_function",
    "check_tensor",
    "cotangent",
    "forbidden",
    "stand_ins",
    "gradients",
    "reference_disabled",
    "rtol_for",
    "seeded",
    "substitute",
    "summary",
    "wrap_message",
]

install_brief_display()
validation.install()
