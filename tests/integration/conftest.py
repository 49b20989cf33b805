"""Everything under tests/integration starts real components: mark it `integration`.

`crash` interrupts a run between two commits inside the test process (the crash switch in
raise mode), so that no extra JVM is started; the SIGKILL tests (test_microbatch_faults.py,
test_backfill_live_processes.py) cover real process deaths."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from dataflow_core.spark.jobs.crash import CRASH_ENV, RAISE_ENV

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def crash(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], None]]:
    """crash(point): the next run stops dead right after that commit point, raising
    `SimulatedCrash`; crash(None): runs go to the end again."""
    monkeypatch.setenv(RAISE_ENV, "1")

    def at(point: str | None) -> None:
        if point is None:
            monkeypatch.delenv(CRASH_ENV, raising=False)
        else:
            monkeypatch.setenv(CRASH_ENV, point)

    yield at
    monkeypatch.delenv(CRASH_ENV, raising=False)
