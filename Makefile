# Two entry points: `make chat` (set up, then start the chat) and `make test` (set up, then test).
PYTHON ?= python3
VENV ?= .venv
# A CPU build of PyTorch, pinned so pip never pulls a multi-GB CUDA build as a dependency.
# With a GPU, set TORCH to the build you want, e.g. `make chat TORCH=torch==2.13.0+cu128`.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: setup chat serve test test-fast test-real bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev,server]"
	touch $@

setup: $(INSTALLED)

chat: setup
	$(BIN)/specdec-tui $(ARGS)

serve: setup
	$(BIN)/specdec-serve $(ARGS)

test: test-fast test-real

test-fast: setup
	$(BIN)/python -m pytest -q

test-real: setup
	$(BIN)/python -m pytest -q -m real_models -s

bench: setup
	$(BIN)/specdec-bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
