"""A poison batch: a batch that fails on every retry (a user's combiner that raises on one
value; a bad input row no longer can: it is quarantined, tests/integration/
test_input_rules.py); a batch whose recorded versions are gone fails with one line; the operator skips the batch
with `dataflow microbatch --skip-batch` (the CLI's entry point, on this process's session:
what is under test is the command, not a process), the pipeline carries on, the
skipped rows are quarantined with the reason and the ledger balances; results equal the
reference runner's over the input without them, also after a rewrite of their file delivers
them again. Also: a column added to the input reaches the quarantine."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from dataflow_core.cli import main
from dataflow_core.errors import DataflowError, PipelineBusy
from dataflow_core.model.combiners import CountFn
from dataflow_core.model.time import format_instant
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.jobs.reset import reset_pipeline
from dataflow_core.spark.jobs.skip import request_skip
from dataflow_core.spark.platform.tables import read_table, table_path
from tests.integration.test_backfill import (
    DAY0, M, reference_results, results_of, sessions_pipeline, to_rows, write_input,
)
from tests.integration.test_microbatch import in_warehouse

PIPELINE, INPUT = "t_skip", "t_skip_in"
VIEWS = [("u1", "ad1", 1, 60, 5, False), ("u1", "ad1", 1, 120, 5, False), ("u2", "ad2", 1, 300, 5, False),  # batch 0
         ("u1", "ad1", 1, 400, 200, False), ("u3", "ad1", 1, 500, 110, False),  # batch 1, with the poison row
         ("u1", "ad1", 1, 700, 300, False), ("u2", "ad2", 1, 650, 400, False)]  # after the skip
ROWS = to_rows(VIEWS)
FIRST, SKIPPED, LATER = ROWS[:3], ROWS[3:5], ROWS[5:]


def _skip_cli(warehouse: Path, *args: str) -> tuple[int, str]:
    """`dataflow microbatch --pipeline t_skip ARGS` through the CLI's entry point: its exit
    code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["microbatch", "--pipeline", PIPELINE, "--warehouse", str(warehouse), *args])
    return code, out.getvalue()


def _batches(spark, batch: int) -> list[dict]:
    return [r.asDict() for r in read_table(spark, "dataflow_batches").where(
        f"pipeline = '{PIPELINE}' AND batch = {batch}").orderBy("status", "attempt").collect()]


def poison_count() -> CountFn:
    """A user's count that raises on one value: the batch that delivers it fails on every
    retry (fed element by element, so `add_input` sees the value; a local class, so Spark's
    Python workers get it by value)."""

    class PoisonCount(CountFn):
        sql_partial = None

        def add_input(self, acc, value):
            if str(value) == "666":
                raise ValueError("poison row")
            return acc + 1

    return PoisonCount()


def poisoned_pipeline():
    """sessions_pipeline, its first stage counting with `poison_count`."""
    from dataclasses import replace

    from dataflow_core.pipelines.registry import replace_registered

    spec = sessions_pipeline(PIPELINE, INPUT)
    first = replace(spec.stages[0], strategy=replace(spec.stages[0].strategy, combiner=poison_count()))
    return replace_registered(replace(spec, stages=(first, *spec.stages[1:])))


