"""`dataflow_batches`: one row per micro-batch attempt and outcome, the pipeline's
sequencer (MillWheel's) in Delta.

Each attempt at batch N claims it with a `started` row under the idempotent key
(`dataflow:<pipeline>:batches:started`, N*ATTEMPTS + attempt), so of two runs claiming the
same attempt exactly one commits; a later attempt supersedes an earlier one, which checks
(`fence`) before each of its commits. A `finished` row records the batch's ledger, the
watermarks after it and what the watermark estimator has learnt (JSON data, not a pickle).
A `skip` row (one per batch, idempotent key `...:batches:skip`, N) is an operator's request
that the unfinished batch N be skipped (`dataflow microbatch --skip-batch`), with the reason.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dataflow_core.errors import DataflowError, PipelineBusy
from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.platform.delta import append_rows
from dataflow_core.spark.platform.tables import read_table, table_exists
from dataflow_core.spark.sinks.runs import Ledger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCHES_TABLE = "dataflow_batches"
BATCHES_SCHEMA = (
    "pipeline string, batch bigint, stream_batch bigint, now_ms bigint, now timestamp, status string, "
    "recorded_at timestamp, versions string, watermarks string, estimator_state string, ledger string, "
    "attempt int, run_token string, stream_id string, holder string, reason string"
)
MICROBATCH = "microbatch"
RESET = "reset"
"""Status of the row `dataflow reset` appends: the pipeline's live history starts afresh
after it. Batch numbers go on from it (never reused), so no idempotent write of a later
batch is mistaken for one of an earlier life of the pipeline."""
SKIP = "skip"
"""Status of an operator's request to skip an unfinished batch; `records` folds it into the
batch's other records (key `skip`: the reason), so it is never a batch's latest record."""
ATTEMPTS = 1000
"""Attempts per batch in the claim's idempotent-write version (N * ATTEMPTS + attempt)."""


@dataclass
class BatchRecord:
    batch: int
    stream_batch: int | None
    now: Instant
    versions: dict[str, int]
    attempt: int = 0
    token: str = ""
    stream_id: str | None = None
    watermarks: dict[str, Instant] = field(default_factory=dict)
    estimator: Any = None  # the watermark estimator after the batch (or its state, as JSON text)
    holder: str = MICROBATCH  # "microbatch", or "backfill <run id>" for a backfill holding the pipeline
    skip: str | None = None  # the operator's reason when this batch is skipped (its rows quarantined)


def checkpoint_path(spark: "SparkSession", pipeline: str) -> str:
    """Where the pipeline's stream checkpoint lives (the stream's half of the sequencer)."""
    from dataflow_core.spark.platform.session import warehouse_root

    return f"{warehouse_root(spark).rstrip('/')}/_dataflow_checkpoints/{pipeline}"


def batch_rows(spark, spec: PipelineSpec) -> "DataFrame | None":
    from pyspark.sql import functions as F

    if not table_exists(spark, BATCHES_TABLE):
        return None
    return read_table(spark, BATCHES_TABLE).where(F.col("pipeline") == spec.name)


def records(spark, spec: PipelineSpec) -> list[dict]:
    """The records of the last two batches (so the last finished one is among them, however
    many attempts the latest took): per batch 'finished' first, then attempts newest first;
    a 'reset' row ends the list (what came before it is another life of the pipeline). A
    skip request is no record of its own: each record of its batch carries its reason
    (`skip`, None when not requested)."""
    from pyspark.sql import functions as F

    batches = batch_rows(spark, spec)
    if batches is None:
        return []
    top = batches.agg(F.max("batch").alias("b")).first()["b"]
    if top is None:
        return []
    attempt = F.col("attempt") if "attempt" in batches.columns else F.lit(0)
    rows = batches.where(F.col("batch") >= F.lit(top - 1)).withColumn("_attempt", F.coalesce(attempt, F.lit(0))).orderBy(
        F.col("batch").desc(), F.col("status").asc(), F.col("_attempt").desc()
    ).collect()
    skips = {r["batch"]: r["reason"] or "" for r in rows if r["status"] == SKIP}
    out = []
    for r in rows:
        if r["status"] == SKIP:
            continue
        out.append({**r.asDict(), "skip": skips.get(r["batch"])})
        if r["status"] == RESET:
            break
    return out


def next_batch(known: list[dict]) -> int:
    """The number the next batch takes after these records (numbers are never reused)."""
    return known[0]["batch"] + 1 if known else 0


def mark_reset(spark, spec: PipelineSpec) -> int:
    """Append the reset row (see RESET); returns its batch number."""
    from pyspark.sql import functions as F

    batches = batch_rows(spark, spec)
    top = None if batches is None else batches.agg(F.max("batch").alias("b")).first()["b"]
    number = 0 if top is None else top + 1
    rec = BatchRecord(number, None, 0, {}, token=RESET, holder=RESET)
    append_record(spark, spec, rec, RESET, None)
    return number


def append_record(spark, spec: PipelineSpec, rec: BatchRecord, status: str, ledger: Ledger | None) -> None:
    row = (
        spec.name, rec.batch, rec.stream_batch, rec.now, dt.datetime.fromtimestamp(rec.now / 1000, dt.timezone.utc),
        status, dt.datetime.now(dt.timezone.utc), json.dumps(rec.versions), json.dumps(rec.watermarks),
        rec.estimator if isinstance(rec.estimator, str) or rec.estimator is None else json.dumps(rec.estimator.to_state()),
        json.dumps(ledger.as_dict()) if ledger else None, rec.attempt, rec.token, rec.stream_id, rec.holder,
        rec.skip,
    )
    version = rec.batch * ATTEMPTS + rec.attempt if status == "started" else rec.batch
    append_rows(spark, BATCHES_TABLE, spark.createDataFrame([row], BATCHES_SCHEMA),
                (f"dataflow:{spec.name}:batches:{status}", version))


