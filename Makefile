# mirrorflow: the two commands of the README are `make demo` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
CONFIG ?= include/config/mm2.properties
# The Spark provider depends on pyspark-client (Spark Connect only), which installs into
# the same `pyspark` namespace as the full distribution; the full one is reinstalled last.
PYSPARK_VERSION := 4.3.0
export PATH := $(BIN):$(PATH)
export PYSPARK_PYTHON := $(BIN)/python
export GX_ANALYTICS_ENABLED := false

.PHONY: install test lint demo down clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	$(BIN)/python -m pip install --no-deps --force-reinstall pyspark==$(PYSPARK_VERSION)
	touch $@

install: $(VENV)/.installed

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest

demo: install
	$(BIN)/mirrorflow demo $(CONFIG)
	$(BIN)/mirrorflow run $(CONFIG) --flow 'primary->backup' --json

down:
	$(BIN)/mirrorflow local down $(CONFIG)

clean: down
	rm -rf .mirrorflow .pytest_cache .ruff_cache

bench: install
	$(BIN)/python bench/run_bench.py
