# trainforge developer entry points. Every target creates .venv when it is missing.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# PyTorch wheels: pip takes these from the machine's local wheel store where it has one.
# On a Jetson install NVIDIA's wheel first (see docs/jetson_training.md) and set TORCH_PIP=.
TORCH_PIP ?= torch==2.14.1 torchvision==0.29.1
PYTEST := $(PY) -m pytest
# Shell and Dockerfile linters (pyproject extra `kits`); the venv's shellcheck where pip has a
# wheel for this machine, the system's otherwise.
SHELLCHECK = $(firstword $(wildcard $(VENV)/bin/shellcheck) shellcheck)
LINT_SHELL = $(SHELLCHECK) scripts/*.sh && $(VENV)/bin/hadolint Dockerfile.dgx-spark

.PHONY: demo test test-slow test-dist test-slurm test-browser test-long test-times test-gpu serve \
	bench bench-gpu lint format clean venv dist

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if [ -n "$(TORCH_PIP)" ]; then $(PY) -m pip install -q $(TORCH_PIP); fi
	$(PY) -m pip install -q -e '.[all]'
	test -x $(VENV)/bin/shellcheck || command -v shellcheck >/dev/null || \
		{ apt-get update -q && apt-get install -y -q shellcheck; } || \
		echo "shellcheck missing: install it with your package manager (make lint needs it)"
	# OpenSSH's server and rsync: the target tests put a real login node on a loopback port.
	test -x /usr/sbin/sshd && command -v rsync >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			openssh-server rsync; } || \
		echo "sshd or rsync missing: install openssh-server and rsync (the target tests need them)"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trainforge train config/vit_digits.yaml --set output.overwrite=true

# The suites by marker. PYTEST_ARGS adds pytest options to every suite (test-times uses it).
# TEST_WORKERS: pytest-xdist worker processes for the fast and long suites (`auto`: one per
# core; 0 runs in this process, as a debugger wants). Slurm's suite stays in one process: its
# tests share one cluster on this machine.
FAST_TESTS := not slow and not gpu and not browser and not dist and not slurm
LONG_TESTS := (slow or dist or browser) and not gpu and not slurm
PYTEST_ARGS ?=
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS)

test: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks
	$(LINT_SHELL)
	$(PYTEST) -m "$(FAST_TESTS)" -q $(XDIST) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PYTEST) -m "slow and not gpu and not slurm" -q $(PYTEST_ARGS)

# Multi-process torch.distributed cases: real torchrun launches with Gloo on CPU.
# The two-node test joins two network namespaces (`ip netns`, iproute2; root).
test-dist: $(STAMP)
	command -v ip >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2; }
	$(PYTEST) -m "dist and not gpu" -q $(PYTEST_ARGS)

# Real Slurm clusters (Debian's slurm-wlm with munge) that benchmarks/slurm_cluster.py configures
# and starts on this machine: one node, and two nodes in network namespaces (`ip netns`,
# iproute2); runs as root and installs the packages when missing.
test-slurm: $(STAMP)
	command -v slurmctld >/dev/null && command -v munged >/dev/null && command -v ip >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge iproute2; }
	$(PYTEST) -m slurm -q $(PYTEST_ARGS)

# Browser tests drive a real headless Chromium through Playwright. Playwright's own browser
# download is not reachable from every machine, so the distribution's chromium is used
# (tests/web/test_browser.py finds it; TRAINFORGE_CHROMIUM=PATH picks another).
test-browser: $(STAMP)
	command -v chromium >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	$(PYTEST) -m browser -q $(PYTEST_ARGS)

# test-slow, test-dist and test-browser in one pytest start: one collection of the suite (about
# 30 s each) instead of three, and a test with two of the markers runs once. CI runs this.
test-long: $(STAMP)
	command -v ip >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2; }
	command -v chromium >/dev/null || \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
	$(PYTEST) -m "$(LONG_TESTS)" -q $(XDIST) $(PYTEST_ARGS)

# The 30 slowest tests of each suite CI runs (the fast one, the long ones, Slurm's).
test-times: $(STAMP)
	$(PYTEST) -m "$(FAST_TESTS)" -q $(XDIST) --durations=30 $(PYTEST_ARGS)
	$(MAKE) test-long PYTEST_ARGS="--durations=30 $(PYTEST_ARGS)"
	$(MAKE) test-slurm PYTEST_ARGS="--durations=30 $(PYTEST_ARGS)"

# The CUDA suite on a GPU machine (CI never runs it): every `gpu`-marked test, under 10 minutes
# on one H100. The log and a JUnit report go to $(OUT) so one command brings the evidence back.
OUT ?= runs/gpu-evidence
test-gpu: $(STAMP)
	mkdir -p $(OUT)
	set -o pipefail; $(PYTEST) -m gpu -rs -v --durations=20 tests --junitxml=$(OUT)/test-gpu.xml 2>&1 | \
		tee $(OUT)/test-gpu.log

serve: $(STAMP)
	$(VENV)/bin/trainforge serve

bench: $(STAMP)
	$(PY) benchmarks/run.py $(ONLY)

# The GPU rows of `make bench` (ViT-S/4 eager and compiled, input pipeline on the device,
# checkpoint stall, G2P PER/WER) in under 10 minutes: $(OUT)/summary.md plus the raw logs.
bench-gpu: $(STAMP)
	$(PY) benchmarks/gpu_suite.py $(OUT)

# The wheel and sdist users install (dist/), built with the venv's setuptools (the
# build-system's; no download) from a clean copy of the sdist, then checked by twine (metadata,
# the README as PyPI renders it). The wheel holds the package and its recipes, no tests.
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests scripts benchmarks
	$(VENV)/bin/ruff format --check src tests scripts benchmarks
	$(LINT_SHELL)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests scripts benchmarks
	$(VENV)/bin/ruff format src tests scripts benchmarks

clean:
	rm -rf $(VENV) .venv-peers runs dist .pytest_cache .ruff_cache
