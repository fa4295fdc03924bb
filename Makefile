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
# torch is pinned everywhere: an unpinned torch pulls a multi-GB CUDA build.
TORCH := torch==2.13.0
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-verl verify-bounds test test-main test-verl figures report llm-smoke llm-sweep sim-sweeps bench lint clean-venv help

help:
	@echo "make verify-bounds   check every claim of THEORY.md, print the table"
	@echo "make test            run the whole test suite (main suite in .venv, verl suite in .venv-verl)"
	@echo "make setup | setup-verl   build .venv | .venv-verl"
	@echo "make figures | report | llm-smoke | llm-sweep | sim-sweeps | bench | lint"

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)" -e ".[test,trl,gsm8k,ray]"
	# verl lives in .venv-verl only (a verl here would leave pip check broken)
	if $(PIP) show -q verl 2>/dev/null; then $(PIP) uninstall -q -y verl; fi
	$(PIP) check
	touch $(STAMP)

$(VERL_STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	test -x $(VPY) || $(PYTHON) -m venv $(VERL_VENV)
	$(VPIP) install -q --upgrade pip
	$(VPIP) install -q "$(TORCH)" -e ".[test,verl]"
	if $(VPIP) show -q trl 2>/dev/null; then $(VPIP) uninstall -q -y trl; fi
	$(VPIP) check
	touch $(VERL_STAMP)

setup: $(STAMP)

setup-verl: $(VERL_STAMP)

verify-bounds: $(STAMP)
	$(PY) -m bounds.verify

test: test-main test-verl

test-main: $(STAMP)
	$(PY) -m pytest -q -x --timeout=900 tests

test-verl: $(VERL_STAMP)
	$(VPY) -m pytest -q -x --timeout=900 tests/verl_suite

figures: $(STAMP)
	$(PY) -m figures

report: $(STAMP)
	$(PY) -m figures.report

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
	$(VENV)/bin/ruff check estimators bounds simulators llm_runs figures execution tests

clean-venv:
	rm -rf $(VENV) $(VERL_VENV)
