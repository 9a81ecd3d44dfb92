# The two commands: `make demo` and `make test`. Each creates .venv if needed and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test test-fast install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

install: $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/rollarc train configs/quickstart.yaml

test: $(STAMP_TEST)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP_TEST)
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
