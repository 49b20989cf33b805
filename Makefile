# One entry point for a fresh clone:
#   make setup  - .venv from requirements.lock, project installed editable, Java check,
#                 Delta jars cached in .cache/, the local file system's jar and the log
#                 stores' (file: and S3) built there where a JDK is, the S3 server's own venv in
#                 .cache/s3-server, the Data Docs' styles and scripts (npm packages, pinned in
#                 dataflow_core/quality/assets.py) in .cache/data-docs-assets/, and the
#                 driver JVM's class-data archive in .cache/jvm-archive/ (a minute, once; every
#                 driver maps it instead of loading Spark's classes: docs/setup.md;
#                 idempotent; re-installs when a lock changes)
#   make test   - setup, ruff's lint (pyproject.toml's [tool.ruff]: undefined names, unused
#                 imports), mypy on the core ([tool.mypy], beside the pure tests), then the
#                 whole pytest suite (tests/): the pure model tests while the
#                 suite's JVM class archive is built if it is missing (tests/jvm_archive.py),
#                 then the integration tests; installs Debian's chromium for the browser test
#                 if it is missing and apt-get can (scripts/ensure-chromium.sh)
#   make demo   - setup, then the product's story on sample data (python -m dataflow_core.examples.jobs.demo)
#   make bench  - setup, then every benchmarks/bench_*.py
#   make airflow       - Airflow standalone in the background (UI on :8080, project's DAGs, SQLite
#                        DB, sample data generated if none); prints the URL, user and password
#   make airflow-stop  - stop it: every process it started, task processes and Spark JVMs included
#   make airflow-demo  - the dataflow_demo DAG once through `airflow dags test`
#   make stack         - docker-compose.yml's topology as processes, without Docker
#                        (scripts/stack.py, settings in stack.env): PostgreSQL, Airflow's
#                        api-server, scheduler, dag-processor and triggerer (LocalExecutor), a
#                        Spark master and two workers, the S3 server and the warehouse on
#                        s3a://; prints the UI's address and login
#   make stack-stop    - stop it: no process of it is left
#   make stack-check   - make stack, one dataflow_backfill DAG run through the REST API, its
#                        table read back from S3, make stack-stop (tests/stack_check.py; CI)
#   make docs   - the paper's figures (docs/figures/*.svg) from docs/figures/scenarios/*.yaml
#   make lock   - re-resolve requirements.lock from pyproject.toml, install it, and write the
#                 Delta jars' lock from Ivy's resolution (needs network)
#   make clean  - generated data and caches of tests; `make distclean` also .venv and .cache

SHELL := /bin/bash
PYTHON ?= python3
PYTHON_VERSION := 3.11
UV_VERSION := 0.13.9
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
LOCK := requirements.lock
# The install stamp is named after the lock's content and the install recipe's version
# (INSTALL_RECIPE, raised when the recipe below changes), so any change re-installs.
INSTALL_RECIPE := 2
LOCK_HASH := $(shell { cat $(LOCK) pyproject.toml; echo $(INSTALL_RECIPE); } 2>/dev/null | sha256sum | cut -c1-12)
DEPS_STAMP := $(VENV)/.deps-$(LOCK_HASH)
PYTEST_ARGS ?=
# Test workers side by side (pytest-xdist with tests/conftest.py's scheduler and
# `--no-loadscope-reorder`: each worker is handed the next test, in the order conftest.py
# gives, whenever it is down to two queued, so no worker is left alone with a pre-assigned
# tail of long tests; a module in conftest.py's ONE_WORKER goes to one worker whole, so its
# module-scoped setup, an Airflow home, a Spark cluster or a sample warehouse, is made once,
# not once per worker). Two on 2 cores: a test that waits for processes it
# started (Airflow, a Spark command, a killed run) leaves a core to the other worker's tests.
# A third on 2 cores does not help: the integration tests took 862 s on three against 838 s on
# two, the machine 98% busy throughout: they are bound by CPU, not by waits.
# 0 runs the tests in this process, one after another; more workers pay with more cores,
# e.g. `make test PYTEST_WORKERS=8` on 8.
PYTEST_WORKERS ?= 2

