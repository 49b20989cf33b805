"""A worker whose clock runs ahead records a batch in the future; a correctly clocked worker
then carries on at that processing time (it never moves back) and says why, instead of
failing every batch until the clock catches up."""

from __future__ import annotations

import datetime as dt
import time

from dataflow_core.model.time import format_instant
from dataflow_core.pipelines import get, register
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.sinks.batches import records
from tests.integration.test_definitions import orders_pipeline, write_orders

H = 3_600_000


def test_a_batch_after_one_recorded_ahead_of_this_clock_runs_at_that_time(spark):
    spec = register(orders_pipeline("t_clock_ahead", H))
    now = int(time.time() * 1000)
    start = dt.datetime.fromtimestamp(now / 1000, dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    write_orders(spark, spec.input_table, [1], day=start)
    ahead = now + 4 * 60_000  # what a worker whose clock is 4 minutes ahead records
    assert run_microbatch(spark, spec.name, now=format_instant(ahead)).ledger_ok

    write_orders(spark, spec.input_table, [2], day=start)
    said: list[str] = []
    result = run_microbatch(spark, spec.name, progress=said.append)
    assert result.ledger_ok and result.ledger["read"] == 1, result.ledger
    assert any("ahead of this machine's clock" in line for line in said), said
    finished = [r for r in records(spark, get(spec.name)) if r.status == "finished"]
    assert finished[0].now_ms == ahead, "processing time never moves back"