def test_a_poison_batch_is_skipped_by_the_operator_and_the_pipeline_carries_on(spark, tmp_path):
    spec = poisoned_pipeline()
    warehouse = tmp_path / "wh"
    at = lambda minutes: format_instant(DAY0 + minutes * M)  # noqa: E731
    with in_warehouse(spark, warehouse):
        write_input(spark, INPUT, FIRST)
        assert run_microbatch(spark, PIPELINE, now=at(10)).ledger_ok
        poison = ("e99", "u4", "ad2", "666", DAY0 + 450_000, DAY0 + 460_000)
        write_input(spark, INPUT, SKIPPED + [poison], mode="append")
        for _ in range(2):  # every retry fails the same way: the claim pins the batch
            with pytest.raises(Exception, match="poison row"):
                run_microbatch(spark, PIPELINE, now=at(20))
        assert [(r["status"], r["attempt"]) for r in _batches(spark, 1)] == [("started", 0), ("started", 1)]

        # A retry whose recorded versions are gone (vacuumed, log cleaned): one line, the way out.
        batches = table_path(spark, "dataflow_batches")
        gone = json.dumps({f"{PIPELINE}__seen_ids": 999, f"{PIPELINE}_s__state": 998, f"{PIPELINE}_short__state": 997})
        spark.sql(f"UPDATE delta.`{batches}` SET versions = '{gone}' WHERE pipeline = '{PIPELINE}' AND batch = 1")
        with pytest.raises(DataflowError) as gone_error:
            run_microbatch(spark, PIPELINE, now=at(20))
        line = str(gone_error.value)
        assert "\n" not in line and "batch 1 cannot be retried" in line, line
        assert "--skip-batch 1" in line and f"dataflow reset --pipeline {PIPELINE} --abandon-batch 1" in line, line
        with pytest.raises(PipelineBusy, match="--skip-batch 1"):  # a reset waits for the batch, or its skip
            reset_pipeline(spark, PIPELINE)

        with pytest.raises(DataflowError, match="batch 0 is not its latest batch"):
            request_skip(spark, PIPELINE, 0)
        write_input(spark, INPUT, LATER, mode="append")  # arrives before the operator steps in

    code, printed = _skip_cli(warehouse, "--skip-batch", "1", "--reason", "a value that raises", "--now", at(30))
    assert code == 0, printed
    assert "batch 1 skipped by the operator: 3 rows quarantined" in printed, printed

    with in_warehouse(spark, warehouse):
        assert run_microbatch(spark, PIPELINE, now=at(120)).ledger_ok  # a tick: every window closes
        finished = [r for r in _batches(spark, 1) if r["status"] == "finished"]
        ledger = json.loads(finished[0]["ledger"])
        assert (ledger["read"], ledger["quarantined"], ledger["accepted"], ledger["balanced"]) == (3, 3, 0, True)
        assert [r["reason"] for r in _batches(spark, 1) if r["status"] == "skip"] == ["a value that raises"]
        assert "finished" in [r["status"] for r in _batches(spark, 2)], "the later rows ran as batch 2"
        quarantine = read_table(spark, f"{PIPELINE}__quarantine").collect()
        assert sorted(r["event_id"] for r in quarantine) == sorted(r[0] for r in SKIPPED + [poison])
        assert {r["quarantine_reason"] for r in quarantine} == {"batch 1 skipped by operator: a value that raises"}
        assert read_table(spark, f"{PIPELINE}__seen_ids").where("event_id IN ('e3', 'e4', 'e99')").count() == 3
        with pytest.raises(DataflowError, match="batch 3 has finished"):
            request_skip(spark, PIPELINE, 3)  # the tick after the skip
        want = reference_results(spec, FIRST + LATER)
        for stage in spec.stages:
            assert results_of(spark, stage) == want[stage.output], stage.output

        # Skipped stays skipped: the poison row fixed in place is a change commit, which the
        # stream of an input without its change data feed skips (skipChangeCommits).
        spark.sql(f"UPDATE delta.`{table_path(spark, INPUT)}` SET v = '1' WHERE event_id = 'e99'")
        again = run_microbatch(spark, PIPELINE, now=at(130))
        assert again.ledger_ok and again.ledger["accepted"] == 0 and again.ledger["read"] == 0, again.ledger
        for stage in spec.stages:
            assert results_of(spark, stage) == want[stage.output], stage.output


def test_a_column_added_to_the_input_reaches_the_quarantine(spark, tmp_path):
    """Delta lets the input gain a column; a micro-batch's bad rows keep it in the quarantine."""
    from pyspark.sql import functions as F

    spec = sessions_pipeline("t_skip_cols", "t_skip_cols_in")
    with in_warehouse(spark, tmp_path / "wh"):
        write_input(spark, spec.input_table, to_rows([("u1", "ad1", 1, 60, 5, False)]) + [
            ("e9", "u1", "ad1", "not a number", DAY0, DAY0 + 1000)])
        assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 10 * M)).ledger["quarantined"] == 1
        more = spark.createDataFrame(
            [("e10", "u2", "ad1", "nan?", DAY0 + 60_000, DAY0 + 61_000, "ios")],
            "event_id string, user_id string, ad_id string, v string, event_ms bigint, ingest_ms bigint, device string",
        ).select("event_id", "user_id", "ad_id", "v", F.timestamp_millis("event_ms").alias("event_time"),
                 F.timestamp_millis("ingest_ms").alias("ingest_time"), "device")
        more.write.format("delta").mode("append").option("mergeSchema", "true").save(
            table_path(spark, spec.input_table))
        result = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 20 * M))
        assert result.ledger_ok and result.ledger["quarantined"] == 1, result.ledger
        rows = {r["event_id"]: r for r in read_table(spark, f"{spec.name}__quarantine").collect()}
        assert rows["e10"]["device"] == "ios" and rows["e9"]["device"] is None
