# trainforge developer entry points. Every target creates .venv when it is missing.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# PyTorch wheels: pip takes these from the machine's local wheel store where it has one.
# On a Jetson install NVIDIA's wheel first (see docs/jetson_training.md) and set TORCH_PIP=.
TORCH_PIP ?= torch==2.14.1 torchvision==0.29.1
PYTEST := $(PY) -m pytest

.PHONY: demo test test-slow bench lint format clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_PIP)" ]; then $(PY) -m pip install -q $(TORCH_PIP); fi
	$(PY) -m pip install -q -e '.[all]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trainforge train config/vit_digits.yaml --set output.overwrite=true

test: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks
	$(PYTEST) -m "not slow and not gpu and not browser and not dist" -q

test-slow: $(STAMP)
	$(PYTEST) -m "slow and not gpu" -q

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests scripts benchmarks
	$(VENV)/bin/ruff format src tests scripts benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
