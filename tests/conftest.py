"""Shared fixtures: one Spark session per pytest run, started only if a test asks for it.

Pure tests (tests/core, tests/conformance) never request `spark`, so they never start a JVM.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_shared: dict[str, object] = {}  # the running test session and its warehouse, once started


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: starts real components (Spark, Delta, Airflow, Great Expectations)"
    )


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warehouse root of the shared `spark` session (a fresh temporary folder)."""
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def spark(warehouse: Path) -> Iterator["SparkSession"]:
    """A local[2] SparkSession with Delta, writing tables under `warehouse`."""
    from dataflow_core.spark.platform.session import get_spark

    session = get_spark(app_name="dataflow-tests", master="local[2]", warehouse=str(warehouse))
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
