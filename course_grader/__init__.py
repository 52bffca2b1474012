"""course_grader: the instructor's grading machinery (never imported by a student's notebook).

One module per job; a student's kernel runs only `course_utils` (and there only the check
convention, `course_utils.grading`, and what a unit allows), never this package:

    sandbox         the jail a student's kernel runs in (bubblewrap: no network, no files of
                    the course, resource limits)
    relay           byte relays to the sandboxed kernel's sockets, reached without following
                    any link the kernel made
    cpu_watch       a cell's time limit counted in CPU seconds of the kernel's processes
    checker         runs the test cells in a separate process and judges the plain values
                    the student's functions return (never runs student code)
    nbgrader_hooks  nbgrader plug-ins: the safe executor (kernel in the sandbox, test cells
                    in the checker), restoring deleted cells, feedback without hidden tests
    sanitize        makes what a submission wrote inert (an allow-list HTML sanitiser)
    flags           notes for the instructor on what a submission's code uses (read, not run)
    worker          one submission graded in a private course folder
    autograde       batch grading (`make autograde`) that one bad submission cannot stop
    gradebook       where the gradebook is (SQLite or PostgreSQL) and what a worker recorded
    cluster         grading on several machines: submissions as tasks on a Dask cluster
    cluster_certs   the cluster's certificates: mutual TLS with the course's own authority
    lms             Canvas's submissions zip in, grades out as a CSV
    roster          the class list (Canvas's gradebook CSV) into the gradebook: names in
                    the formgrader (`make roster`)
    exchange        nbgrader's exchange, used only when a folder is named for it: no exchange
                    errors for a class that hands in by upload or LMS
    report          the class report (`make report`): totals, most-failed tests, CSV
    similarity      answers compared across a class and with the reference code (copydetect)
    corpus          hostile and broken submissions, each with the score it must get
    benchmark       grading's CPU per submission against plain nbgrader's, and time per
                    submission (`make bench-autograde`)
    feedback        feedback pages: formulas typeset by the MathJax inside the page, each
                    score line named by its task
    feedback_templates  the HTML templates of feedback, with no script from the network

The website and the student edition are built by `course_publish`, which grades nothing.
"""
