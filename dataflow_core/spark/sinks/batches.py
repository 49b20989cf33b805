"""`dataflow_batches`: one row per micro-batch attempt and outcome, the pipeline's
sequencer (MillWheel's) in Delta.

Each attempt at batch N claims it with a `started` row under the idempotent key
(`dataflow:<pipeline>:batches:started`, N*ATTEMPTS + attempt), so of two runs claiming the
same attempt exactly one commits; a later attempt supersedes an earlier one, which checks
(`fence`) before each of its commits. A `finished` row records the batch's ledger, the
watermarks after it and what the watermark estimator has learnt (JSON data, not a pickle).
A `skip` row (one per batch, idempotent key `...:batches:skip`, N) is an operator's request
that the unfinished batch N be skipped (`dataflow microbatch --skip-batch`), with the reason.

The table is a few rows per batch, written and read on the driver through delta-rs
(`platform.driver_delta`): a claim or a record is one commit of some 10-20 ms, not a Spark
write plus Delta's jobs rebuilding the table's state. Spark reads it as any Delta table.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError, PipelineBusy
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.platform import driver_delta
from dataflow_core.spark.platform.delta import append_control_rows
from dataflow_core.spark.platform.tables import table_path
from dataflow_core.spark.sinks.batch_records import (
    ATTEMPTS, BATCHES_SCHEMA, BATCHES_TABLE, LOG_COLUMNS, MICROBATCH, RESET, SKIP, BatchRecord, LoggedBatch, logged_batch,
)
from dataflow_core.spark.sinks.runs import Ledger

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession



def checkpoint_path(spark: "SparkSession", pipeline: str) -> str:
    """Where the pipeline's stream checkpoint lives (the stream's half of the sequencer)."""
    from dataflow_core.spark.platform.session import warehouse_root

    return f"{warehouse_root(spark).rstrip('/')}/_dataflow_checkpoints/{pipeline}"


@dataclass(frozen=True)
class BatchLog:
    """What one read of `dataflow_batches` says about a pipeline: its `records` (see
    `records`) and `committed`, its last finished batch (since the last reset) that consumed
    stream input: its stream batch, the stream's query id and the batch number. One query,
    since each costs a Spark job and a Delta snapshot."""

    records: list[LoggedBatch]
    committed: tuple[int | None, str | None, int | None]
    ran_live: bool = False
    """Whether a micro-batch finished since the last reset: until then the pipeline is not
    live, whatever backfills locked it, and its first micro-batch takes their windows over."""


@dataclass(frozen=True)
class _LogRows:
    """What a BatchLog is folded from: the pipeline's rows that can matter (those of its
    last two batches and of its last finished stream batch) and marks over all its rows:
    the greatest batch, the last reset, the last finished stream batch and the last batch a
    micro-batch finished."""

    rows: tuple[dict, ...]
    top: int | None
    reset: int | None
    streamed: int | None
    live: int | None = None

    def plus(self, row: dict) -> "_LogRows":
        """These rows after `row` is appended (the marks moved, rows that no longer matter left out)."""
        top = _greatest(self.top, row["batch"])
        reset = _greatest(self.reset, row["batch"] if row["status"] == RESET else None)
        streamed = _greatest(self.streamed, row["batch"] if _is_streamed(row) else None)
        live = _greatest(self.live, row["batch"] if _is_live(row) else None)
        kept = tuple(r for r in (*self.rows, row)
                     if r["batch"] >= top - 1 or (_is_streamed(r) and r["batch"] == streamed))
        return _LogRows(kept, top, reset, streamed, live)

    def log(self) -> BatchLog:
        recent = sorted((r for r in self.rows if self.top is not None and r["batch"] >= self.top - 1),
                        key=lambda r: (-r["batch"], r["status"], -r["attempt"]))
        skips = {r["batch"]: r["reason"] or "" for r in recent if r["status"] == SKIP}
        out = []
        for r in recent:
            if r["status"] == SKIP:
                continue
            out.append(logged_batch(r, skips.get(r["batch"])))
            if r["status"] == RESET:
                break
        last = next((r for r in self.rows if _is_streamed(r) and r["batch"] == self.streamed
                     and (self.reset is None or r["batch"] > self.reset)), None)
        committed = (None, None, None) if last is None else (last["stream_batch"], last["stream_id"], last["batch"])
        ran_live = self.live is not None and (self.reset is None or self.live > self.reset)
        return BatchLog(out, committed, ran_live)


def _greatest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _is_streamed(row: dict) -> bool:
    return row["status"] == "finished" and row["stream_batch"] is not None


def _is_live(row: dict) -> bool:
    return row["status"] == "finished" and (row.get("holder") or MICROBATCH) == MICROBATCH


_BATCHES_COLUMNS = driver_delta.column_names(BATCHES_SCHEMA)

def _uri(spark) -> str:
    return table_path(spark, BATCHES_TABLE)


def _table(spark) -> "DeltaTable | None":
    """`dataflow_batches` at its latest version (None before it is made)."""
    return driver_delta.open_table(_uri(spark))


def log_version(spark) -> int:
    """`dataflow_batches`' latest version (-1 before it is made): a listing of its log."""
    return driver_delta.identity(_table(spark))[1]


