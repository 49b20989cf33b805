"""A backfill's or replay's input: the rows of an event-time range, checked, with the bad
ones quarantined and the run's ledger filled in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.rows import EventRange, count_rows, quarantined, read_rows, tag_rows
from dataflow_core.spark.sinks.quarantine import quarantine_table, write_quarantine
from dataflow_core.spark.sinks.runs import Ledger, Run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def read_range(
    spark, spec: PipelineSpec, span: EventRange, read_span: EventRange, run: Run, ledger: Ledger, say,
) -> "DataFrame":
    """Tagged rows of `read_span`; counts and quarantines those of `span` (the ledger's)."""
    tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span))
    core = tag_rows(spark, spec, read_rows(spark, spec, span))
    counts = count_rows(core)
    ledger.read, ledger.quarantined = counts.read, counts.quarantined
    if counts.quarantined:
        write_quarantine(spark, spec, quarantined(core), run.run_id)
    say(f"read {counts.read:,} rows of {spec.input_table} in the range, {counts.quarantined:,} quarantined "
        f"(table {quarantine_table(spec)})")
    return tagged
