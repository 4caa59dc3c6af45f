# The two commands of the README do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests keep Ray's files in a temp dir and never report usage.
export RAY_USAGE_STATS_ENABLED := 0
# Python writes the bytecode of what it imports, once: pip compiles none at install (most of
# a wheel is never imported: pip took a minute of the install compiling it all), and the
# hundreds of processes the tests start (Ray workers, CLI calls) each compiled rankscope again
# where the machine sets PYTHONDONTWRITEBYTECODE.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(BIN)/pip install --quiet --disable-pip-version-check --no-compile

.PHONY: demo test test-tiers check check-pure-slow check-pure-rest lint bench bench-incidents clean

$(STAMP): pyproject.toml constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -c constraints-dev.txt -e ".[torch,dev]"
	$(PIP_INSTALL) -c constraints-dev.txt --no-deps verl
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rankscope demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

TEST_PROCESSES ?= 2
# lint and the tests at once (the tests mostly wait on Ray). The tests in three steps: those
# that need no Ray cluster on the machine (before any starts); then the rest in TEST_PROCESSES
# processes, each with its own two-node cluster, handed a test file at a time, longest first
# (conftest.py orders them); then, alone on the machine, the files that judge the ranks' pace
# (pytest.mark.alone: a neighbour's load changes it).
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 lint test-tiers

test-tiers: $(STAMP)
	$(BIN)/pytest -q -m before_cluster
	$(BIN)/pytest -q -m "not before_cluster and not alone" -n $(TEST_PROCESSES) \
		--dist loadfile --no-loadscope-reorder
	$(BIN)/pytest -q -m alone

# The inner loop: lint, types and the pure tests, which start no Ray (conftest.py marks the
# rest), in two pytest processes at once, one per core: the slowest folders, and all the others.
PURE_SLOW := tests/ckpt tests/cli tests/trace tests/hang
check: lint
	@$(MAKE) --no-print-directory -j2 --output-sync=target check-pure-slow check-pure-rest

check-pure-slow: $(STAMP)
	$(BIN)/pytest -q -m "not ray" $(PURE_SLOW)

check-pure-rest: $(STAMP)
	$(BIN)/pytest -q -m "not ray" tests $(addprefix --ignore=,$(PURE_SLOW))

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# Issue 30's blind triage: every incident of src/rankscope/demo/incidents/ as a real job (~40 min).
bench-incidents: $(STAMP)
	$(BIN)/python benchmarks/bench_incidents.py

clean:
	rm -rf $(VENV) build *.egg-info