def _pipeline_rows(table: "DeltaTable", spec: PipelineSpec, columns=LOG_COLUMNS, where=None) -> list[dict]:
    """The pipeline's rows of the loaded table (those meeting `where` too), as dicts with
    `columns` (`attempt` 0 where an older row has none)."""
    import pyarrow.dataset as ds

    match = ds.field("pipeline") == spec.name
    found = driver_delta.read(table, columns, match if where is None else match & where).to_pylist()
    for row in found:
        if "attempt" in row and row["attempt"] is None:
            row["attempt"] = 0
    return found


_read_logs: dict[tuple[str, str], tuple[tuple[str, int], _LogRows]] = {}
"""The rows of the last BatchLog per (table path, pipeline), with the table id and version
they are of: read, or read and then followed by this process's own appends."""


def read_log(spark, spec: PipelineSpec) -> BatchLog:
    """The pipeline's BatchLog: the rows of its last two batches and of its last finished
    stream batch, with the number of its last reset, from one version of the table. A
    version's contents never change, so while the version stays the one last read (its log
    says so), the last read answers again; so does it after this process's own appends
    (`append_record`), which add their rows to it."""
    import pyarrow.compute as pc

    table = _table(spark)
    if table is None:
        return BatchLog([], (None, None, None))
    path, identity = _uri(spark), driver_delta.identity(table)
    cached = _read_logs.get((path, spec.name))
    if cached is not None and cached[0] == identity:
        return cached[1].log()
    kept = _fold(driver_delta.read(table, LOG_COLUMNS, pc.field("pipeline") == spec.name))
    _read_logs[(path, spec.name)] = (identity, kept)
    return kept.log()


def _fold(rows: "pa.Table") -> _LogRows:
    """The _LogRows of a pipeline's rows: the marks over all of them, and the rows that matter."""
    import pyarrow.compute as pc

    batch, status = rows["batch"], rows["status"]
    finished = pc.equal(status, "finished")
    streamed_rows = pc.and_(finished, pc.is_valid(rows["stream_batch"]))
    live_rows = pc.and_(finished, pc.fill_null(pc.equal(rows["holder"], MICROBATCH), True))

    def greatest(where) -> int | None:
        return pc.max(pc.filter(batch, where)).as_py()

    top, streamed = pc.max(batch).as_py(), greatest(streamed_rows)
    if top is None:
        return _LogRows((), None, None, None)
    keep = pc.greater_equal(batch, top - 1)
    if streamed is not None:
        keep = pc.or_(keep, pc.and_(streamed_rows, pc.equal(batch, streamed)))
    found = rows.filter(keep).to_pylist()
    for row in found:
        row["attempt"] = row["attempt"] or 0
    return _LogRows(tuple(found), top, greatest(pc.equal(status, RESET)), streamed, greatest(live_rows))


def _followed(spark, spec: PipelineSpec, row: dict, committed: int | None) -> None:
    """After this process appended `row` as version `committed` (None: skipped, its key was
    committed before): the cached rows of the pipeline's log take it in, if the version they
    are of is the one before (else another writer came between, and the next `read_log`
    reads)."""
    path = _uri(spark)
    cached = _read_logs.pop((path, spec.name), None)
    if cached is None or committed is None:
        return
    (table_id, version), kept = cached
    if committed == version + 1:
        _read_logs[(path, spec.name)] = ((table_id, committed), kept.plus(row))


def records(spark, spec: PipelineSpec) -> list[LoggedBatch]:
    """The records of the last two batches (so the last finished one is among them, however
    many attempts the latest took): per batch 'finished' first, then attempts newest first;
    a 'reset' row ends the list (what came before it is another life of the pipeline). A
    skip request is no record of its own: each record of its batch carries its reason
    (`skip`, None when not requested)."""
    return read_log(spark, spec).records


def next_batch(known: list[LoggedBatch]) -> int:
    """The number the next batch takes after these records (numbers are never reused)."""
    return known[0].batch + 1 if known else 0


def mark_reset(spark, spec: PipelineSpec) -> int:
    """Append the reset row (see RESET); returns its batch number."""
    table = _table(spark)
    top = None if table is None else max((r["batch"] for r in _pipeline_rows(table, spec, ("batch",))), default=None)
    number = 0 if top is None else top + 1
    rec = BatchRecord(number, None, 0, {}, token=RESET, holder=RESET)
    append_record(spark, spec, rec, RESET, None)
    return number


