# Two commands do all the set-up on a fresh machine:
#   make flywheel   run the flywheel on the embedded defaults (no services, no credentials)
#   make test       run the test suite
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The simulation: the task's own play, the `replay:` section of its YAML (flights: the 275 days
# from April 1, April's first three weeks labelled before the first model; docs/benchmarks.md:
# how long it takes). START, DAYS and BOOTSTRAP_DAYS choose another span; all of 2013, the first
# model after January: START=2013-01-01 DAYS=365 BOOTSTRAP_DAYS=31. RUN_ARGS passes more options
# (e.g. --trials 8 --drift celsius@2013-12-10).
# TASK plays another task than the default one (flights), in a state folder of its own
# (.flywheel-<task>): `make flywheel TASK=movielens` plays the MovieLens ratings month by month
# from March 1996, its first model after a year.
TASK ?=
ifneq ($(TASK),)
export FLYWHEEL_TASK := $(TASK)
export FLYWHEEL_HOME ?= $(CURDIR)/.flywheel-$(TASK)
endif
START ?=
DAYS ?=
BOOTSTRAP_DAYS ?=
RUN_ARGS ?=
# `make compare`: the flywheel against a weekly retraining, each a simulation of its own once
# per seed (seeds 0 to COMPARE_SEEDS-1), plays side by side on the cores: from November 9, the
# first model after 16 days (its 7 validation and 7 test days held out, and one more labelled
# day to train on), then three production weeks. `make compare-grid`: every policy (static,
# fixed cadences of 3, 7, 14 and 28 days, drift, performance too) over November and December,
# the backtest of docs/benchmarks.md.
COMPARE_START ?= 2013-11-09
COMPARE_DAYS ?= 37
COMPARE_BOOTSTRAP_DAYS ?= 16
COMPARE_POLICIES ?= every-7d,flywheel
COMPARE_SEEDS ?= 3
GRID_START ?= 2013-11-01
GRID_DAYS ?= 61

export FLYWHEEL_HOME ?= $(CURDIR)/.flywheel
export DAGSTER_HOME ?= $(FLYWHEEL_HOME)/dagster
export DBT_SEND_ANONYMOUS_USAGE_STATS := false

.PHONY: setup flywheel compare compare-grid test test-fast test-all fuzz lint sbom audit dev data-pull clean stack-up stack-down stack-status stack-flywheel docs-screenshots

setup: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml dbt_project/target/manifest.json

