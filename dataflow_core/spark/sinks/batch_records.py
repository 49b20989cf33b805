"""What a row of `dataflow_batches` (the pipeline's sequencer, `sinks.batches`) is: the
table's layout and statuses, the record a run writes (`BatchRecord`) and the record a reader
gets back (`LoggedBatch`, decoded once by `logged_batch`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dataflow_core.model.time import Instant
from dataflow_core.pipelines import layout

BATCHES_TABLE = layout.BATCHES
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
batch's other records (their `skip`: the reason), so it is never a batch's latest record."""
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
    holder: str = MICROBATCH  # "microbatch", or "backfill <run id>" for a backfill locking the pipeline
    skip: str | None = None  # the operator's reason when this batch is skipped (its rows quarantined)
    note: str | None = None  # a lock's run (`sinks.pipeline_lock`, JSON), kept in `reason` as a skip's reason is
    fenced_at: int = -1  # dataflow_batches' version when `fence` last found no later attempt (not stored)


@dataclass(frozen=True)
class LoggedBatch:
    """One row of `dataflow_batches` as read back (`logged_batch`): its columns typed and its
    JSON decoded, so no reader of the log parses a column of its own. `skip` is the reason of
    the operator's skip request for the batch (None when there is none; see `records`)."""

    pipeline: str
    batch: int
    stream_batch: int | None
    now_ms: Instant  # the batch's processing time
    status: str  # "started", "finished", RESET
    versions: dict[str, int]  # the table versions the claim pinned
    watermarks: dict[str, Instant]  # per stage output (and "input") after the batch
    estimator_state: str | None  # what the estimator learnt (JSON text, carried over as it is)
    ledger: dict[str, Any] | None  # a finished batch's (`runs.Ledger.as_dict`)
    attempt: int
    run_token: str | None
    stream_id: str | None
    holder: str  # MICROBATCH, or BACKFILL_LOCK_HOLDER + run id (`sinks.pipeline_lock`)
    reason: str | None  # a skip request's reason, or a lock's note (JSON: `lock_note`)
    skip: str | None = None

    def lock_note(self) -> dict[str, Any]:
        """The run a lock's record names (`sinks.pipeline_lock`): command, args, now, owner."""
        return json.loads(self.reason or "{}")

    def learnt(self) -> Any:
        """What the watermark estimator had learnt after this batch (None: nothing recorded)."""
        return json.loads(self.estimator_state) if self.estimator_state else None


def logged_batch(row: dict[str, Any], skip: str | None = None) -> LoggedBatch:
    """The record of a `dataflow_batches` row (a dict with LOG_COLUMNS), with the batch's
    skip request (`skip`); the one place the log's columns are decoded."""
    ledger = row["ledger"]
    return LoggedBatch(
        pipeline=row["pipeline"], batch=row["batch"], stream_batch=row["stream_batch"], now_ms=row["now_ms"],
        status=row["status"], versions=json.loads(row["versions"] or "{}"),
        watermarks=json.loads(row["watermarks"] or "{}"), estimator_state=row["estimator_state"],
        ledger=json.loads(ledger) if ledger else None, attempt=row["attempt"] or 0, run_token=row["run_token"],
        stream_id=row["stream_id"], holder=row["holder"] or MICROBATCH, reason=row["reason"], skip=skip,
    )


LOG_COLUMNS = ("pipeline", "batch", "stream_batch", "now_ms", "status", "versions", "watermarks", "estimator_state",
               "ledger", "attempt", "run_token", "stream_id", "holder", "reason")
"""The columns of `dataflow_batches` a record carries (not the audit timestamps, which are
for SQL readers; `now_ms` is the batch's processing time)."""
