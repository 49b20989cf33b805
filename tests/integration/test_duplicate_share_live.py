"""A micro-batch checks the duplicate-share rule of its pipeline (the input gate's, one
declaration: `max_duplicate_share`), on its own rows: constant event ids fail the batch with
one line instead of counting one event and calling the rest duplicates, nothing of the batch
is committed, and a run that accepts the batch explicitly goes on from there."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import register
from dataflow_core.quality.input_gate import input_rules
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import table_exists, write_table
from dataflow_core.spark.sinks.batches import records
from dataflow_core.spark.sinks.seen_ids import seen_table
from dataflow_core.pipelines.layout import panes
from tests.integration.test_definitions import DAY0, H, orders_pipeline

ROWS = 20  # the least a batch the rule judges (`DuplicateShare.min_rows`)


def test_constant_event_ids_fail_the_micro_batch_loudly_and_an_explicit_override_accepts_it(spark):
    spec = register(replace(orders_pipeline("t_dupshare", H), max_duplicate_share=0.3))
    gate = next(r for r in input_rules(spec).rules if r.kwargs.get("column") == "dataflow_event_id")
    assert gate.kwargs["min_value"] == pytest.approx(0.7), "the input gate reads the pipeline's threshold"
    rows = [("same", "s1", 10 + m, DAY0 + dt.timedelta(minutes=m), DAY0 + dt.timedelta(minutes=m, seconds=5))
            for m in range(ROWS)]
    write_table(spark, spark.createDataFrame(rows, "order_no string, shop string, amount bigint, placed_at timestamp, "
                                                   "arrived_at timestamp"), spec.input_table, mode="append")
    now = (DAY0 + dt.timedelta(hours=3)).isoformat()

    with pytest.raises(DataflowError) as refused:
        run_microbatch(spark, spec.name, now=now)
    line = str(refused.value)
    assert "\n" not in line
    batch = int(re.search(r"batch (\d+) refused", line).group(1))
    assert f"pipeline {spec.name!r}" in line and "19 of its 20 rows (95.0%)" in line
    assert "max_duplicate_share 30.0%" in line and "nothing of the batch was committed" in line
    assert "--max-duplicate-share 1" in line and f"--skip-batch {batch}" in line
    assert not table_exists(spark, seen_table(spec)) and not table_exists(spark, panes(spec.stages[0]))
    assert records(spark, spec)[0].status == "started", "the batch stays unfinished: its retry gets its rows"

    with pytest.raises(DataflowError, match=f"batch {batch} refused"):  # a plain retry is refused again
        run_microbatch(spark, spec.name, now=now)
    result = run_microbatch(spark, spec.name, now=now, max_duplicate_share=1)
    assert result.ledger_ok
    assert (result.ledger["read"], result.ledger["accepted"], result.ledger["duplicates"]) == (ROWS, 1, ROWS - 1)
    assert records(spark, spec)[0].status == "finished" and records(spark, spec)[0].batch == batch
