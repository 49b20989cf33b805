"""A backfill's or replay's input: the elements of an event-time range, with the bad rows
quarantined and the run's ledger filled in.

One pass over the input makes the elements, with the refused rows of the range beside them
(quarantined from there, not from a second read), and, observed on the way (Spark's
`DataFrame.observe`), counts the rows of the range read and refused.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.rows import (
    REFUSED, EventRange, count_columns, elements, in_range, read_rows, tag_rows,
)
from dataflow_core.spark.sinks.quarantine import quarantine_table, write_quarantine
from dataflow_core.spark.sinks.runs import Ledger, Run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def range_elements(spark, spec: PipelineSpec, read_span: EventRange) -> "DataFrame":
    """The elements of `read_span`, persisted (not yet computed)."""
    return elements(spec, tag_rows(spark, spec, read_rows(spark, spec, read_span))).persist()


def read_range(
    spark, spec: PipelineSpec, span: EventRange, read_span: EventRange, run: Run, ledger: Ledger, say,
) -> tuple["DataFrame", "DataFrame"]:
    """The elements of `read_span` (a widening of `span`), and the persisted DataFrame they
    are read from (to unpersist when done with them). The rows of `span` fill in the ledger
    (read, quarantined, accepted, duplicates), and its bad rows are quarantined."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span))
    seen = Observation(f"dataflow_read_{uuid.uuid4().hex}")  # a name no other query of the session has
    # Every row passes the observation before the elements' shuffle (deduplication by event
    # id), so the first action on them counts all rows, whichever action that is.
    counted = tagged.observe(seen, *count_columns(in_range(spec, span)))
    both = elements(spec, counted, keep_refused=in_range(spec, span)).persist()
    els = both.where(F.col(REFUSED).isNull()).drop(REFUSED)
    unique = els.where((F.col("event_ms") >= span.start) & (F.col("event_ms") < span.end)).count()
    counts = seen.get
    ledger.read, ledger.quarantined = int(counts["read"]), int(counts["bad"])
    ledger.accepted = unique
    ledger.duplicates = ledger.read - ledger.quarantined - unique
    say(f"read {ledger.read:,} rows of {spec.input_table} in the range, {ledger.quarantined:,} quarantined "
        f"(table {quarantine_table(spec)})")
    if ledger.quarantined:
        write_quarantine(spark, spec, both.where(F.col(REFUSED).isNotNull()).select(f"{REFUSED}.*"), run.run_id)
    return els, both
