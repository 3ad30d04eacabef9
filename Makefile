# Everything a fresh machine needs: Python 3.11+, pip and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
VISION := .venv-vision
# setuptools warns on every editable install of a package laid out other than as it is
# imported (resverify/ links to the four folders): "Please be careful with folders in your
# working directory with the same name as your package" (its InformationOnly, which pip
# shows as a BuildBackendWarning). It is information, not a problem (resverify/ is the
# only top-level name installed), and no setuptools setting avoids it, so the editable
# installs filter that one warning by its first words.
QUIET_INSTALL := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: verify test test-slow test-campaign lint backends blocks blocks-vision blocks-check blocks-smoke dist clean mutants flakes mutation mutation-ops bench bench-blocks matrix

$(STAMP): pyproject.toml constraints.txt
	@echo "make: installing resverify, editable, with the pinned versions of constraints.txt into $(VENV) (numpy, sympy, hypothesis, pytest, matplotlib, ruff, mypy; about 90 s on a fresh machine, seconds when cached)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(QUIET_INSTALL) $(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

## verify: check the NumPy reference backend and write the report (the main job)
verify: $(STAMP)
	$(BIN)/resverify check

## test: the whole test suite (Hypothesis profile "ci") except the tests marked slow; of the kill matrix, one catch per law and per foil (the rest: make test-slow)
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow"

## test-slow: only the tests marked slow: long end-to-end runs (hostile engines over cmd:, the wheel build, ...) and the rest of the kill matrix, but not the campaigns (make test-campaign)
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "slow and not campaign"

## test-campaign: the whole-catalogue tests: every mutant of tests/mutants/ killed under the ci profile, the whole corpus exported and passed by numpy (about 10 and 7 minutes, side by side); run it before resolving an issue
test-campaign: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m campaign

## backends: add the optional backends: torch (CPU build), jax, autograd, tensorflow-cpu, tinygrad, pytensor
backends: $(STAMP)
	@echo "make: installing the optional backends into $(VENV) (torch CPU build, jax, autograd, tensorflow-cpu, tinygrad, pytensor: large downloads, minutes)"
	$(QUIET_INSTALL) $(BIN)/python -m pip install --quiet -c constraints.txt -e '.[torch,jax,autograd,tensorflow,tinygrad,pytensor]'

## blocks: add what resverify blocks needs to .venv: torch (the CPU build constraints.txt pins, which every block check drives), transformers and dm-haiku (the catalog's Hugging Face and JAX blocks), x-transformers, diffusers and torchtune with torchao, and litgpt (their catalog blocks)
blocks: $(STAMP)
	@echo "make: installing torch 2.13.0+cpu (every block check drives it; about 30 s, 890 MB unless make backends put it there), transformers (the Hugging Face blocks; about 35 s, 185 MB), dm-haiku (the JAX blocks; about 2 s, 4.3 MB), x-transformers and diffusers (about 5 s, 70 MB) and torchtune with torchao 0.13.0 (about 10 s, 355 MB), litgpt with lightning (about 10 s, 40 MB; litgpt itself with --no-deps, its huggingface-hub cap contradicting transformers' pin) into $(VENV), pinned by constraints.txt"
	$(QUIET_INSTALL) $(BIN)/python -m pip install --quiet -c constraints.txt -e '.[torch,blocks-hf,blocks-jax,blocks-xt,blocks-diffusers,blocks-torchtune,blocks-litgpt]'
	$(QUIET_INSTALL) $(BIN)/python -m pip install --quiet --no-deps -c constraints.txt litgpt

## blocks-vision: timm and torchvision in a venv of their own (torch 2.14.1 + torchvision 0.29.1, the pairing that imports here; about 5.8 GB, 6 to 7 min with the tests), then their catalog tests
blocks-vision: pyproject.toml constraints.txt
	@echo "make: building $(VISION) with torch 2.14.1, torchvision 0.29.1 and timm (about 5.8 GB; 6 to 7 min with the tests), then the timm and torchvision block tests"
	$(PYTHON) -m venv $(VISION)
	$(VISION)/bin/python -m pip install --quiet --upgrade pip
	grep -v '^torch==' constraints.txt > $(VISION)/constraints.txt
	$(QUIET_INSTALL) $(VISION)/bin/python -m pip install --quiet -c $(VISION)/constraints.txt -e '.[dev]' torch==2.14.1 torchvision==0.29.1 timm==1.0.31
	$(VISION)/bin/python -m pytest -n 2 -p no:cacheprovider tests/blocks/test_catalog_timm.py tests/blocks/test_catalog_torchvision.py tests/blocks/test_exact_catalog_conv.py