.PHONY: setup test demo bench docs airflow airflow-stop airflow-demo stack stack-stop stack-check lock clean distclean

# The S3 server of development and tests (moto's standalone server, tests/s3_server.py starts
# and stops it by PID): a venv of its own, so that moto's pins never meet the product's.
# 27 packages from tests/s3-server.lock, about 1 s from uv's cache.
S3_SERVER_VENV := .cache/s3-server
S3_SERVER_LOCK := tests/s3-server.lock
S3_SERVER_READY := $(S3_SERVER_VENV)/.ready-$(shell cat $(S3_SERVER_LOCK) 2>/dev/null | sha256sum | cut -c1-12)
$(S3_SERVER_READY): $(S3_SERVER_LOCK) $(DEPS_STAMP)
	@rm -rf $(S3_SERVER_VENV)
	$(PYTHON) -m venv $(S3_SERVER_VENV)
	@$(UV) pip install --quiet --offline --python $(S3_SERVER_VENV)/bin/python -r $(S3_SERVER_LOCK) 2>/dev/null \
		|| $(UV) pip install --quiet --python $(S3_SERVER_VENV)/bin/python -r $(S3_SERVER_LOCK)
	@touch $@

# The project's own modules are compiled here too (quick: only what changed), for the same
# reason as --compile-bytecode below; a stale .pyc is never used (Python checks the source).
setup: $(VENV)/.ready $(S3_SERVER_READY)
	@$(PY) -m compileall -q -j 0 dataflow_core dags tests >/dev/null
	@$(PY) -m dataflow_core.spark.platform.jars
	@$(PY) -m dataflow_core.spark.platform.localfs
	@$(PY) -m dataflow_core.spark.platform.logstore
	@$(PY) -m dataflow_core.quality.assets
	@$(PY) -m dataflow_core.spark.platform.class_archive

$(PY):
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(0 if v == "$(PYTHON_VERSION)" else "make setup: $(PYTHON) is Python " + v + ", the lock is for Python $(PYTHON_VERSION); run make PYTHON=python$(PYTHON_VERSION) setup")'
	$(PYTHON) -m venv $(VENV)

# --compile-bytecode: uv, unlike pip, leaves modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (as on CI) Python then never caches them either: every
# process would compile what it imports (Great Expectations alone: 11 CPU s, 3.6 s compiled).
# --offline first: when uv's cache holds every pinned wheel (any machine that installed the
# lock before), nothing is asked of the index, whose revalidation of the 163 packages took
# 20 of the install's 33 s; anything missing from the cache fails that attempt before it
# installs a file, and the install then goes to the index.
$(DEPS_STAMP): $(PY) $(LOCK) pyproject.toml
	@echo "make setup: installing $(LOCK) into $(VENV) ..."
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	@$(UV) pip install --quiet --offline --compile-bytecode --python $(PY) -r $(LOCK) 2>/dev/null \
		|| { echo "make setup: not every package of $(LOCK) is in uv's cache; fetching from the index ..."; \
		     $(UV) pip install --quiet --compile-bytecode --python $(PY) -r $(LOCK); }
	$(UV) pip install --quiet --python $(PY) --no-deps -e .
	@rm -f $(VENV)/.deps-*
	@touch $@

# Other tools wait for this file: the venv is complete. Its packages are found, not
# imported: importing them takes 5 s (and Airflow makes folders in its home on import); each
# is imported by every command that needs it.
READY_MODULES := pyspark delta airflow great_expectations pytest dataflow_core
$(VENV)/.ready: $(DEPS_STAMP)
	@$(PY) -c 'import importlib.util as u, sys; gone = [m for m in sys.argv[1:] if u.find_spec(m) is None]; \
		sys.exit("make setup: $(VENV) is incomplete (no " + ", ".join(gone) + "); run make distclean setup" if gone else 0)' \
		$(READY_MODULES)
	@touch $@

