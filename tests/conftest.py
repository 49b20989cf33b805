"""Shared fixtures: one Spark session per pytest process, started only if a test asks for it.

Pure tests (tests/core, tests/conformance) never request `spark`, so they never start a JVM.

`make test` runs everything on two pytest-xdist workers (`PYTEST_WORKERS=N` for N; 0 runs
them in this process), each a process with its own Spark session: no test may rely on
another having run. Tests that start processes of their own (Spark or Airflow commands, a standalone cluster, a
browser, runs killed on purpose) are marked `slow`:
`.venv/bin/python -m pytest -m "not slow" tests/` is the quick loop while developing, and
`-m "not integration"` runs only the pure model tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

from tests import jvm_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_shared: dict[str, object] = {}  # the running test session and its warehouse, once started

# Spark tuned for tiny data (tests/spark-conf/spark-defaults.conf), the driver's JVM on the
# quick JIT and on the suite's class archive when `make test` built one (tests/jvm_archive.py
# says why and how): in this process and in every process a test starts, which inherit the
# environment. A developer's own settings win.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", jvm_archive.SUBMIT_ARGS)
os.environ.setdefault("DATAFLOW_SPARK_JAVA_OPTS", jvm_archive.java_options())


# Test files, or single tests, that start processes of their own (see the module docstring),
# longest first (seconds on a quiet 2-core machine, serially): under `make test`'s workers
# (`pytest_xdist_make_scheduler` below) each worker takes the next test when it is
# free, so the long waits for processes spread over the workers from the start instead of
# trailing on one.
SLOW = (
    "tests/integration/test_browser.py::",  # ~430 s + the approval test's two runs: Airflow standalone, backfills from its form
    "tests/integration/test_dags_dataflow.py::",  # ~150 s: seven `airflow dags test` in one Airflow process, and test_dags.py's three
    "tests/integration/test_backfill_live_processes.py::",  # ~90 s: backfills killed, then one paused
    "tests/integration/test_microbatch_faults.py::",  # ~120 s: one run SIGKILLed, two runs at once
    "tests/integration/test_spark_standalone.py::",  # ~145 s: a standalone master and workers
    "tests/integration/test_s3_microbatch.py::",  # ~150 s: set-up driver, a killed micro-batch, two at once on S3
    "tests/integration/test_s3_warehouse.py::test_two_drivers_appending_to_one_table_lose_no_commit_on_s3_and_on_a_local_folder",  # ~150 s: two drivers on S3, then a local folder
    "tests/integration/test_s3_warehouse.py::",  # ~80 s: a backfill on S3 and on a folder in one driver process
    "tests/integration/test_backfill_locks.py::test_overlapping_backfills_and_a_first_micro_batch_at_once_have_one_writer",  # ~90 s: four backfill processes
    "tests/integration/test_dags.py::",  # ~60 s alone; on test_dags_dataflow.py's worker (SAME_WORKER_AS), a few seconds
    "tests/integration/test_plugin_access.py::",  # ~40 s: the plugin app behind Airflow's auth manager, a server process
    "tests/integration/test_wheel.py::",  # the wheel built, installed in a fresh venv: a Spark driver, Airflow's CLI
    "tests/integration/test_generate.py::test_generate_console_script_end_to_end",
    "tests/conformance/test_spark_runner.py::test_cli_replay_on_spark",
)


# Tests in the worker's own process (no `slow` mark) that take 30 s or more, longest first:
# under `make test`'s workers they go right after the SLOW ones, so the end of the run is
# short tests on both workers, not one worker finishing a long test while the other idles.
LONG = (
    "tests/integration/test_pipeline_properties.py::",  # three pipelines of five stages: batch, replay, live
    "tests/integration/test_backfill_locks.py::test_crash_and_change_law",  # ~75 s
    "tests/integration/test_input_changes_live.py::",  # ~200 s: two stages live over a change feed, batch by batch
    "tests/integration/test_microbatch.py::",  # tests of 30-50 s each
    "tests/integration/test_backfill_live.py::",
    "tests/integration/test_backfill_plans.py::",
    "tests/integration/test_backfill_locks.py::",
)


# Modules whose module-scoped setup (an Airflow home or Airflow standalone, a standalone
# Spark cluster, a sample warehouse) is worth making once: under `make test`'s workers all
# their tests go to one worker.
ONE_WORKER = tuple(f"tests/integration/test_{name}.py" for name in (
    "browser", "cli_sql", "dags", "dags_dataflow", "spark_standalone", "expectations",
))
# ONE_WORKER modules that go to the worker of another, sharing what it made once per
# process: test_dags.py's demo DAG runs are made in test_dags_dataflow.py's Airflow process,
# which starts Airflow and Spark once for both (test_dags.DEMO_RUNS), and one `airflow db
# migrate` serves both modules' homes (test_dags.migrated_home).
SAME_WORKER_AS = {"tests/integration/test_dags.py": "tests/integration/test_dags_dataflow.py"}


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scope scheduling, a scope being one test, or a whole ONE_WORKER module;
    with `--no-loadscope-reorder` scopes go out in collection order (see
    `pytest_collection_modifyitems`). (xdist's own `--dist loadgroup` marks no test under
    pytest 9, whose node ids it can no longer rename.)"""
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SAME_WORKER_AS.get(module, module) if module in ONE_WORKER else nodeid

    return OneWorkerModules(config, log)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: starts real components (Spark, Delta, Airflow, Great Expectations)"
    )
    config.addinivalue_line(
        "markers", "slow: starts processes of its own; `-m 'not slow'` leaves these out (make test runs all)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the SLOW tests. Under `make test`'s workers, order them: SLOW tests longest
    first, then the LONG ones, then the other integration tests, then the pure ones, so that the long waits for
    processes start first, one per worker, and the many short tests fill in around them."""
    rank = {item.nodeid: next((i for i, p in enumerate(SLOW) if item.nodeid.startswith(p)), None) for item in items}
    for item in items:
        if rank[item.nodeid] is not None:
            item.add_marker(pytest.mark.slow)

    def part(item: pytest.Item) -> tuple[int, int]:
        if rank[item.nodeid] is not None:
            return 0, rank[item.nodeid]
        long = next((i for i, p in enumerate(LONG) if item.nodeid.startswith(p)), None)
        if long is not None:
            return 1, long
        return (2 if item.nodeid.startswith("tests/integration/") else 3), 0

    if os.environ.get("PYTEST_XDIST_WORKER"):  # one process runs them in the order written
        items.sort(key=part)  # stable: the order within each part is kept


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warehouse root of the shared `spark` session (a fresh temporary folder)."""
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(warehouse: Path) -> Iterator["SparkSession"]:
    """A local[2] SparkSession with Delta, writing tables under `warehouse`."""
    from dataflow_core.spark.platform.session import get_spark

    # This JVM lives as long as the worker: the optimizing JIT too (tests/jvm_archive.py says
    # why); the processes tests start keep the quick one.
    flags = os.environ["DATAFLOW_SPARK_JAVA_OPTS"]
    os.environ.update(jvm_archive.for_long_lived_jvm())
    try:
        session = get_spark(app_name="dataflow-tests", master="local[2]", warehouse=str(warehouse))
    finally:
        os.environ["DATAFLOW_SPARK_JAVA_OPTS"] = flags
    _shared.update(session=session, warehouse=str(warehouse))
    yield session
    _shared.clear()
    session.stop()


@pytest.fixture(autouse=True)
def _restore_warehouse() -> Iterator[None]:
    """Code under test may point the shared session at another warehouse; undo that.

    Does nothing (and imports nothing) unless the shared session is running.
    """
    yield
    if _shared:
        from dataflow_core.spark.platform.session import WAREHOUSE_CONF

        _shared["session"].conf.set(WAREHOUSE_CONF, _shared["warehouse"])  # type: ignore[attr-defined]
