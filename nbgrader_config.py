"""nbgrader configuration for the course (read by every `nbgrader` command run at the root).

Assignments are the units: `solutions/<unit>/` holds the instructor's source notebooks
(solutions and hidden tests), `exercises/<unit>/` the student release that
`make release` generates from them. The gradebook is nbgrader's SQLite file
`gradebook.db` at the root (never committed), or a PostgreSQL database (COURSE_DB_URL).
"""

import os
from pathlib import Path

import nbgrader
from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteKernelspec,
    SaveAutoGrades,
)

import course_grader
from course_grader.exchange import PLUGINS as EXCHANGE_PLUGINS
from course_grader.feedback import FeedbackExporter
from course_grader.lms import CanvasCollector, CanvasExtractor, LmsGradesExporter
from course_grader.nbgrader_hooks import HideHiddenTests, RestoreCells, SafeExecute
from course_grader.sanitize import SanitizeNotebook, markdown_to_safe_html

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# The gradebook: the SQLite file gradebook.db here, or a PostgreSQL server when COURSE_DB_URL
# names one (postgresql+psycopg://user:password@host/database), which every nbgrader command,
# the formgrader and `make autograde`/`make report` then use. Grading writes it from one
# process (course_grader.autograde); SQLite readers wait up to 120 s for its transactions.
GRADEBOOK = Path(__file__).resolve().parent / "gradebook.db"
c.CourseDirectory.db_url = os.environ.get("COURSE_DB_URL") or f"sqlite:///{GRADEBOOK}?timeout=120"

# Validate: the exercise's last cell (grading.summary) says which tasks pass, not started or
# why they fail, in one line each; it is not a graded cell, so Validate must look at every
# cell (course_utils/grading/validation.py).
c.Validator.validate_all = True

# What a student sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding runs student code in a sandbox (course_grader.sandbox: no network, no files
# but its own copy, CPU/memory/process/wall-time limits), caps each cell's output, checks
# around every test cell that nothing the tests rely on was replaced, and scores 0 (never
# "ungraded") what a hung or dead kernel could not finish. Grading without the sandbox needs
# the explicit unsafe flag: c.SafeExecute.sandbox = False (`make autograde UNSAFE=1`).
# Then everything the submission wrote (markdown, raw cells, outputs) is made inert: no script
# of a student's may run in the formgrader (the instructor's logged-in session) or in feedback.
c.Autograde.autograde_preprocessors = [
    SafeExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SanitizeNotebook,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
c.SafeExecute.max_output_chars = 20_000
# Test cells (and read-only set-up cells) that a submission deleted or stripped of their
# metadata are put back where they were; edited ones get their original source back.
c.Autograde.sanitize_preprocessors = [
    ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreCells, CheckCellMetadata,
]
# A cell that runs longer than this is interrupted and counts as failed; one that ignores
# the interrupt gets its kernel stopped.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# Output kept in autograded notebooks and feedback.
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 30

# Feedback shows scores and visible-test messages, never the hidden tests. A notebook that
# cannot be rendered gets a page that says so, and the other submissions go on. Each score line
# names its task, and the page typesets its formulas with the MathJax it carries inside, so it
# reads the same from disk, from JupyterLab or after the exchange (course_grader/feedback.py).
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, SanitizeNotebook,
                                    CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = FeedbackExporter
# Every page made from a notebook (feedback, the formgrader's submission view) renders
# markdown and then sanitises the HTML that came out: no javascript: link, no remote image
# fetched with the reader's cookies, and a cell that cannot be rendered shown as text.
c.HTMLExporter.filters = {"markdown2html": markdown_to_safe_html}
# nbgrader's feedback and formgrader templates load MathJax from a CDN; ours (searched first)
# use the MathJax inside the feedback page and, in the formgrader, the MathJax that
# jupyter-server-mathjax serves from the Jupyter server itself.
c.HTMLExporter.extra_template_basedirs = [
    str(Path(course_grader.__file__).parent / "feedback_templates"),
    str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"),
]

# nbgrader's exchange is used only when a folder is named for it: NBGRADER_EXCHANGE=<folder>
# (/srv/nbgrader/exchange on a shared machine; the student edition reads the same variable), or
# c.Exchange.root in another nbgrader config (the JupyterHub set-up's). Without one the class
# hands in by upload or LMS: the formgrader lists no exchange, so it neither warns nor logs on
# every page, and release, collect and feedback through it say how to turn it on
# (course_grader/exchange.py).
if os.environ.get("NBGRADER_EXCHANGE"):
    c.Exchange.root = os.environ["NBGRADER_EXCHANGE"]
for action, plugin in EXCHANGE_PLUGINS.items():
    c.ExchangeFactory[action] = plugin
# The formgrader shows its configuration on Manage Assignments unless told not to; ours holds
# classes (it could not show it, and warned on every visit) and may hold COURSE_DB_URL's password.
c.FormgradeExtension.debug = False

# LMS in and out (course_grader/lms.py): `nbgrader zip_collect <unit>` reads Canvas's
# "Download Submissions" zip (`make collect-zip`), naming every file it does not collect;
# `nbgrader export` writes reports/grades.csv, one formula-safe row per student and unit
# (`make export-grades`). The extractor, not nbgrader's own (which unpacks every archive at
# any depth and lets its member names pick the student), takes only what Canvas named for a
# student; a zip a student uploaded is unpacked into that student's submission alone, within
# the limits CanvasExtractor.max_depth, max_members, max_file_bytes, max_student_bytes and
# max_ratio.
c.ZipCollectApp.extractor_plugin = CanvasExtractor
c.ZipCollectApp.collector_plugin = CanvasCollector
c.ExportApp.plugin_class = LmsGradesExporter
