"""`dataflow microbatch --skip-batch N`: the way past a batch that fails deterministically.

A batch's claim pins its offsets, processing time and state versions, so a batch that fails
for a reason in its data (an expression that raises on one row, a key too hot for a worker)
fails the same way on every retry, and backfills refuse while it is unfinished. The
operator records a skip request for it (`request_skip`, a `skip` row in `dataflow_batches`
under the batch's idempotent key); the next attempt at the batch (`skip_batch`, called by
the micro-batch in place of its processing) then quarantines every row of the batch with the
operator's reason, writes nothing else, carries the watermarks and the estimator over from
the last finished batch unchanged, and finishes the batch with a ledger where read =
quarantined. Each of its writes is idempotent per batch, so a skip interrupted anywhere is
finished by the next run like any batch.

Only a batch that wrote none of its stages' output can be skipped whole: the failed attempts
may have quarantined rows and remembered ids (the skip remembers the ids of all its rows: a
file rewritten later delivers them again as duplicates, never counted), but a batch that committed a stage's panes or state before failing has half
happened: `dataflow reset --abandon-batch N` starts the live runs afresh past it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import PipelineSpec, get
from dataflow_core.spark.input.changes import is_feed, split_changes
from dataflow_core.spark.input.rows import REASON
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.delta import Txn
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from dataflow_core.spark.sinks.batch_records import MICROBATCH, RESET, SKIP, BatchRecord, LoggedBatch
from dataflow_core.spark.sinks.batches import append_record, records
from dataflow_core.spark.sinks.live_state import state_table
from dataflow_core.spark.sinks.panes import panes_table
from dataflow_core.spark.sinks.quarantine import quarantine_table, write_quarantine
from dataflow_core.spark.sinks.runs import Ledger
from dataflow_core.spark.sinks.seen_ids import remember_ids, seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MAINTENANCE = ("OPTIMIZE", "VACUUM START", "VACUUM END")
"""Commits to a state table that are not a batch's writes (the maintenance DAG's)."""


def request_skip(spark: "SparkSession", pipeline: str, batch: int, reason: str = "") -> str:
    """Record that the pipeline's unfinished latest batch `batch` is to be skipped; refused
    (one line) for any other batch. Returns what was done, for the operator."""
    spec = get(pipeline)
    known = records(spark, spec)
    latest = known[0] if known else None
    if latest is None or latest.status == RESET:
        raise DataflowError(f"pipeline {spec.name!r} has no batch {batch} to skip: no micro-batch ran since it started "
                            "(or since its reset)")
    if latest.batch != batch:
        raise DataflowError(
            f"pipeline {spec.name!r}: batch {batch} is not its latest batch (that is batch {latest.batch}, "
            f"{latest.status}); only the latest batch, while it has not finished, can be skipped"
        )
    if latest.status != "started":
        raise DataflowError(f"pipeline {spec.name!r}: batch {batch} has {latest.status}; there is nothing to skip")
    if latest.holder != MICROBATCH:
        raise DataflowError(
            f"pipeline {spec.name!r}: batch {batch} is the lock of {latest.holder}, not a micro-batch; "
            "finish the backfill by running it again with the same arguments, or undo it: "
            f"`dataflow backfill --pipeline {spec.name} --abandon {latest.holder.split(' ', 1)[-1]}`"
        )
    if latest.skip is not None:
        return f"pipeline {spec.name}: batch {batch} is already to be skipped ({_reason(batch, latest.skip)})"
    refuse_if_partly_written(spark, spec, batch, latest.versions)
    rec = BatchRecord(batch, latest.stream_batch, latest.now_ms, dict(latest.versions), attempt=latest.attempt,
                      token=SKIP, stream_id=latest.stream_id, skip=reason)
    append_record(spark, spec, rec, SKIP, None)
    what = "its rows" if latest.stream_batch is not None else "nothing (a tick batch)"
    return (f"pipeline {spec.name}: batch {batch} is to be skipped: the next run quarantines {what} in "
            f"{quarantine_table(spec)} ({_reason(batch, reason)}) and goes on with the batches after it")


def refuse_if_partly_written(spark: "SparkSession", spec: PipelineSpec, batch: int, versions: dict[str, int]) -> None:
    """A batch that committed a stage's panes or state cannot be skipped whole."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    for stage in spec.stages:
        panes, state = panes_table(stage), state_table(stage)
        written = None
        if table_exists(spark, panes) and read_table(spark, panes).where(
                F.col("run_id") == F.lit(f"batch-{batch}")).limit(1).count():
            written = panes
        elif table_exists(spark, state) and DeltaTable.forPath(spark, table_path(spark, state)).history().where(
                (F.col("version") > F.lit(versions.get(state, -1))) & ~F.col("operation").isin(*MAINTENANCE)
        ).limit(1).count():
            written = state
        if written:
            raise DataflowError(
                f"pipeline {spec.name!r}: batch {batch} already wrote {written} before it failed, so it cannot be "
                f"skipped whole; start the live runs afresh (`dataflow reset --pipeline {spec.name} --abandon-batch "
                f"{batch}`) and backfill"
            )


def skip_batch(
    spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame | None", rec: BatchRecord, prev: LoggedBatch | None,
    txn: Callable[[str], Txn], say: Callable[[str], None],
) -> Ledger:
    """Attempt `rec` at a batch the operator skips (see the module docstring): its rows go
    to the quarantine with the reason and their ids join the seen ids (so no redelivery counts
    them), the watermarks and estimator stay those of `prev`. Returns the batch's ledger."""
    from pyspark.sql import functions as F

    refuse_if_partly_written(spark, spec, rec.batch, rec.versions)
    ledger = Ledger()
    reason = _reason(rec.batch, rec.skip or "")
    if rows is not None:
        if is_feed(rows):  # its additions only: the operator skips what the batch would count
            rows = split_changes(spec, rows).additions
        if spec.where:
            rows = rows.where(F.expr(spec.where))
        bad = persist_uncompressed(rows.withColumn(REASON, F.lit(reason)))
        ledger.read = ledger.quarantined = bad.count()
        if ledger.read:
            write_quarantine(spark, spec, bad, f"batch-{rec.batch}", txn("quarantine-skip"))
            # Skipped stays skipped: a rewrite of a file holding these rows delivers them again,
            # and they are duplicates then (the ids a failed attempt remembered stay too).
            ids = bad.select(F.expr(spec.event_id).cast("string").alias("event_id"),
                             F.unix_millis(F.expr(spec.event_time)).alias("event_ms")).where("event_id IS NOT NULL")
            remember_ids(spark, spec, ids, rec.batch, txn(f"{seen_table(spec)}-skip"))
        bad.unpersist()
    rec.watermarks = dict(prev.watermarks) if prev else {}
    rec.estimator = prev.estimator_state if prev else None
    say(f"batch {rec.batch} skipped by the operator: {ledger.read:,} rows quarantined in {quarantine_table(spec)} "
        "(nothing else written; watermarks as after the last finished batch)")
    return ledger


def _reason(batch: int, reason: str) -> str:
    return f"batch {batch} skipped by operator" + (f": {reason}" if reason else "")
