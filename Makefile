# `make test` and `make demo` set everything up on a fresh machine, then run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast test-long demo bench docs fuzz lint lint-static format clean

setup: $(STAMP)

# torch goes in first where no CUDA is present, pinned to a CPU build (TORCH_VERSION), so
# that the loose `torch>=2.2` of the extras is already satisfied and pip never pulls a
# multi-GB CUDA build onto a CPU-only machine. TORCH_INDEX_URL (empty: pip's own
# configuration, whose index serves the CPU build on this project's machines) takes torch
# from another index, e.g. `make setup TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu`
# where the default index serves CUDA builds. With CUDA, the extras resolve torch.
# pip installs without byte-compiling (it compiles one file at a time), and compileall
# compiles the installed packages afterwards on every core: 53 s instead of 79 s on this
# project's 2-core VM (2026-12-07). The tests import from the compiled files even where
# PYTHONDONTWRITEBYTECODE is set; a file some package ships that this Python cannot
# compile is skipped, as pip skips it (hence `|| true`).
TORCH_VERSION ?= 2.13.0
TORCH_INDEX_URL ?=
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if ! $(PY) -c "import torch" 2>/dev/null && ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q --no-compile torch==$(TORCH_VERSION) $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL),); fi
	$(PY) -m pip install -q --no-compile -e '.[dev]'
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	touch $(STAMP)

# The full suite, as CI runs it (.ci/run): everything that times nothing on two workers
# (pytest-xdist); then the tests that race processes against the clock (marker `racing`,
# tests/conftest.py), two files at a time, each file's tests in turn; then the tests that
# time real work (marker `serial`) one at a time, on a machine nothing else loads. The
# last two parts collect only their files (tests/suite_parts.py). Each part names its ten
# slowest tests.
# PYTHONDONTWRITEBYTECODE (set on this project's machines) is cleared for the tests: the
# suite starts hundreds of Python processes (xdist workers, training subprocesses, pool and
# Ray workers), and with it each one compiles the project's modules again and pytest
# rewrites every test module's asserts again; the caches go to __pycache__ (git-ignored).
test test-fast test-long: export PYTHONDONTWRITEBYTECODE :=
test: $(STAMP)
	$(PY) -m pytest -n 2 -m "not serial and not racing and not long" --durations=10
	$(PY) -m pytest -n 2 --dist loadfile -m racing --durations=10 $$($(PY) tests/suite_parts.py racing)
	$(PY) -m pytest -m serial --durations=10 $$($(PY) tests/suite_parts.py serial)

# The quick loop while editing: every test not marked `slow` (training runs, rl-zoo3,
# the wheel build, long simulations; see pyproject's pytest markers).
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 -m "not slow and not serial and not racing and not long"
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow and racing" $$($(PY) tests/suite_parts.py racing)
	$(PY) -m pytest -m "not slow and serial" $$($(PY) tests/suite_parts.py serial)

# The full reproductions `make test` leaves out for time (marker `long`: the superseded
# LLMMemoryPressure-v0's greedy figure, the LLM tasks' oracle figures and
# LLMMemoryPressure-v1's extra episodes, about two minutes): run them after a change to an LLM engine. `make test` reproduces each current
# task's score ends (greedy and the best reference) on full episodes.
test-long: $(STAMP)
	$(PY) -m pytest -m long --durations=10 tests/test_tasks.py

demo: $(STAMP)
	$(VENV)/bin/batch-env demo

bench: $(STAMP)
	$(VENV)/bin/batch-env bench

# The documentation site (Sphinx, MyST, furo) in docs/_build/html, built from scratch with
# warnings as errors: a broken link, a docstring reStructuredText cannot read or a public
# class or function without a docstring fails it. The env, task and API pages are
# generated from the code at build time (docs/_ext/). CI builds the same site inside
# `make test` (tests/test_docs.py), not twice, without viewcode's source pages and with
# Sphinx's JSON builder (the same pages' bodies and inventory, without the theme's templates).
docs: $(STAMP)
	rm -rf docs/_build
	$(VENV)/bin/sphinx-build -W --keep-going -j 2 -b html docs docs/_build/html

# The long fuzz profile (minutes): thousands of random configurations and action sequences
# per env; `make test` runs a short, derandomized one. FUZZ_EXAMPLES sets examples per test.
# No per-test timeout here (pyproject's 600 s guards `make test`): at 1,500 examples the
# vector env's lockstep test alone runs past 10 minutes on a 2-core machine.
FUZZ_EXAMPLES ?= 1500
fuzz: $(STAMP)
	BATCH_ENV_FUZZ=long BATCH_ENV_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/test_fuzz.py --timeout 0 --hypothesis-show-statistics

# ruff (pyproject's rules, mccabe complexity at most 15), the formatter's check (`make
# format` applies it), mypy on the four packages ([tool.mypy]) and the import
# contract between the packages (tests/test_layering.py). CI runs lint-static before the
# tests, which run the contract themselves (.ci/run).
LINT_PATHS = batch_env baselines agents experiments tests scripts docs/conf.py docs/_ext
lint: lint-static
	$(PY) -m pytest -q tests/test_layering.py

# lint without the import contract test, which `make test` runs too (.ci/run runs this)
lint-static: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy batch_env baselines agents experiments

format: $(STAMP)
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis docs/_build docs/api docs/tasks docs/cli.md docs/envs/*.md
