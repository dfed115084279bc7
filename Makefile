# Two entry points: `make chat` (set up, then start the chat) and `make test` (set up, then test).
PYTHON ?= python3
VENV ?= .venv
# A CPU build of PyTorch, pinned so pip never pulls a multi-GB CUDA build as a dependency.
# With a GPU, set TORCH to the build you want, e.g. `make chat TORCH=torch==2.13.0+cu128`.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet

.PHONY: setup chat serve test test-fast test-real bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One stamp per set of extras: the chat stays lean, the tests install every extra.
$(VENV)/.installed-chat: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH)"
	$(PIP) -e .
	touch $@

$(VENV)/.installed-server: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[server]"
	touch $@

# llama-cpp-python (the peers extra) compiles llama.cpp for this CPU (several minutes on 2 cores);
# its multimodal library is not built, the bench does not use it.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) "$(TORCH)"
	CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(PIP) -e ".[dev,server,telemetry,tracking,ray,peers]"
	touch $@

setup: $(VENV)/.installed-chat

chat: setup
	$(BIN)/specdec-tui $(ARGS)

serve: $(VENV)/.installed-server
	$(BIN)/specdec-serve $(ARGS)

test: test-fast test-real

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

test-real: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m real_models -s

bench: setup
	$(BIN)/specdec-bench $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
