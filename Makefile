# GMC-GRPO toolkit. The Makefile owns set-up: every target depends on the venv stamp,
# so a fresh clone needs only `make verify-bounds` or `make test`.
# Two environments, each `pip check` clean (asserted when it is built):
#   .venv       the toolkit, TRL and Ray (no verl)
#   .venv-verl  the toolkit and verl 0.9.1 with all its dependencies (no TRL: TRL 1.16 breaks
#               verl's model build, verl/models/transformers/monkey_patch.py imports a class
#               TRL no longer has)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-stamp
VERL_VENV := .venv-verl
VPY := $(VERL_VENV)/bin/python
VPIP := $(VERL_VENV)/bin/pip
VERL_STAMP := $(VERL_VENV)/.installed-stamp
COMMA := ,
# torch is pinned everywhere: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
# transformers is pinned in the main environment to the release the lean Qwen3 forward was checked
# against (llm_runs/qwen3_forward.py, CHECKED_TRANSFORMERS), on which the committed runs replay byte for byte;
# verl's environment keeps verl's own pin.
MAIN_PINS := transformers==5.24.*
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: all setup setup-verl verify-bounds abstract verdicts tuned-sweep test test-main test-verl test-kernel-path figures report llm-smoke llm-sweep llm-study llm-mechanism gpu-study sim-sweeps bench lint clean-venv help

help:
	@echo "make verify-bounds   check every claim of THEORY.md, print the table"
	@echo "make test            run the whole test suite (main suite in .venv, verl suite in .venv-verl)"
	@echo "make test-kernel-path   the main suite again on another CPU kernel path (CI runs it after make test)"
	@echo "make setup | setup-verl   build .venv | .venv-verl"
	@echo "make figures | report | llm-smoke | llm-sweep | llm-study | sim-sweeps | tuned-sweep | bench | lint"
	@echo "make gpu-study       the Qwen3-0.6B study on one CUDA GPU (8 minutes; --dry-run: python -m studies.gpu.run --dry-run)"
	@echo "make all             every producer, then the figures and the report"

# $(call venv,DIR,EXTRAS,ABSENT,PINS): DIR with torch, the toolkit and EXTRAS (and the requirements PINS), the
# packages ABSENT removed if an older set-up left them there, `pip check` clean, then the stamp. The main
# environment has no `kernels` package: it can swap a layer's forward, so the lean Qwen3 path refuses to run
# beside it (llm_runs/qwen3_forward.py), and a transformers outside the pin installs it.
define venv
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/pip install -q --upgrade pip
	$(1)/bin/pip install -q "$(TORCH)" $(4) -e ".[$(2)]"
	for p in $(3); do if $(1)/bin/pip show -q $$p 2>/dev/null; then $(1)/bin/pip uninstall -q -y $$p; fi; done
	$(1)/bin/pip check
	touch $(1)/.installed-stamp
endef

$(STAMP): pyproject.toml Makefile
	$(call venv,$(VENV),test$(COMMA)trl$(COMMA)gsm8k$(COMMA)ray$(COMMA)gpu,verl kernels,"$(MAIN_PINS)")

$(VERL_STAMP): pyproject.toml Makefile
	$(call venv,$(VERL_VENV),test$(COMMA)verl,trl)

setup: $(STAMP)

setup-verl: $(VERL_STAMP)

verify-bounds: $(STAMP)
	$(PY) -m claims

test: test-main test-verl

# The main suite on every core (pytest-xdist; a module's tests stay in one process, so its fixtures are
# built once); TEST_JOBS=0 runs it in this one process.
TEST_JOBS ?= auto
test-main: $(STAMP)
	$(PY) -m pytest -q -x --timeout=900 -n $(TEST_JOBS) --dist loadfile tests

# The main suite on another CPU kernel path than this machine's own: ATen's scalar (non-vectorised) kernels and
# MKL's conditional-bitwise-reproducible code path, which sum in other orders than AVX2/AVX-512 do. A float
# tolerance that holds only for one CPU's rounding fails here (.ci/run runs it after `make test`).
KERNEL_PATH_ENV ?= ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE
test-kernel-path: $(STAMP)
	env $(KERNEL_PATH_ENV) $(PY) -m pytest -q -x --timeout=900 -n $(TEST_JOBS) --dist loadfile tests

test-verl: $(VERL_STAMP)
	$(VPY) -m pytest -q -x --timeout=900 tests/verl_suite

# Producers come before readers: `make all` makes every result, then draws and reports;
# `make figures` and `make report` only read results (a missing one is named with its command).
all: sim-sweeps tuned-sweep llm-sweep verify-bounds figures report

tuned-sweep: $(STAMP)
	$(PY) -m simulators.tuned_sweep

abstract: verdicts
	$(PY) -m claims.abstract

figures: $(STAMP)
	$(PY) -m studies.figures

verdicts: $(STAMP)
	$(PY) -m studies.staleness --json results/llm/study/verdicts.json

report: abstract verdicts figures
	$(PY) -m studies.report

llm-study: $(STAMP)
	$(PY) -m studies.run

llm-mechanism: $(STAMP)
	$(PY) -m studies.run --grid mechanism --resume

# One CUDA GPU, at most 8 minutes; needs the [gpu] extra (the Qwen3 tokenizer files).
gpu-study: $(STAMP)
	$(PY) -m studies.gpu.run

llm-smoke: $(STAMP)
	$(PY) -m llm_runs.smoke

llm-sweep: $(STAMP)
	$(PY) -m grids.sweep

sim-sweeps: $(STAMP)
	$(PY) -m simulators.sweep all

bench: $(STAMP)
	$(PY) -m estimators.bench
	@if [ -f simulators/bench.py ]; then $(PY) -m simulators.bench; fi
	@if [ -f llm_runs/bench.py ]; then $(PY) -m llm_runs.bench; fi
	@if [ -f studies/budget/pairs_bench.py ]; then $(PY) -m studies.budget.pairs_bench; fi

# ruff alone, pinned, in the main environment: its stamp names the version, so a new pin installs it and a ruff
# already there at the pin installs nothing. Lint needs no toolkit, so an edit of pyproject.toml (its [tool.ruff]
# included) does not rebuild the environment for it.
RUFF_VERSION := 0.17.6
RUFF := $(VENV)/bin/ruff
RUFF_STAMP := $(VENV)/.ruff-$(RUFF_VERSION)-stamp
LINT_PATHS := estimators bounds stats schema simulators llm_runs grids claims figures report_card studies execution tests

$(RUFF_STAMP):
	@test -x $(PY) || command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(RUFF) --version 2>/dev/null | grep -qx "ruff $(RUFF_VERSION)" || $(PIP) install -q "ruff==$(RUFF_VERSION)"
	touch $@

lint: $(RUFF_STAMP)
	$(RUFF) check $(LINT_PATHS)

clean-venv:
	rm -rf $(VENV) $(VERL_VENV)