## blocks-check: resverify blocks on the whole installed catalog (every law and claimed dtype, profile ci; report in resverify-report/blocks): 22 blocks, 750 law records, about 11 min in .venv on 2 busy cores, 7 of them the four Haiku blocks (JAX runs them op by op); the x-transformers, diffusers, torchtune and litgpt blocks 9 to 24 s each (about 2 min together)
blocks-check: $(STAMP)
	$(BIN)/resverify blocks check --all

## blocks-smoke: resverify blocks on three torch.nn blocks in float64 and float32 with their fast path, then a Hugging Face and a Haiku (JAX) block in float32 (profile dev, about 35 s): CI's subset
blocks-smoke: $(STAMP)
	$(BIN)/resverify blocks check 'torch.TransformerEncoderLayer(pre)' 'torch.TransformerEncoderLayer(post)' 'torch.TransformerDecoderLayer(pre)' --dtype float64 --dtype float32 --profile dev --paths fastpath --report-dir resverify-report/blocks-smoke
	$(BIN)/resverify blocks check hf.LlamaDecoderLayer haiku.BlockV1 --dtype float32 --profile dev --report-dir resverify-report/blocks-smoke-hf-jax

## matrix: resverify check on every installed CPU backend, one report in resverify-report/matrix
matrix: $(STAMP)
	$(BIN)/resverify check $$($(BIN)/resverify backends --names --device cpu | sed 's/^/--backend /') --report-dir resverify-report/matrix

## lint: ruff (with the complexity gate, C901 at 12) and mypy (the packages as resverify.*, tests/ and tools/)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## mutants: the property suite against every mutant of tests/mutants/ (tools/mutants.py): score, table, JSON and its own HTML page (no report carries the score)
mutants: $(STAMP)
	mkdir -p resverify-report
	$(BIN)/python tools/mutants.py -n 2 --out resverify-report/mutants.json --html resverify-report/mutants.html

## flakes: the whole suite on numpy, torch and jax under 200 seeds each; counts failures (must be 0), the known failures of docs/findings apart
flakes: $(STAMP)
	$(BIN)/python tools/flakes.py --runs 200 -j 2 --backend numpy --backend torch --backend jax --known-failures docs/findings/known-failures.toml --out flakes.json

## mutation: mutmut (own venv under build/mutation/) over spec/compare, budget, rounding, spec/exact and impl's autograd
mutation: $(STAMP)
	$(BIN)/python tools/mutation.py --out build/mutation/score.json
	$(BIN)/python tools/mutation.py --suite exact --out build/mutation/score-exact.json
	$(BIN)/python tools/mutation.py --suite impl --out build/mutation/score-impl.json

## mutation-ops: mutmut over spec/ops/, the op table (hours; see docs/strength.md section 3)
mutation-ops: $(STAMP)
	$(BIN)/python tools/mutation.py --suite ops --out build/mutation/score-ops.json

## bench: resverify's speed against its baselines (tools/bench.py), every figure a ratio (minutes; JSON in resverify-bench.json)
bench: $(STAMP)
	$(BIN)/python tools/bench.py --out resverify-bench.json

## bench-blocks: each catalog block's default check in its own forward+backward passes (tools/bench_blocks.py; about a minute; JSON in resverify-bench-blocks.json); the timm and torchvision rows: .venv-vision/bin/python tools/bench.py --only blocks
bench-blocks: $(STAMP)
	$(BIN)/python tools/bench.py --only blocks --out resverify-bench-blocks.json

## dist: build the sdist and the wheel into dist/ (python -m build)
dist: $(STAMP)
	$(BIN)/python -m build --outdir dist

clean:
	rm -rf $(VENV) $(VISION) resverify-report .pytest_cache .hypothesis build dist *.egg-info flakes.json resverify-bench.json
