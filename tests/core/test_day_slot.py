"""Days at once: the backfill DAG's per-run counting semaphore (`airflow.tasks.day_slot`),
which caps how many days of one run hold Spark at the same time on this machine. Lock files
held by flock: two opens in one process are two holders, as two task processes are."""

from __future__ import annotations

import threading

import pytest

from dataflow_core.airflow.tasks import NoSlot, day_slot


@pytest.fixture(autouse=True)
def _slots_here(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))


def test_a_day_beyond_the_slots_is_refused_at_once_and_gets_a_slot_once_one_frees():
    with day_slot("run-a", 2) as first, day_slot("run-a", 2) as second:
        assert {first, second} == {0, 1}
        with pytest.raises(NoSlot, match=r"2 day\(s\) of this run are already running \(days at once = 2\)"):
            with day_slot("run-a", 2, wait=False):
                pass
        with day_slot("run-b", 2):  # another run's days have slots of their own
            pass
    with day_slot("run-a", 2, wait=False) as again:
        assert again == 0


def test_a_waiting_day_starts_when_the_running_one_ends_and_not_before():
    said: list[str] = []
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def first_day() -> None:
        with day_slot("run-w", 1):
            holding.set()
            release.wait(10)
            order.append("first ends")

    worker = threading.Thread(target=first_day)
    worker.start()
    assert holding.wait(10)
    threading.Timer(0.3, release.set).start()
    with day_slot("run-w", 1, say=said.append, poll_s=0.05) as slot:
        order.append("second starts")
    worker.join(10)
    assert slot == 0 and order == ["first ends", "second starts"]
    assert said == ["waiting: 1 day(s) of this run are already running (days at once = 1)", "got slot 1 of 1"]