# Two pytest sessions, the whole suite between them (PYTEST_ARGS goes to both). The pure
# model tests start no JVM, so they run in one process while the JVM class archive is built
# beside them (one JVM, mostly one busy thread: the other core was idle); then the
# integration tests on the workers. Each session may find nothing to run (PYTEST_ARGS
# chose tests of one kind), not both. Each prints its slowest steps, the integration
# session 40 of them (a --durations in PYTEST_ARGS wins).
LINTED := dataflow_core dags tests benchmarks scripts

test: setup
	@$(PY) -m ruff check --quiet $(LINTED) || { echo "make test: FAILED - ruff found the problems above (pyproject.toml's [tool.ruff] says which checks)" >&2; exit 1; }
	@scripts/ensure-chromium.sh
	@mkdir -p .cache; $(PY) -m tests.jvm_archive > .cache/jvm-archive.out 2>&1 & archive=$$!; \
	$(PY) -m mypy --cache-dir .cache/mypy > .cache/mypy.out 2>&1 & typed=$$!; \
	$(PY) -m pytest -m "not integration" --durations=15 $(PYTEST_ARGS) tests/; pure=$$?; \
	wait $$archive; cat .cache/jvm-archive.out; \
	if ! wait $$typed; then cat .cache/mypy.out; echo "make test: FAILED - mypy found the type errors above (pyproject.toml's [tool.mypy] says what it checks)" >&2; exit 1; fi; \
	$(PY) -m pytest -n $(PYTEST_WORKERS) --no-loadscope-reorder --durations=40 -m integration $(PYTEST_ARGS) tests/; rc=$$?; \
	if [ $$pure -eq 5 ] && [ $$rc -eq 5 ]; then echo "make test: FAILED - pytest collected no tests in tests/" >&2; exit 1; fi; \
	[ $$pure -eq 5 ] && pure=0; [ $$rc -eq 5 ] && rc=0; \
	if [ $$pure -ne 0 ]; then echo "make test: FAILED - the pure model tests failed (see above)" >&2; exit $$pure; fi; \
	exit $$rc

demo: setup
	$(PY) -m dataflow_core.examples.jobs.demo

bench: setup
	@shopt -s nullglob; scripts=(benchmarks/bench_*.py); \
	if [ $${#scripts[@]} -eq 0 ]; then echo "make bench: no benchmarks/bench_*.py found" >&2; exit 1; fi; \
	for script in "$${scripts[@]}"; do echo "== $$script"; $(PY) "$$script" || exit $$?; done

# The paper's pane diagrams, replayed from the scenarios and drawn by `dataflow diagram`'s code.
docs: setup
	$(PY) -m dataflow_core.diagram.figures docs/figures/scenarios docs/figures

# Airflow on this machine: SQLite metadata and the project's dags/ (scripts/airflow-env.sh).
airflow: setup
	@scripts/airflow-standalone.sh start

airflow-stop:
	@scripts/airflow-standalone.sh stop

airflow-demo: setup
	scripts/airflow-env.sh airflow db migrate
	scripts/airflow-env.sh airflow dags test dataflow_demo --conf '{"rows": 2000}'

stack: setup
	@$(PY) scripts/stack.py start

stack-stop:
	@$(PY) scripts/stack.py stop

stack-check: setup
	@$(PY) -m tests.stack_check

lock: $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	$(UV) pip compile pyproject.toml --all-extras --python-version $(PYTHON_VERSION) \
		--python-platform x86_64-unknown-linux-gnu -o $(LOCK)
	$(MAKE) $(VENV)/.ready
	$(PY) -m dataflow_core.spark.platform.jars --lock
	$(PY) -m dataflow_core.spark.platform.s3a --lock
	$(UV) pip compile tests/s3-server.in --python-version $(PYTHON_VERSION) \
		--python-platform x86_64-unknown-linux-gnu -o $(S3_SERVER_LOCK)

clean:
	rm -rf warehouse spark-warehouse metastore_db derby.log .pytest_cache .hypothesis build dist
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .cache *.egg-info
