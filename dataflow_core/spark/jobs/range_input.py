"""A backfill's or replay's input: the elements of an event-time range, with the bad rows
quarantined and the run's ledger filled in.

One pass over the input makes the elements, with the refused rows of the range beside them
(quarantined from there, not from a second read) and, on each element, how many deliveries
of its event the range holds: the ledger's counts, without a pass of their own. The bad rows
are written while the run goes on with its windows (`platform.concurrent_writes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.model.input_rules import ProcessingTime
from dataflow_core.model.windows import WindowFn
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.fields import explained
from dataflow_core.spark.input.rows import (
    DELIVERIES, DUPLICATES, REFUSED, EventRange, elements, in_range, read_rows, tag_rows,
)
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.concurrent_writes import Writes, begin_writes
from dataflow_core.spark.sinks.quarantine import quarantine_table, write_quarantine
from dataflow_core.spark.sinks.runs import Ledger, Run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def range_elements(spark, spec: PipelineSpec, read_span: EventRange, version: int | None = None,
                   span: EventRange | None = None, at: ProcessingTime | None = None) -> "DataFrame":
    """The elements of `read_span` (in the input as of `version`, else its latest; rows
    future-dated at processing time `at` refused), persisted (not yet computed). With `span`,
    each has `DUPLICATES`: its deliveries in `span` that lost the dedup (`rows.elements`)."""
    counted = None if span is None else in_range(spec, span)
    tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span, version), at)
    return persist_uncompressed(elements(spec, tagged, duplicates_within=counted))


@dataclass
class RangeRead:
    """A range's elements; the persisted DataFrame they are read from (to unpersist when
    done with them, after `writes`); and the write of its bad rows, under way (None when
    there is none)."""

    elements: "DataFrame"
    cached: "DataFrame"
    writes: Writes | None = None

    def wait(self, failed: bool = False) -> None:
        """The bad rows written (`Writes.wait`)."""
        if self.writes is not None:
            self.writes.wait(failed)


def read_range(
    spark, spec: PipelineSpec, span: EventRange, read_span: EventRange, run: Run, ledger: Ledger, say,
    version: int | None = None, quarantine: bool = True,
) -> RangeRead:
    """The elements of `read_span` (a widening of `span`; in the input as of `version`, else
    its latest; rows future-dated at the run's processing time refused). The rows of `span` fill in the ledger (read, quarantined, accepted,
    duplicates), and its bad rows are quarantined (unless `quarantine` is false: a plan
    writes nothing but itself), in the background: the caller waits for that write
    (`RangeRead.wait`) before it unpersists the cache."""
    from pyspark.sql import functions as F

    tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span, version), ProcessingTime(run.now))
    both = persist_uncompressed(elements(spec, tagged, within=in_range(spec, span)))
    element = F.col(REFUSED).isNull()
    count_range(both, span, ledger)  # the job that computes `both`
    say(f"read {ledger.read:,} rows of {spec.input_table} in the range, {ledger.quarantined:,} quarantined "
        f"(table {quarantine_table(spec)})")
    writes = None
    if ledger.quarantined and quarantine:
        bad = both.where(~element).select(f"{REFUSED}.*")
        writes = begin_writes(spark, [lambda session: write_quarantine(session, spec, explained(spec, bad), run.run_id)])
    return RangeRead(both.where(element).drop(REFUSED, DELIVERIES, DUPLICATES), both, writes)


def count_range(both: "DataFrame", span: EventRange, ledger: Ledger) -> None:
    """The ledger's input side from `both` (`rows.elements` with `within` the range: elements
    with `DELIVERIES` and `DUPLICATES`, refused rows in `REFUSED`), in one aggregation: rows
    read (each delivery in the range, counted per event before the dedup), quarantined, accepted
    (events of the range) and duplicates (deliveries that lost the dedup, counted by the dedup
    itself). Each is counted, none derived, so `Ledger.balanced` fails when they disagree."""
    from pyspark.sql import functions as F

    element = F.col(REFUSED).isNull()
    counts = both.agg(
        F.sum(F.col(DELIVERIES)).alias("good"), F.count_if(~element).alias("bad"),
        F.count_if(element & (F.col("event_ms") >= span.start) & (F.col("event_ms") < span.end)).alias("unique"),
        F.sum(F.when(element, F.col(DUPLICATES))).alias("lost"),
    ).first()
    ledger.quarantined, ledger.accepted = int(counts["bad"]), int(counts["unique"])
    ledger.read = int(counts["good"] or 0) + ledger.quarantined
    ledger.duplicates = int(counts["lost"] or 0)


def read_margins(wfn: WindowFn) -> tuple[int, int]:
    """How far before and after the range to read so its windows are complete, from how far
    a window reaches (`WindowFn.reach`): a window starting in the range ends within its
    reach after the range; merged windows may reach either way, so the read starts wider and
    is widened while one reaches its edge."""
    reach = wfn.reach or 0
    return (4 * reach, 4 * reach) if wfn.is_merging else (0, reach)
