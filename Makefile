# Everything a fresh machine needs: Python 3.11+, pip and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: verify test test-slow lint backends dist clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

## verify: check the NumPy reference backend and write the report (the main job)
verify: $(STAMP)
	$(BIN)/resverify check

## test: the whole test suite (Hypothesis profile "ci") except the tests marked slow
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow"

## test-slow: only the long end-to-end tests (hostile engines over cmd:, ...)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m slow

## backends: add the optional torch (CPU build), jax and autograd backends to the venv
backends: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[torch,jax,autograd]'

## lint: ruff and mypy (the four packages, as resverify.*, and tests/)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## dist: build the sdist and the wheel into dist/ (python -m build)
dist: $(STAMP)
	$(BIN)/python -m build --outdir dist

clean:
	rm -rf $(VENV) resverify-report .pytest_cache .hypothesis build dist *.egg-info
