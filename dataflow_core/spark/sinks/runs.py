"""Runs and their ledgers, recorded in Delta so that any reader can audit them.

`dataflow_runs` is append-only: a `started` row when a run begins (with the processing
time it runs at), then a `finished` row with its ledger, or a `failed` row with its one-line
reason. Every row is written under an idempotent key (run id and status), so a resumed run
records each once. Whether a run resumes is not decided here: a backfill resumes while its
lock on the pipeline stands (`sinks.pipeline_lock`), and this table is its audit trail.

A backfill planned for approval (`--plan-only`) adds a `planned` row (its ledger holds the
preview's counts, `versions` the table versions it was planned from), then one decision: an
`applied` or a `rejected` row whose `decided_by` says who decided, `recorded_at` when, and
`reason` why a plan was refused (stale). The approval's audit trail is this table, not a
table of its own, so `dataflow sql` reads a plan's whole story from one place.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.pipelines import layout
from dataflow_core.spark.platform import driver_delta

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUNS_TABLE = layout.RUNS
WATERMARKS_TABLE = layout.WATERMARKS
RUNS_SCHEMA = (
    "run_id string, pipeline string, command string, args string, now timestamp, "
    "status string, recorded_at timestamp, ledger string, reason string, decided_by string, versions string"
)
STARTED, FINISHED, FAILED = "started", "finished", "failed"
PLANNED, APPLIED, REJECTED = "planned", "applied", "rejected"
FINAL = (FINISHED, APPLIED, REJECTED)
"""The statuses after which a run has nothing left to do (a `failed` run may be resumed, a
`planned` one decided): one of them is the run's status, whatever was recorded around it."""
WATERMARKS_SCHEMA = (
    "pipeline string, stage string, run_id string, step bigint, processing_time timestamp, watermark timestamp"
)


def current_runs_sql(pipeline: str | None = None, status: str | None = None) -> str:
    """SQL of each run's current status, one row per run (`dataflow_runs` has a row per status
    the run went through): its latest final row (`FINAL`), else its latest row, with when the
    run started, who decided (a plan) and the reason (a failure). Newest first. Standard SQL
    that Spark and the fast reader both run (`dataflow runs` runs it)."""
    from dataflow_core.query import literal

    final = ", ".join(literal(s) for s in FINAL)
    where = f" WHERE pipeline = {literal(pipeline)}" if pipeline else ""
    having = f" AND status = {literal(status)}" if status else ""
    return (
        "SELECT run_id, pipeline, command, status, recorded_at AS since, started_at, decided_by, reason, args FROM ("
        "SELECT run_id, pipeline, command, status, recorded_at, decided_by, reason, args, "
        "min(recorded_at) OVER (PARTITION BY run_id) AS started_at, "
        f"row_number() OVER (PARTITION BY run_id ORDER BY CASE WHEN status IN ({final}) THEN 1 ELSE 0 END DESC, "
        f"recorded_at DESC) AS nth FROM {RUNS_TABLE}{where}) AS runs "
        f"WHERE nth = 1{having} ORDER BY since DESC, run_id"
    )


CHANGE_COUNTS = ("inserts", "deletes", "updates", "withdrawn", "retracted", "deletes_never_counted", "left_for_backfill")
"""The counts of a micro-batch that reads the input's change data feed (zero for every other run)."""
COUNTS = ("read", "accepted", "duplicates", "quarantined", "aggregated", "dropped_late", "panes", "retractions",
          "corrected_windows", *CHANGE_COUNTS)
"""Every count of a `Ledger`, as runs record it and Airflow's tasks hand it on."""