def append_record(spark, spec: PipelineSpec, rec: BatchRecord, status: str, ledger: Ledger | None) -> None:
    """Append `rec` with this status under its idempotent key (`_key`); the commit carries
    the run's token as Delta's `userMetadata`, so a claim's log entry names its run."""
    row = (
        spec.name, rec.batch, rec.stream_batch, rec.now, dt.datetime.fromtimestamp(rec.now / 1000, dt.timezone.utc),
        status, dt.datetime.now(dt.timezone.utc), json.dumps(rec.versions), json.dumps(rec.watermarks),
        rec.estimator if isinstance(rec.estimator, str) or rec.estimator is None else json.dumps(rec.estimator.to_state()),
        json.dumps(ledger.as_dict()) if ledger else None, rec.attempt, rec.token, rec.stream_id, rec.holder,
        rec.skip if rec.skip is not None else rec.note,
    )
    key = _key(spec, rec, status)
    committed = append_control_rows(spark, BATCHES_TABLE, [row], BATCHES_SCHEMA, key, note=rec.token)
    _followed(spark, spec, {c: v for c, v in zip(_BATCHES_COLUMNS, row) if c in LOG_COLUMNS}, committed)


def _key(spec: PipelineSpec, rec: BatchRecord, status: str) -> tuple[str, int]:
    """The idempotent key of `rec`'s row with this status: a claim's version orders the
    attempts of all batches (N * ATTEMPTS + attempt), other rows are one per batch."""
    version = rec.batch * ATTEMPTS + rec.attempt if status == "started" else rec.batch
    return f"dataflow:{spec.name}:batches:{status}", version


def claim(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Claim attempt `rec.attempt` at batch `rec.batch`; refused when another run claimed it
    first (Delta commits at most one row per idempotent key) or a later attempt took it.
    The Delta log's commits since the claim began say both without a query: ours names
    this run, a later attempt's key is above ours. Anything else (our commit skipped or
    refused) is settled by reading the claims."""
    before = log_version(spark)
    failure: Exception | None = None
    try:
        append_record(spark, spec, rec, "started", None)
    except Exception as exc:  # a concurrent claim of the same key fails the loser's commit
        failure = exc
    version = log_version(spark)
    app_id, mine = _key(spec, rec, "started")
    claims = _claims(spark, app_id, before, version)
    if failure is None and (mine, rec.token) in claims:
        _refuse_superseded(spec, rec, [c for c, _ in claims if c // ATTEMPTS == rec.batch])
        rec.fenced_at = version
        return
    attempts = _attempts(spark, spec, rec)
    theirs = [r for r in attempts if r["attempt"] == rec.attempt and r["run_token"] != rec.token]
    if theirs:
        raise PipelineBusy(
            f"pipeline {spec.name!r} is already running: another run claimed batch {rec.batch} "
            f"(attempt {rec.attempt}) first; this run stopped without writing"
        )
    _refuse_superseded(spec, rec, [rec.batch * ATTEMPTS + r["attempt"] for r in attempts])
    if not any(r["attempt"] == rec.attempt for r in attempts):
        raise failure or DataflowError(f"pipeline {spec.name!r}: the claim of batch {rec.batch} did not commit")
    rec.fenced_at = version


def fence(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Stop before a commit if a later attempt took this batch over (this run is a zombie).
    Only the log's commits since the last check can hold such a claim: their `txn` actions
    say so without a query (while there is none, the log's version says so)."""
    version = log_version(spark)
    if version == rec.fenced_at:
        return
    if rec.fenced_at < 0:  # never claimed by this run: read the claims
        claimed = [rec.batch * ATTEMPTS + r["attempt"] for r in _attempts(spark, spec, rec)]
    else:
        app_id, _ = _key(spec, rec, "started")
        claimed = [c for c, _ in _claims(spark, app_id, rec.fenced_at, version) if c // ATTEMPTS == rec.batch]
    _refuse_superseded(spec, rec, claimed)
    rec.fenced_at = version


def _claims(spark, app_id: str, after: int, upto: int) -> list[tuple[int, str | None]]:
    """The claims committed in versions `after`+1 to `upto` of `dataflow_batches`, from its
    log: (idempotent-key version, run token) of each commit under `app_id`."""
    path = _uri(spark)
    out = []
    for version in range(max(after, -1) + 1, upto + 1):
        actions = driver_delta.commit_actions(path, version)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        out += [(a["txn"]["version"], info.get("userMetadata")) for a in actions
                if "txn" in a and a["txn"].get("appId") == app_id]
    return out


def _attempts(spark, spec: PipelineSpec, rec: BatchRecord) -> list:
    """The `started` rows of `rec`'s batch from its attempt on (attempt, run_token)."""
    import pyarrow.dataset as ds

    table = _table(spark)
    rows = [] if table is None else _pipeline_rows(
        table, spec, ("attempt", "run_token"), (ds.field("batch") == rec.batch) & (ds.field("status") == "started"))
    return [r for r in rows if r["attempt"] >= rec.attempt]


def _refuse_superseded(spec: PipelineSpec, rec: BatchRecord, claimed: list[int]) -> None:
    """PipelineBusy when one of these claims of `rec`'s batch (idempotent-key versions) is
    of a later attempt."""
    latest = max(claimed, default=None)
    if latest is not None and latest % ATTEMPTS > rec.attempt:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: another run took over batch {rec.batch} (attempt {latest % ATTEMPTS}) while "
            f"this one (attempt {rec.attempt}) was still going; this run stopped, and what it had "
            "committed is exactly what the other commits"
        )

