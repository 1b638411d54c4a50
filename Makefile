# Onceflow: `make demo` runs the reference job, `make test` runs everything.
# Both set up a virtual environment in .venv on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: all install demo test check unit integration fuzz bench check-java clean

all: test

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

check-java:
	@scripts/check-java.sh

demo: $(STAMP) check-java
	$(BIN)/onceflow demo

test: $(STAMP) check-java
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Lint and type-check the sources (configured in pyproject.toml).
check: $(STAMP)
	$(BIN)/ruff check src
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/python -m pytest -q tests/integration $(PYTEST_ARGS)

fuzz: $(STAMP)
	$(BIN)/python -m pytest -q tests/fuzz $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/onceflow bench produce
	$(BIN)/onceflow bench consume

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info src/*.egg-info