@dataclass
class Ledger:
    """Where every row of a run went; `balanced` is the contract every run must meet."""

    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0
    aggregated: int = 0
    dropped_late: int = 0
    panes: int = 0
    retractions: int = 0
    corrected_windows: int = 0
    # A micro-batch that reads the input's change data feed (`input.changes`): its inserted
    # rows, deleted rows and updated rows (each a pre- and a post-image); rows added and
    # taken back out within the batch (`withdrawn`, not `read`); and where each removal (a
    # delete or a pre-image) went: `retracted` from the windows that counted it, a row that
    # was never counted (`deletes_never_counted`), or a correction left for a backfill.
    inserts: int = 0
    deletes: int = 0
    updates: int = 0
    withdrawn: int = 0
    retracted: int = 0
    deletes_never_counted: int = 0
    left_for_backfill: int = 0
    per_stage: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        return (
            self.read == self.accepted + self.duplicates + self.quarantined
            and self.accepted == self.aggregated + self.dropped_late
            and self.deletes + self.updates == self.retracted + self.deletes_never_counted + self.left_for_backfill
        )

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in COUNTS}
        d["balanced"] = self.balanced
        d["per_stage"] = self.per_stage
        return d

    def add_stage(self, stage: str, panes: int, retractions: int, elements: int | None = None,
                  dropped: int = 0, corrected_windows: int = 0, input_retractions: tuple[int, int] = (0, 0)) -> None:
        """A stage's panes and retractions (and a backfill's windows corrected); for the first
        stage (`elements` given), what it aggregated and dropped as too late of the elements
        it took, and of those (`input_retractions`) how many were input retractions and how
        many of them it dropped as too late (left for a backfill)."""
        self.per_stage[stage] = {"panes": panes, "retractions": retractions, "corrected_windows": corrected_windows}
        self.panes += panes
        self.retractions += retractions
        self.corrected_windows += corrected_windows
        if elements is not None:
            taken_back, too_late = input_retractions
            self.dropped_late = dropped - too_late
            self.aggregated = elements - taken_back - self.dropped_late
            self.retracted -= too_late
            self.left_for_backfill += too_late

    def plus(self, other: "Ledger") -> "Ledger":
        """The ledger of both runs (or batches) together."""
        total = Ledger(**{k: getattr(self, k) + getattr(other, k) for k in COUNTS})
        for ledger in (self, other):
            for stage, counts in ledger.per_stage.items():
                agg = total.per_stage.setdefault(stage, {"panes": 0, "retractions": 0, "corrected_windows": 0})
                for k, v in counts.items():
                    agg[k] = agg.get(k, 0) + v
        return total

    def lines(self) -> list[str]:
        ok = "OK" if self.balanced else "MISMATCH"
        out = [
            "ledger:",
            f"  read {self.read:,} = accepted {self.accepted:,} + duplicates {self.duplicates:,}"
            f" + quarantined {self.quarantined:,}",
            f"  accepted {self.accepted:,} = aggregated {self.aggregated:,} + dropped as too late"
            f" {self.dropped_late:,}   {ok}",
        ]
        if self.inserts + self.deletes + self.updates:
            out += [
                f"  changes: {self.inserts:,} inserts, {self.deletes:,} deletes, {self.updates:,} updates"
                f" ({self.withdrawn:,} rows added and removed within the batch)",
                f"  deletes {self.deletes:,} + updates {self.updates:,} = retracted {self.retracted:,}"
                f" + never counted {self.deletes_never_counted:,} + corrections left for a backfill"
                f" {self.left_for_backfill:,}",
            ]
        for stage, c in self.per_stage.items():
            out.append(
                f"  {stage}: {c.get('panes', 0):,} panes, {c.get('retractions', 0):,} retractions, "
                f"{c.get('corrected_windows', 0):,} corrected windows"
            )
        return out


@dataclass
class Run:
    run_id: str
    pipeline: str
    command: str
    args: str
    now: Instant
    resumed: bool = False


@dataclass
class RunResult:
    run_id: str
    ledger: dict[str, Any]
    now: Instant

    @property
    def ledger_ok(self) -> bool:
        return bool(self.ledger.get("balanced"))