def claim(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Claim attempt `rec.attempt` at batch `rec.batch`; refused when another run claimed it
    first (Delta commits at most one row per idempotent key)."""
    from pyspark.sql import functions as F

    failure: Exception | None = None
    try:
        append_record(spark, spec, rec, "started", None)
    except Exception as exc:  # a concurrent claim of the same key fails the loser's commit
        failure = exc
    mine = batch_rows(spark, spec).where(
        (F.col("batch") == rec.batch) & (F.col("status") == "started") & (F.col("attempt") == rec.attempt)
    ).select("run_token").collect()
    if mine and mine[0]["run_token"] != rec.token:
        raise PipelineBusy(
            f"pipeline {spec.name!r} is already running: another run claimed batch {rec.batch} "
            f"(attempt {rec.attempt}) first; this run stopped without writing"
        )
    if not mine:
        raise failure or DataflowError(f"pipeline {spec.name!r}: the claim of batch {rec.batch} did not commit")


def fence(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Stop before a commit if a later attempt took this batch over (this run is a zombie)."""
    from pyspark.sql import functions as F

    latest = batch_rows(spark, spec).where((F.col("batch") == rec.batch) & (F.col("status") == "started")).agg(
        F.max("attempt").alias("a")).first()["a"]
    if latest is not None and latest > rec.attempt:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: another run took over batch {rec.batch} (attempt {latest}) while "
            f"this one (attempt {rec.attempt}) was still going; this run stopped, and what it had "
            "committed is exactly what the other commits"
        )


def committed_stream(spark, spec: PipelineSpec) -> tuple[int | None, str | None, int | None]:
    """The last finished batch that consumed stream input: its stream batch, the stream's
    query id and the batch number."""
    from pyspark.sql import functions as F

    batches = batch_rows(spark, spec)
    if batches is None:
        return None, None, None
    reset = batches.where(F.col("status") == RESET).agg(F.max("batch").alias("b")).first()["b"]
    if reset is not None:
        batches = batches.where(F.col("batch") > reset)
    row = batches.where((F.col("status") == "finished") & F.col("stream_batch").isNotNull()).agg(
        F.max_by("stream_batch", "batch").alias("s"),
        F.max_by("stream_id" if "stream_id" in batches.columns else F.lit(None).cast("string"), "batch").alias("id"),
        F.max("batch").alias("b"),
    ).first()
    return row["s"], row["id"], row["b"]


def holder_of(record: dict) -> str:
    return record.get("holder") or MICROBATCH


def refuse_if_backfill_holds(spec: PipelineSpec, latest: dict | None) -> None:
    """A micro-batch does not start while a backfill holds the pipeline."""
    if latest and latest["status"] == "started" and holder_of(latest) != MICROBATCH:
        raise PipelineBusy(
            f"pipeline {spec.name!r} is held by {holder_of(latest)} (batch {latest['batch']}), which corrects "
            "its live state; this micro-batch stopped without writing and runs once the backfill has finished "
            "(a backfill that failed finishes when run again with the same arguments)"
        )


def hold_for_backfill(spark: "SparkSession", spec: PipelineSpec, run_id: str) -> BatchRecord | None:
    """Take the pipeline's next batch number for backfill `run_id`, so that no micro-batch
    runs until it has finished (None when the pipeline never ran live: nothing to fence).

    Refused (PipelineBusy) while a micro-batch or another backfill holds it; a re-run of the
    same backfill (the same run id, resumed) takes its own hold back. The hold keeps the live
    processing time, watermarks and estimator as the last batch left them."""
    known = records(spark, spec)
    if not any(r["status"] != RESET for r in known):
        return None  # never ran live (or not since a reset)
    holder = f"backfill {run_id}"
    latest = known[0]
    last = next((r for r in known if r["status"] == "finished"), None)
    if latest["status"] == "started":
        if holder_of(latest) != holder:
            what = "a micro-batch" if holder_of(latest) == MICROBATCH else holder_of(latest)
            raise PipelineBusy(
                f"pipeline {spec.name!r}: {what} holds it (batch {latest['batch']} has not finished: running, "
                "or crashed and completed by its next run); this backfill stopped before reading, try again later"
            )
        return _record(latest["batch"], last, holder)
    rec = _record(next_batch(known), last, holder)
    claim(spark, spec, rec)
    return rec


def _record(batch: int, last: dict | None, holder: str) -> BatchRecord:
    """The hold's record for `batch`, with the live clock, watermarks and estimator of the
    last finished batch."""
    return BatchRecord(
        batch=batch, stream_batch=None, now=last["now_ms"] if last else 0, versions={}, attempt=0,
        token=holder, stream_id=None, watermarks=json.loads(last["watermarks"] or "{}") if last else {},
        estimator=last.get("estimator_state") if last else None, holder=holder,
    )


def release_backfill(spark: "SparkSession", spec: PipelineSpec, rec: BatchRecord, ledger: Ledger) -> None:
    """The backfill is done: its batch finishes, leaving the live clock where it was."""
    append_record(spark, spec, rec, "finished", ledger)
