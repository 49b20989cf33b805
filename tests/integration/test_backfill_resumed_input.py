"""A backfill's success means its range reflects the input as the command found it: a run
that resumes an older run (stopped after it planned) finishes that run at the input version
pinned when it began, and then, since a view was appended to the range after the stop,
corrects the range again in the same command and says so."""

from __future__ import annotations

import pytest

from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.platform.tables import read_table
from tests.integration.test_backfill import DAY0, M, billing_pipeline, ms, write_input

RANGE = ("2024-05-01", "2024-05-02")


def _sums(spark, stage) -> dict:
    return {(r["ad_id"], ms(r["window_start"])): r["value"] for r in read_table(spark, stage.output).collect()}


def test_a_resumed_backfill_corrects_again_for_input_appended_after_its_pin(spark, crash):
    spec = billing_pipeline("t_resume_input", "t_resume_input_in")
    stage = spec.stages[0]
    t = DAY0 + 3 * M
    write_input(spark, spec.input_table, [("a", "u1", "ad1", "5", t, t + 1000)])
    run_backfill(spark, spec.name, *RANGE, now="2024-05-01T12:00:00Z")
    write_input(spark, spec.input_table, [("b", "u2", "ad1", "7", t, t + 600 * M)], mode="append")
    crash(f"{stage.output}-planned")
    with pytest.raises(SimulatedCrash):
        run_backfill(spark, spec.name, *RANGE, now="2024-05-01T13:00:00Z")
    crash(None)
    write_input(spark, spec.input_table, [("c", "u3", "ad1", "3", t, t + 700 * M)], mode="append")  # after the pin

    said: list[str] = []
    result = run_backfill(spark, spec.name, *RANGE, now="2024-05-01T13:00:00Z", progress=said.append)
    assert result.ledger_ok
    assert _sums(spark, stage) == {("ad1", DAY0): 15}, "the view appended after the pin is counted"
    again = [line for line in said if "correcting the range again" in line]
    assert len(again) == 1 and f"input table {spec.input_table} changed 1 row(s)" in again[0], said

    said.clear()
    run_backfill(spark, spec.name, *RANGE, now="2024-05-01T14:00:00Z", progress=said.append)
    assert not [line for line in said if "correcting the range again" in line], "a run that resumed nothing says nothing"
    assert _sums(spark, stage) == {("ad1", DAY0): 15}