def _to_ts(ms: Instant) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def new_run(pipeline: str, command: str, args: dict[str, Any] | str, now: Instant) -> Run:
    """A run not yet recorded, with a fresh id."""
    text = args if isinstance(args, str) else args_text(args)
    return Run(f"{command}-{uuid.uuid4().hex[:12]}", pipeline, command, text, now)


def args_text(args: dict[str, Any]) -> str:
    """A run's arguments as stored (and compared: a run resumes only its own arguments)."""
    return json.dumps(args, sort_keys=True)


def record_started(spark: "SparkSession", run: Run) -> None:
    _append(spark, run, STARTED, None, None)


def finish_run(spark: "SparkSession", run: Run, ledger: Ledger) -> RunResult:
    _append(spark, run, FINISHED, json.dumps(ledger.as_dict(), sort_keys=True), None)
    return RunResult(run.run_id, ledger.as_dict(), run.now)


def fail_run(spark: "SparkSession", run: Run, reason: str, finished_spent: bool = False) -> None:
    """Record that the run stopped with this one-line reason (a resumed run may still
    finish it: its status is its last row). `finished_spent` (an abandon): the row is written
    under the key of the run's `finished` row, so that the run, if it is still going, never
    records itself finished."""
    _append(spark, run, FAILED, None, reason[:1000], spent=FINISHED if finished_spent else None)


def run_status(spark: "SparkSession", run_id: str) -> str | None:
    """The run's last recorded status (None when it has no row): `finished` wins over any
    `failed` of an earlier attempt."""
    statuses = {r["status"] for r in _rows_of(spark, run_id, ("status",))}
    for status in (FINISHED, FAILED, STARTED):
        if status in statuses:
            return status
    return None


def last_failure(spark: "SparkSession", run_id: str) -> tuple[float, str] | None:
    """The run's latest `failed` record: when (epoch seconds) and its one-line reason."""
    rows = [r for r in _rows_of(spark, run_id, ("status", "recorded_at", "reason")) if r["status"] == FAILED]
    if not rows:
        return None
    last = max(rows, key=lambda r: r["recorded_at"])
    at = last["recorded_at"]
    at = at.replace(tzinfo=dt.timezone.utc) if at.tzinfo is None else at
    return at.timestamp(), " ".join(str(last["reason"] or "").split())


def resume_command(pipeline: str, run_id: str, command: str, args: str, planned: bool = False) -> str:
    """The command that resumes the run (its own arguments, which is what resumes it);
    `planned`: the run is the apply of its stored plan."""
    given = json.loads(args or "{}")
    if command == "reset":
        more = (" --drop-outputs" if given.get("drop_outputs") else "") + (
            f" --abandon-batch {given['abandon_batch']}" if given.get("abandon_batch") is not None else "")
        return f"dataflow reset --pipeline {pipeline}{more}"
    if command == "reject":
        return f"dataflow backfill --pipeline {pipeline} --reject {given.get('plan')}"
    if command == "maintain":
        return f"dataflow maintain --pipeline {pipeline}"
    if command == "gate":  # its one write, quarantined rows, is undone by abandoning it: the gate quarantines them again
        return f"dataflow backfill --pipeline {pipeline} --abandon {run_id}"
    if planned:
        return f"dataflow backfill --pipeline {pipeline} --apply {run_id}"
    text = f"dataflow backfill --pipeline {pipeline} --start {given.get('start')} --end {given.get('end')}"
    if given.get("replay"):
        text += f" --replay --batch-interval {given.get('batch_interval', '1m')}"
    return text + (" --plan-only" if given.get("plan_only") else "")


def record_planned(spark: "SparkSession", run: Run, ledger: Ledger, versions: dict[str, int]) -> None:
    """The run planned its corrections and applied none: the preview's counts and the table
    versions the plan was made from (an apply refuses the plan once one of them moved)."""
    _append(spark, run, PLANNED, json.dumps(ledger.as_dict(), sort_keys=True), None,
            versions=json.dumps(versions, sort_keys=True))


