# The two commands of the README do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests keep Ray's files in a temp dir and never report usage.
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: demo test check lint bench bench-incidents clean

$(STAMP): pyproject.toml constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints-dev.txt -e ".[torch,dev]"
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints-dev.txt --no-deps verl
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rankscope demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

# The inner loop: lint, types and the pure tests, which start no Ray (conftest.py marks the rest).
check: lint
	$(BIN)/pytest -q -m "not ray"

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# Issue 30's blind triage: every incident of benchmarks/incidents/ as a real job (~40 min).
bench-incidents: $(STAMP)
	$(BIN)/python benchmarks/bench_incidents.py

clean:
	rm -rf $(VENV) build *.egg-info
