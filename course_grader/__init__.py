"""course_grader: the instructor's grading machinery (never imported by a student's notebook).

One module per job; a student's kernel runs only `course_utils` (and there only the check
convention, `course_utils.grading`, and what a unit allows), never this package:

    sandbox         the jail a student's kernel runs in (bubblewrap: no network, no files of
                    the course, resource limits)
    checker         runs the test cells in a separate process and judges the plain values
                    the student's functions return (never runs student code)
    nbgrader_hooks  nbgrader plug-ins: the safe executor (kernel in the sandbox, test cells
                    in the checker), restoring deleted cells, feedback without hidden tests
    sanitize        makes what a submission wrote inert (an allow-list HTML sanitiser)
    flags           notes for the instructor on what a submission's code uses (read, not run)
    autograde       batch grading (`make autograde`) that one bad submission cannot stop
    report          the class report (`make report`): totals, most-failed tests, CSV
    corpus          hostile and broken submissions, each with the score it must get
    benchmark       grading time per submission (`make bench-autograde`)
    feedback_templates  the HTML template of feedback, with no script from the network
"""