def record_decision(spark: "SparkSession", run: Run, status: str, decided_by: str, reason: str | None = None) -> None:
    """A plan's one decision, `applied` or `rejected`, with who made it (now is when)."""
    _append(spark, run, status, None, reason, decided_by=decided_by)


@dataclass(frozen=True)
class PlanState:
    """What `dataflow_runs` says of a planned run: `status` is `planned` until it is decided
    (`applied`, also when its `finished` row is all an apply left, or `rejected`)."""

    run: Run
    status: str
    ledger: dict[str, Any]
    versions: dict[str, int]
    decided_by: str | None = None
    decided_at: dt.datetime | None = None
    reason: str | None = None


def plan_state(spark: "SparkSession", run_id: str) -> PlanState | None:
    """The plan of run `run_id` (None when the run planned nothing for approval)."""
    rows = {r["status"]: r for r in _rows_of(spark, run_id, _RUNS_COLUMNS)}
    planned = rows.get(PLANNED)  # (a table from before plans has no `versions`: none of its runs planned)
    if planned is None:
        return None
    run = Run(run_id, planned["pipeline"], planned["command"], planned["args"],
              int(planned["now"].timestamp() * 1000))
    decided = rows.get(APPLIED) or rows.get(REJECTED) or rows.get(FINISHED)
    status = PLANNED if decided is None else (REJECTED if decided["status"] == REJECTED else APPLIED)
    return PlanState(run, status, json.loads(planned["ledger"] or "{}"), json.loads(planned["versions"] or "{}"),
                     decided["decided_by"] if decided else None, decided["recorded_at"] if decided else None,
                     decided["reason"] if decided else None)


_RUNS_COLUMNS = driver_delta.column_names(RUNS_SCHEMA)


def _rows_of(spark: "SparkSession", run_id: str, columns: tuple[str, ...]) -> list[dict]:
    """The run's rows of `dataflow_runs` (these columns), read on the driver (`driver_delta`)."""
    import pyarrow.dataset as ds

    from dataflow_core.spark.platform.tables import table_path

    table = driver_delta.open_table(table_path(spark, RUNS_TABLE))
    return [] if table is None else driver_delta.read(table, columns, ds.field("run_id") == run_id).to_pylist()


def _append(spark: "SparkSession", run: Run, status: str, ledger: str | None, reason: str | None,
            decided_by: str | None = None, versions: str | None = None, spent: str | None = None) -> None:
    """One row: each status under the key (run, status), so a resumed run writes each
    once; a `failed` row per failure (each attempt's reason is worth keeping), or under the
    key of status `spent` when given."""
    from dataflow_core.spark.platform.delta import append_control_rows

    row = (run.run_id, run.pipeline, run.command, run.args, _to_ts(run.now), status,
           dt.datetime.now(dt.timezone.utc), ledger, reason, decided_by, versions)
    keyed = spent or (None if status == FAILED else status)
    key = None if keyed is None else (f"dataflow:{run.pipeline}:{RUNS_TABLE}:{run.run_id}:{keyed}", 0)
    append_control_rows(spark, RUNS_TABLE, [row], RUNS_SCHEMA, key)


def record_watermarks(
    spark: "SparkSession", run: Run, stage: str, steps: list[tuple[int, Instant, Instant]]
) -> None:
    """(step, processing time, watermark) per step; the ends of time are stored as null.
    Appended once per run and stage (a resumed run's commit is skipped under the key)."""
    from dataflow_core.spark.platform.delta import append_control_rows

    def ts(ms: Instant) -> dt.datetime | None:
        return None if abs(ms) >= END_OF_TIME - 1 else _to_ts(ms)

    rows = [(run.pipeline, stage, run.run_id, n, ts(t), ts(w)) for n, t, w in steps]
    append_control_rows(spark, WATERMARKS_TABLE, rows, WATERMARKS_SCHEMA,
                        (f"dataflow:{run.pipeline}:{WATERMARKS_TABLE}:{run.run_id}:{stage}", 0))
