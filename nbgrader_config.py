"""nbgrader configuration for the course (read by every `nbgrader` command run at the root).

Assignments are the units: `solutions/<unit>/` holds the instructor's source notebooks
(solutions and hidden tests), `exercises/<unit>/` the student release that
`make release` generates from them. The gradebook is nbgrader's SQLite file
`gradebook.db` at the root (never committed).
"""

from pathlib import Path

import nbgrader
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import GetGrades

import course_utils
from course_utils.nbgrader_hooks import HideHiddenTests

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# What a student sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding: a cell that runs longer than this is interrupted and counts as failed.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# Output kept in autograded notebooks and feedback.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 30

# Feedback shows scores and visible-test messages, never the hidden tests.
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
# nbgrader's feedback template loads MathJax from a CDN; ours (searched first) loads nothing.
c.HTMLExporter.extra_template_basedirs = [
    str(Path(course_utils.__file__).parent / "feedback_templates"),
    str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"),
]
