"""A micro-batch's input acceptance: which of the rows the stream delivered become elements.

Bad rows are quarantined with their reasons; a delivery of an event id an earlier batch (or a
backfill) accepted is a duplicate (MillWheel's record-id dedup: ids are remembered in
`<pipeline>__seen_ids` until a delivery would be too late anyway, `seen_ids.horizon`); the
ids the batch accepts are remembered under its idempotent key. An id a backfill counted in
some of its windows only (sliding windows across the backfill's edges, `seen_ids.OWNED`) is
accepted for its other windows, and remembered as counted in all of them.

An input read as its change data feed (`input.changes`) also removes rows: a removal of an id
the seen ids hold is the retraction of the element it was counted as (the first stage's
`takes_input_retractions`; else it is left for a backfill, and counted), and the id is
forgotten, so that a row inserted again with it counts again; a removal of any other row
changes nothing and is counted as never counted. A retry reads the seen ids as of the
batch's start, so it retracts what the first attempt did; a removal delivered again finds
its id forgotten, and retracts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.model.input_rules import ProcessingTime, input_of
from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.changes import is_feed, split_changes
from dataflow_core.spark.input.rows import DUPLICATES, elements, quarantined, read_counts, tag_rows
from dataflow_core.spark.input.fields import explained, selected
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.platform import aggregates
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.concurrent_writes import Writes, begin_writes
from dataflow_core.spark.platform.delta import Txn, read_as_of, settings_unless_configured
from dataflow_core.spark.platform.session import COMPILED_SQL
from dataflow_core.spark.sinks.batch_records import BatchRecord
from dataflow_core.spark.sinks.quarantine import write_quarantine
from dataflow_core.spark.sinks.runs import Ledger
from dataflow_core.spark.sinks.seen_ids import OWNED, counted_spans, overlapping, remember_ids, seen_table

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

EXPIRE_EVERY = 100
"""Every this many batches, the seen-ids write also drops ids past the lateness horizon."""


@dataclass
class Accepted:
    """A batch's elements (None for a tick); the least and greatest event time of the valid
    rows that arrived, duplicates included, which is what the watermark estimator observes
    (rows a backfill counted before the stream delivered them are duplicates, and still tell
    how far event time has come); the writes of its bad rows and seen ids, under way while
    the stages run (they read neither table's new rows); and the caches they and the
    elements are read from, to release once the batch is done."""

    elements: "DataFrame | None"
    arrived: tuple[Instant, Instant] | tuple[()]
    cached: tuple["DataFrame", ...] = ()
    writes: Writes | None = None
    retracted: "DataFrame | None" = None  # counted elements the input's changes take back out
    corrected: tuple[Instant, Instant] | tuple[()] = ()  # least and greatest event time of the counted rows removed

    def release(self, failed: bool = False) -> None:
        """Wait for the writes, then free the caches. After the batch `failed`, a failed
        write is not raised (the batch's own failure is the one to report)."""
        try:
            if self.writes is not None:
                self.writes.wait(failed)
        finally:
            for df in self.cached:
                df.unpersist()


def accept(spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame | None", rec: BatchRecord,
           old_wm: Instant, ledger: Ledger, txn: Callable[[str], Txn]) -> Accepted:
    """The batch's rows selected, tagged and checked: bad rows quarantined, deliveries of
    ids seen before marked as duplicates, the ids it accepts remembered. Fills the ledger's
    input side."""
    from pyspark.sql import functions as F

    if rows is None:
        crash_point("deduplicated")
        return Accepted(None, ())
    changes = split_changes(spec, rows) if is_feed(rows) else None
    tagged = persist_uncompressed(tag_rows(spark, spec, selected(spec, changes.additions if changes else rows),
                                           ProcessingTime(rec.now)))
    candidates = elements(spec, tagged, duplicates_within=F.lit(True))
    seen = read_as_of(spark, seen_table(spec), rec.versions[seen_table(spec)])
    removed = None if changes is None else persist_uncompressed(
        _marked_seen(spec, elements(spec, tag_rows(spark, spec, selected(spec, changes.removals))), seen))
    retractable = removed is not None and spec.stages[0].strategy.takes_input_retractions
    if seen is not None and retractable:  # a counted row taken back out may be added again
        seen = seen.join(removed.where(F.col("_seen")).select("event_id"), "event_id", "left_anti")
    candidates = _marked_seen(spec, candidates, seen)  # marked, not dropped: one pass gives the arrived range
    # Planned (the cache) and run (the job) compiled, in the session of the stream's rows:
    # the seen ids grow with the pipeline's history.
    with settings_unless_configured(candidates.sparkSession, COMPILED_SQL):
        candidates = persist_uncompressed(candidates)
        stats = aggregates.one_job(read_counts(tagged), candidates.agg(
            F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi"), *duplicate_counts()),
            *(() if changes is None else (changes.counts, _removal_counts(removed))))
    count_batch(stats, ledger)
    if changes is not None:
        count_changes(stats, ledger, retractable)
    try:
        refuse_duplicate_share(spec, rec, stats, ledger)
    except DataflowError:
        for df in (candidates, tagged, *([removed] if removed is not None else [])):
            df.unpersist()
        raise
    arrived = (stats["lo"], stats["hi"]) if stats["lo"] is not None else ()
    els = candidates.where(F.col("_seen").isNull()).drop("_seen", DUPLICATES)
    expire_below = old_wm if rec.batch % EXPIRE_EVERY == 0 else None
    retracted = removed.where(F.col("_seen")).drop("_seen", DUPLICATES) if retractable and ledger.retracted else None
    forget = None if retracted is None else retracted.select("event_id").join(els.select("event_id"), "event_id",
                                                                              "left_anti")

    def bad_rows(session: "SparkSession") -> None:
        write_quarantine(session, spec, explained(spec, quarantined(tagged)), f"batch-{rec.batch}", txn("quarantine"),
                         per_delivery=True)
        crash_point("quarantined")

    def seen_ids(session: "SparkSession") -> None:
        remember_ids(session, spec, els, rec.batch, txn(seen_table(spec)), expire_below, unseen=True, forget=forget)
        crash_point("deduplicated")

    if not ledger.quarantined:
        crash_point("quarantined")
    writes = begin_writes(spark, [seen_ids, bad_rows] if ledger.quarantined else [seen_ids])
    corrected = (stats["removed_lo"], stats["removed_hi"]) if changes is not None and stats["removed_lo"] is not None else ()
    cached = (candidates, tagged, *([removed] if removed is not None else []))
    return Accepted(els, arrived, cached, writes, retracted, corrected)


def _marked_seen(spec: PipelineSpec, candidates: "DataFrame", seen: "DataFrame | None") -> "DataFrame":
    """Elements with `_seen`: true for an event id counted before (in every window of it)."""
    from pyspark.sql import functions as F

    if seen is None:
        return candidates.withColumn("_seen", F.lit(None).cast("boolean"))
    spans = overlapping(spec) and OWNED[0] in seen.columns  # some ids counted in some windows only
    everywhere = seen.where(F.col(OWNED[0]).isNull()) if spans else seen
    candidates = candidates.join(everywhere.select("event_id", F.lit(True).alias("_seen")), "event_id", "left")
    return counted_spans(spec, candidates, seen) if spans else candidates


def _removal_counts(removed: "DataFrame") -> "DataFrame":
    """One row over a batch's first removals as elements (`_seen`: counted before): how
    many were counted, and the least and greatest event time of those."""
    from pyspark.sql import functions as F

    counted = F.col("_seen").isNotNull()
    return removed.agg(F.count_if(counted).alias("removed_counted"),
                       F.min(F.when(counted, F.col("event_ms"))).alias("removed_lo"),
                       F.max(F.when(counted, F.col("event_ms"))).alias("removed_hi"))


def count_changes(stats: Any, ledger: Ledger, retractable: bool) -> None:
    """The ledger's change side (`input.changes`): inserts, deletes and updates; a removal of a
    counted row is retracted when the first stage `takes_input_retractions`, else left for a
    backfill; every other removal (of a row quarantined, a duplicate, withdrawn within the
    batch, or never in the input the pipeline counted) was never counted."""
    ledger.inserts, ledger.deletes, ledger.updates = int(stats["inserts"]), int(stats["deletes"]), int(stats["updates"])
    ledger.withdrawn = int(stats["withdrawn"])
    counted = int(stats["removed_counted"])
    ledger.deletes_never_counted = ledger.deletes + ledger.updates - counted
    if retractable:
        ledger.retracted = counted
    else:
        ledger.left_for_backfill = counted


def refuse_duplicate_share(spec: PipelineSpec, rec: BatchRecord, stats: Any, ledger: Ledger) -> None:
    """The pipeline's duplicate-share rule (`model.input_rules.DuplicateShare`, the input
    gate's), on the batch's own rows: before anything of the batch is written, so a refused
    batch commits nothing and its retry gets the same rows. Deliveries of ids an earlier
    batch counted are left out: a rewrite of input files delivers its rows again, and those
    are duplicates by design; constant or empty ids repeat within the batch."""
    rule = input_of(spec).duplicate_share
    rows, within = ledger.read - ledger.quarantined, int(stats["lost"] or 0)
    if not rule.broken(rows, within):
        return
    raise DataflowError(
        f"pipeline {spec.name!r}: batch {rec.batch} refused: {within:,} of its {rows:,} rows "
        f"({rule.share(rows, within):.1%}) repeat the event id ({spec.event_id}) of another row of the batch, over "
        f"the pipeline's max_duplicate_share {rule.limit:.1%} (constant or empty ids?); nothing of the batch was "
        f"committed. Fix the pipeline's event_id and run again, accept the batch as it is with `dataflow "
        f"microbatch --pipeline {spec.name} --max-duplicate-share 1`, or quarantine its rows with `--skip-batch "
        f"{rec.batch} --reason ...`"
    )


def duplicate_counts() -> list["Column"]:
    """Aggregates over a batch's candidates (`rows.elements` with `DUPLICATES`, `_seen` true for
    an id counted before): `new`, the events accepted; `lost`, deliveries that lost the
    batch's own dedup; `seen`, events counted by an earlier batch or backfill."""
    from pyspark.sql import functions as F

    return [F.count_if(F.col("_seen").isNull()).alias("new"), F.sum(DUPLICATES).alias("lost"),
            F.count_if(F.col("_seen").isNotNull()).alias("seen")]


def count_batch(stats: Any, ledger: Ledger) -> None:
    """The ledger's input side from one row of counts (`rows.read_counts` and
    `duplicate_counts`): duplicates are counted (deliveries the dedup dropped, and events seen
    before), never derived from the other counts, so `Ledger.balanced` fails when they disagree."""
    ledger.read, ledger.quarantined = int(stats["read"]), int(stats["bad"])
    ledger.accepted = int(stats["new"])
    ledger.duplicates = int(stats["lost"] or 0) + int(stats["seen"])
