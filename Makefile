# `make demo` and `make test` each do all the set-up they need on a fresh machine:
# a virtual environment in .venv, the package installed into it (editable, with the
# dev extra), then the job. No API key and no network beyond the package index.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# The folders of tests/, by kind (tests/README.md); each has its own target for quick loops.
TEST_KINDS := unit conformance integration agents docs bench

.PHONY: demo test $(addprefix test-,$(TEST_KINDS)) lint docs install clean

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
	$(PY) -m pytest -q $(PYTEST_ARGS)

# One folder: make test-unit, make test-conformance, make test-integration, ...
$(addprefix test-,$(TEST_KINDS)): test-%: $(STAMP)
	$(PY) -m pytest -q tests/$* $(PYTEST_ARGS)

# The documentation site (mkdocs.yml) into site/; strict: broken links and references fail.
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check llama_memory bench tests notebooks
	$(VENV)/bin/mypy llama_memory

clean:
	rm -rf $(VENV) .pytest_cache build site *.egg-info
