# GMC-GRPO toolkit. The Makefile owns set-up: every target depends on the venv stamp,
# so a fresh clone needs only `make verify-bounds` or `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-stamp
# torch is pinned everywhere: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: all setup verify-bounds abstract tuned-sweep test figures report llm-smoke llm-sweep llm-study sim-sweeps bench lint clean-venv help

help:
	@echo "make verify-bounds   check every claim of THEORY.md, print the table"
	@echo "make test            run the whole test suite"
	@echo "make figures | report | llm-smoke | llm-sweep | llm-study | sim-sweeps | tuned-sweep | bench | lint"
	@echo "make all             every producer, then the figures and the report"

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)"
	$(PIP) install -q "$(TORCH)" -e ".[test,trl,gsm8k]"
	# verl pins an older transformers and CUDA extras: install it the way a CPU user can.
	$(PIP) install -q --no-deps "verl==0.9.1"
	$(PIP) install -q "$(TORCH)" ray tensordict omegaconf codetiming orjson
	touch $(STAMP)

setup: $(STAMP)

verify-bounds: $(STAMP)
	$(PY) -m claims

test: $(STAMP)
	$(PY) -m pytest -q -x --timeout=900

# Producers come before readers: `make all` makes every result, then draws and reports;
# `make figures` and `make report` only read results (a missing one is named with its command).
all: sim-sweeps tuned-sweep llm-sweep verify-bounds figures report

tuned-sweep: $(STAMP)
	$(PY) -m simulators.tuned_sweep

abstract: $(STAMP)
	$(PY) -m claims.abstract

figures: $(STAMP)
	$(PY) -m figures

report: abstract figures
	$(PY) -m figures.report

llm-study: $(STAMP)
	$(PY) -m llm_runs.study

llm-smoke: $(STAMP)
	$(PY) -m llm_runs.smoke

llm-sweep: $(STAMP)
	$(PY) -m llm_runs.sweep

sim-sweeps: $(STAMP)
	$(PY) -m simulators.sweep all

bench: $(STAMP)
	$(PY) -m estimators.bench
	@if [ -f simulators/bench.py ]; then $(PY) -m simulators.bench; fi
	@if [ -f llm_runs/bench.py ]; then $(PY) -m llm_runs.bench; fi

lint: $(STAMP)
	$(PIP) install -q ruff
	$(VENV)/bin/ruff check estimators bounds schema simulators llm_runs claims figures tests

clean-venv:
	rm -rf $(VENV)
