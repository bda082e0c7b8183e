# `make demo` and `make test` each do all the set-up they need on a fresh machine:
# a virtual environment in .venv, the package installed into it (editable, with the
# dev extra), then the job. No API key and no network beyond the package index.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The folders of tests/, by kind (tests/README.md); each has its own target for quick loops.
TEST_KINDS := unit conformance integration agents docs bench

# Tests run in TEST_WORKERS processes (pytest-xdist), a file at a time each, every process
# with its own PostgreSQL and Chroma servers; the suite took 380 s in one process on two
# cores and 220-268 s in two (docs/benchmarks.md). TEST_WORKERS=0: all in one process.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile

.PHONY: demo test $(addprefix test-,$(TEST_KINDS)) test-lowest wheel-check lint docs install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/llama-memory demo

# Every folder of tests/ (pyproject's testpaths): what CI runs (.ci/run).
test: $(STAMP)
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

# One folder: make test-unit, make test-conformance, make test-integration, ...
$(addprefix test-,$(TEST_KINDS)): test-%: $(STAMP)
	$(PY) -m pytest -q $(XDIST) tests/$* $(PYTEST_ARGS)

# The agent and block tests (tests/agents) on the lowest LlamaIndex packages pyproject.toml
# allows (tests/agents/lowest-requirements.txt), in a second venv; make test runs the newest.
LOWEST_VENV := .venv-lowest
LOWEST_REQUIREMENTS := tests/agents/lowest-requirements.txt
LOWEST_STAMP := $(LOWEST_VENV)/.installed

$(LOWEST_STAMP): pyproject.toml $(LOWEST_REQUIREMENTS)
	rm -rf $(LOWEST_VENV)
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOWEST_VENV)/bin/python -m pip install --quiet -e ".[postgres]" -r $(LOWEST_REQUIREMENTS)
	touch $(LOWEST_STAMP)

test-lowest: $(LOWEST_STAMP)
	$(LOWEST_VENV)/bin/python -m pytest -q tests/agents $(PYTEST_ARGS)

# The package as users get it: builds the sdist and the wheel into dist/, checks that the
# wheel carries the model files and py.typed and nothing from tests/, installs it into a
# fresh venv (build/wheel-venv) and runs `llama-memory --help` and the demo from it, offline.
wheel-check: $(STAMP)
	$(PY) tests/wheel_check.py --outdir dist --venv build/wheel-venv

# The documentation site (mkdocs.yml) into site/; strict: broken links and references fail.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check llama_memory bench tests notebooks
	$(VENV)/bin/mypy llama_memory

clean:
	rm -rf $(VENV) $(LOWEST_VENV) .pytest_cache build dist site *.egg-info
