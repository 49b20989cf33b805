"""A run's commit fence (`delta.checked_commits`, a locked run's `fenced_commits`) is its own:
it checks every commit of that run, those it makes in threads of its own at once included
(`concurrent_writes`), and never another run's commit in the same process."""

from __future__ import annotations

import threading
import time

import pytest

from dataflow_core.spark.platform.concurrent_writes import write_at_once
from dataflow_core.spark.platform.delta import append_rows, checked_commits
from dataflow_core.spark.platform.tables import read_table
from tests.integration.test_microbatch import in_warehouse


class Fenced(Exception):
    pass


def test_a_runs_fence_checks_its_own_commits_and_no_other_threads(spark, tmp_path):
    name = f"t_fence_{time.time_ns() % 10**6}"
    other_done, inside, errors = threading.Event(), threading.Event(), []

    def refuse(table: str) -> None:
        raise Fenced(table)

    def fenced_run() -> None:
        with checked_commits(refuse):
            inside.set()
            other_done.wait(120)  # another run commits while this one's fence stands
            with pytest.raises(Fenced, match=name):
                append_rows(spark, name, spark.range(1))
            with pytest.raises(Fenced, match=name):  # its writes in threads of their own are fenced too
                write_at_once(spark, [lambda s: None, lambda s: append_rows(s, name, s.range(1))])

    def run() -> None:
        try:
            fenced_run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    with in_warehouse(spark, tmp_path / "wh"):
        fenced = threading.Thread(target=run)
        fenced.start()
        assert inside.wait(60)
        try:
            append_rows(spark, name, spark.range(3))  # another run's commit, in this thread: not fenced
        finally:
            other_done.set()
            fenced.join(120)
        assert not errors, errors
        assert read_table(spark, name).count() == 3
