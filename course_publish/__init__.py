"""course_publish: what the course gives to readers and students, built from this repository
(never imported by a student's notebook, and grading nothing):

    site            `make site`: the course as an offline HTML book (README's home page, the
                    lectures with their outputs, the exercises as released, the guides)
    guides          the guides for instructors, contributors and on the data (markdown, read
                    in the repository and as pages of the site)
    edition         `make student-edition`: the folder and zip a student receives (lectures,
                    exercises, course_utils, a Makefile that sets it all up), and the check that
                    nothing of the grader's is in it
    student_edition the templates `edition` writes (README, Makefile parts, pyproject.toml,
                    a student's nbgrader_config.py)
"""