# torch goes in first through pip, so a machine's own wheel index or the registry's default build
# is used; uv then resolves the rest around it, keeping that torch. A machine without an NVIDIA
# GPU (no /dev/nvidia0) that reaches PyTorch's CPU index (asked once, 5 s at most) also installs
# from it: its build (2.13.0+cpu, preferred over the registry's 2.13.0) leaves out the CUDA
# libraries. TORCH_INDEX= turns that off. Each step prints what it downloads and installs.
# Bytecode is compiled at install: with none on disk (uv writes none by default, and nothing is
# written where PYTHONDONTWRITEBYTECODE is set), every process compiles dagster, dbt and lightning
# again as it imports them, seconds per process start. deploy/dev-overrides.txt leaves out what
# costs every process seconds and nothing needs (an environment made before loses it too).
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX ?= $(if $(wildcard /dev/nvidia0),,$(shell python3 -c "import urllib.request as r; r.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=5)" >/dev/null 2>&1 && echo $(TORCH_CPU_INDEX)))
$(VENV)/.installed: pyproject.toml deploy/dev-overrides.txt
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing torch ($(if $(TORCH_INDEX),its CPU build from $(TORCH_INDEX),the build of the machine's indexes)) and uv"
	$(PY) -m pip install --disable-pip-version-check --progress-bar off uv==0.13.9 torch==2.13.0 $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	@echo "installing flywheel and its dependencies"
	$(VENV)/bin/uv pip install --compile-bytecode --python $(PY) --overrides deploy/dev-overrides.txt -e ".[dev]"
	$(VENV)/bin/uv pip uninstall --quiet --python $(PY) rfc3987-syntax
	touch $@

$(DAGSTER_HOME)/dagster.yaml: deploy/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp deploy/dagster.yaml $@

dbt_project/target/manifest.json: $(VENV)/.installed $(shell find dbt_project -name '*.sql' -o -name '*.yml' -not -path '*/target/*')
	cd dbt_project && ../$(VENV)/bin/dbt parse --quiet --profiles-dir .

flywheel: setup
	$(PY) -m sim run $(if $(START),--start $(START)) $(if $(DAYS),--days $(DAYS)) $(if $(BOOTSTRAP_DAYS),--bootstrap-days $(BOOTSTRAP_DAYS)) $(RUN_ARGS)

compare: setup
	$(PY) -m sim compare --start $(COMPARE_START) --days $(COMPARE_DAYS) --bootstrap-days $(COMPARE_BOOTSTRAP_DAYS) --policies $(COMPARE_POLICIES) --seeds $(COMPARE_SEEDS) --out $(FLYWHEEL_HOME)/compare $(RUN_ARGS)

compare-grid: setup
	$(PY) -m sim compare --start $(GRID_START) --days $(GRID_DAYS) --seeds $(COMPARE_SEEDS) --out $(FLYWHEEL_HOME)/compare-grid $(RUN_ARGS)

# Two workers: the stack tests (one group, one stack at a time) mostly wait on their processes
# while the other worker computes.
test: setup
	$(VENV)/bin/pytest -m "not slow" -n 2 --dist loadgroup --durations=25 --cpu-report 25

# The inner loop: the unit tests, without the services, the stack and the loop played over days.
test-fast: setup
	$(VENV)/bin/pytest -m "not slow and not integration" -n 2 -q --durations=10 --cpu-report 10

# The slow tests too (the kill tests on copies of a played world, DDP); the long fuzzing profile
# runs on its own, as long as FLYWHEEL_FUZZ_EXAMPLES asks (docs/reliability.md).
test-all: setup
	$(VENV)/bin/pytest -m "not fuzz" -n 2 --dist loadgroup --durations=25

fuzz: setup
	$(VENV)/bin/pytest -m fuzz -n 2

# Python style (ruff), then SQL style (sqlfluff, each model as dbt compiles it: dbt_project/.sqlfluff);
# the compile connects to an in-memory DuckDB, not the warehouse.
lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	cd dbt_project && FLYWHEEL_WAREHOUSE_PATH=:memory: ../$(VENV)/bin/sqlfluff lint --nocolor models tests

# The production lock's SBOM (build/sbom.cdx.json, offline), and its vulnerability scan, which
# needs a vulnerability service (PyPI's) and fails on a finding not waived in deploy/waivers.toml.
sbom: setup
	$(PY) -m deploy.supply_chain sbom

audit: setup
	$(PY) -m deploy.supply_chain audit

# Reproduce the files of dataset pointers committed in data/ (FLYWHEEL_DVC_REPO=$PWD/data) from the
# remote (a fresh clone needs only this).
DVC_REMOTE ?= $(FLYWHEEL_HOME)/dvc-remote
data-pull: setup
	cd data && ../$(VENV)/bin/dvc remote add --local --force --default flywheel $(DVC_REMOTE)
	cd data && ../$(VENV)/bin/dvc pull

# The production-shaped stack on this machine (docs/deployment.md): PostgreSQL, PgBouncer, an
# S3-compatible object store, an MLflow server, the code location's gRPC server, the Dagster daemon
# and webserver, each its own process under supervisord, which restarts one that dies. `stack-up`
# starts what is not running; `stack-down` stops it all and keeps the state.
stack-up: setup
	$(PY) -m deploy.stack up

stack-down: setup
	$(PY) -m deploy.stack down

stack-status: setup
	$(PY) -m deploy.stack status

# The simulation driven by the stack's daemon (a process per run), with the stack's settings (its
# stack.env). The stack must be up, started with held-out windows the bootstrap days can hold,
# e.g. `FLYWHEEL_VALIDATION_DAYS=1 FLYWHEEL_TEST_DAYS=1 FLYWHEEL_TRIALS=1 FLYWHEEL_MAX_EPOCHS=2
# make stack-up` (docs/deployment.md).
STACK_DAYS ?= 10
STACK_START ?= 2013-08-20
STACK_ARGS ?= --bootstrap-days 5
stack-flywheel: setup
	@test -f $(FLYWHEEL_HOME)/stack/stack.env || { echo "no stack under $(FLYWHEEL_HOME): make stack-up first" >&2; exit 1; }
	set -a && . $(FLYWHEEL_HOME)/stack/stack.env && set +a && \
	  $(PY) -m sim run --daemon --start $(STACK_START) --days $(STACK_DAYS) $(STACK_ARGS)

dev: setup
	$(VENV)/bin/dagster dev -w workspace.yaml

# The Dagster UI's screenshots in docs/images/, from a short simulation in a throwaway state; needs
# Chromium (apt-get install chromium) and installs Playwright's package on first use
# (tools/screenshots.py).
docs-screenshots: setup
	$(PY) -m tools.screenshots --out docs/images

clean:
	if test -d $(FLYWHEEL_HOME)/stack; then $(PY) -m deploy.stack down; fi
	rm -rf $(FLYWHEEL_HOME) dbt_project/target
