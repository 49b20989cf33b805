"""A backfill's lock on its pipeline: one writer per pipeline at a time, and a run that is a
function of the input it pinned.

Every backfill (batch or replay), whether or not the pipeline ever ran live, claims the
pipeline's next batch number in `dataflow_batches` before it reads anything (`claim`: of two
runs claiming it at once exactly one commits; the other is busy). The claim's record is the
run's whole identity:
- its run id, command, arguments and processing time (`LockNote`, in the record's `reason`);
- the version of the input table it reads, and of every table of the pipeline as the lock
  found them (`versions`): the run reads that input version however often it is resumed,
  and abandoning the run restores the pipeline's tables to those versions.

While the lock stands, nothing else writes the pipeline's tables (micro-batches and other
backfills are refused), so a run killed anywhere and started again with the same arguments
resumes the same run: same id, processing time, input version and plans, every write under
the same idempotent key. A run whose lock no longer stands (it finished, or was abandoned)
is never resumed: the next run with those arguments plans afresh from the input as it is
then. The lock is released last, after the run is recorded as finished; a lock whose run
finished but was not released yet (killed in between) is released by whoever finds it.

A lock names its owner and beats while its run works (`sinks.lock_holders`): a command that finds
the pipeline locked by a run that is gone or failed stops at once (PipelineStuck) with one line
naming the run, what happened to it and when, and the commands that resume and abandon it;
only a working holder makes it busy. Every commit of a locked run is fenced, and an operator
can abandon a run that fails on every re-run: both in `sinks.fencing`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable

from dataflow_core.errors import DataflowError, PipelineBusy, PipelineStuck, first_line, is_concurrent
from dataflow_core.model.time import Instant, format_instant
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.spark.platform.delta import create_table, table_version
from dataflow_core.spark.sinks.batch_records import (
    BATCHES_SCHEMA, BATCHES_TABLE, MICROBATCH, BatchRecord, LoggedBatch,
)
from dataflow_core.spark.sinks.batches import append_record, claim, next_batch, read_log
from dataflow_core.spark.sinks.corrections_plan import forget_run_plans, plan_table
from dataflow_core.spark.sinks.lock_holders import Owner, beat, forget_beat, gone, last_beat, this_owner
from dataflow_core.spark.sinks.live_state import state_table
from dataflow_core.spark.sinks.panes import panes_table
from dataflow_core.spark.sinks.quarantine import quarantine_table
from dataflow_core.spark.sinks.runs import (
    FINISHED, PLANNED, RUNS_SCHEMA, RUNS_TABLE, WATERMARKS_SCHEMA, WATERMARKS_TABLE, Ledger, Run, args_text,
    last_failure, new_run, plan_state, record_started, resume_command, run_status,
)
from dataflow_core.spark.sinks.seen_ids import seen_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BACKFILL_LOCK_HOLDER = "backfill "
"""A lock's `holder`: this prefix and the run id."""


@dataclass(frozen=True)
class PipelineLock:
    """A run that locked its pipeline: its record in `dataflow_batches` and the run."""

    record: BatchRecord
    run: Run
    owner: Owner | None = None  # this process, which took (or resumed) the run

    @property
    def input_version(self) -> int:
        """The version of the input table the run reads (-1: the table did not exist)."""
        return self.record.versions.get(input_key(self.run.pipeline), -1)


def ensure_control_tables(spark: "SparkSession") -> None:
    """The tables every run shares exist before any run races to create them."""
    create_table(spark, BATCHES_TABLE, BATCHES_SCHEMA)
    create_table(spark, RUNS_TABLE, RUNS_SCHEMA)
    create_table(spark, WATERMARKS_TABLE, WATERMARKS_SCHEMA)


def pipeline_tables(spec: PipelineSpec) -> list[str]:
    """Every table a run of the pipeline writes besides the shared control tables."""
    names = [seen_table(spec), quarantine_table(spec)]
    for stage in spec.stages:
        names += [stage.output, panes_table(stage), state_table(stage), plan_table(stage)]
    return names


def take_lock(
    spark: "SparkSession", spec: PipelineSpec, command: str, args: dict, now: Instant | None,
    say: Callable[[str], None] = lambda _m: None, planned: Run | None = None, past_batch: int | None = None,
) -> PipelineLock:
    """Lock the pipeline for a run of `command` with `args` at processing time `now` (None:
    the clock): resume the run whose lock stands with these arguments, or claim the pipeline
    for a new run. PipelineBusy while another run has it locked. The processing time of a new
    run is never before the last live batch's: an earlier `now` is refused, a clock behind
    it is moved up to it. `planned`: the run is that planned run (`--apply`), with its id,
    arguments and processing time (`args` and `now` are ignored). `past_batch`: an unfinished
    micro-batch of this number is claimed past (`dataflow reset --abandon-batch`). PipelineStuck
    when the run locking it is gone or failed."""
    ensure_control_tables(spark)
    text = planned.args if planned is not None else args_text(args)
    for _ in range(3):  # a finished run's lock, not yet released, is released and the log read again
        log = read_log(spark, spec)
        latest = log.records[0] if log.records else None
        if latest is not None and latest.status == "started" and not _passed(latest, past_batch):
            held = _standing(spark, spec, latest, command, text, say)
            if held is None:
                continue
            return held
        last = next((r for r in log.records if r.status == FINISHED), None)
        run = (replace(planned, resumed=True) if planned is not None
               else new_run(spec.name, command, text, _processing_time(now, last)))
        owner = this_owner()
        rec = _lock_record(spark, spec, next_batch(log.records), last, run, owner)
        try:
            claim(spark, spec, rec)  # PipelineBusy when another run claimed this number first
        except Exception as exc:
            if isinstance(exc, PipelineBusy) or not is_concurrent(exc):
                raise
            raise PipelineBusy(f"pipeline {spec.name!r}: another run claimed it at the same moment "
                               f"({first_line(exc)[:200]}); this run stopped before reading: try again, or "
                               "run with --wait") from None
        lock = PipelineLock(rec, run, owner)
        _confirm(spark, spec, lock)
        beat(spark, spec.name, run.run_id, owner)
        record_started(spark, run)
        return lock
    raise PipelineBusy(f"pipeline {spec.name!r}: its lock keeps changing hands; try again")


def _passed(latest: LoggedBatch, past_batch: int | None) -> bool:
    """Whether `latest` is the unfinished micro-batch the caller claims past."""
    return past_batch is not None and latest.holder == MICROBATCH and latest.batch == past_batch


def _standing(spark, spec: PipelineSpec, latest: LoggedBatch, command: str, text: str, say) -> PipelineLock | None:
    """The lock `latest` stands: resumed when it is this run's, released (None) when its run
    finished, else the pipeline is busy (stuck, when its run is gone or failed)."""
    holder = latest.holder
    if holder == MICROBATCH:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: a micro-batch has it locked (batch {latest.batch} has not finished: running, or "
            "crashed and completed by its next run); this run stopped before reading, try again later (or --wait)"
        )
    note = latest.lock_note()
    run_id = holder[len(BACKFILL_LOCK_HOLDER):]
    rec = record_of(latest)
    if release_if_finished(spark, spec, latest):
        say(f"run {run_id} had finished without releasing pipeline {spec.name}; released it")
        return None
    if note.get("command") == command and note.get("args") == text:
        if note.get("owner") and lock_holder_gone(spark, spec, latest) is None:  # two writers of one run: never
            raise PipelineBusy(
                f"pipeline {spec.name!r} is locked by {command} run {run_id} ({_describe(note)}) with these arguments, "
                f"which is still working ({owner_words(spark, spec, latest)}); this run stopped before reading: wait "
                "for it (--wait)")
        run = Run(run_id, spec.name, command, text, int(note["now"]), resumed=True)
        owner = this_owner()
        beat(spark, spec.name, run_id, owner)  # its owner now: this process
        record_started(spark, run)  # a run killed between its claim and this row
        say(f"resuming unfinished run {run_id} (processing time {format_instant(run.now)}, "
            f"input version {rec.versions.get(input_key(spec.name), -1)})")
        return PipelineLock(rec, run, owner)
    what = lock_holder_gone(spark, spec, latest)
    if what is not None:
        raise PipelineStuck(stuck_line(spark, spec, latest, what))
    raise PipelineBusy(
        f"pipeline {spec.name!r} is locked by {note.get('command', 'backfill')} run {run_id} ({_describe(note)}), "
        f"which has not finished; this run stopped before reading. Wait for it (--wait), run it again to finish it, "
        f"or abandon it: `dataflow backfill --pipeline {spec.name} --abandon {run_id}`"
    )


def _confirm(spark, spec: PipelineSpec, lock: PipelineLock) -> None:
    """The claim stands: the pipeline's latest record, read afresh, is this run's lock
    (PipelineBusy otherwise, before anything is read or written)."""
    from dataflow_core.spark.sinks import batches

    batches._read_logs.clear()
    latest = (read_log(spark, spec).records or [None])[0]
    if not latest or latest.status != "started" or latest.holder != lock.record.holder:
        raise PipelineBusy(f"pipeline {spec.name!r}: another run has it locked ({latest.holder if latest else 'none'}); "
                           "this run stopped before reading: try again, or run with --wait")


def _describe(note: dict) -> str:
    args = json.loads(note.get("args") or "{}")
    return ", ".join(f"{k} {v}" for k, v in args.items() if k in ("start", "end")) or "no range"


def lock_holder_gone(spark: "SparkSession", spec: PipelineSpec, latest: LoggedBatch) -> str | None:
    """What happened to the run whose lock `latest` is (None: it is working, as far as can be
    told; `holders.gone`): its owner and heartbeat from its heartbeat file, else from its
    claim, and its latest failure."""
    run_id = latest.holder[len(BACKFILL_LOCK_HOLDER):]
    note = latest.lock_note()
    owner, beat_at = last_beat(spark, spec.name, run_id)
    if owner is None:
        owner = Owner.of(note.get("owner"))
        beat_at = owner.since if owner is not None else None
    return gone(owner, beat_at, last_failure(spark, run_id), time.time())


def stuck_line(spark: "SparkSession", spec: PipelineSpec, latest: LoggedBatch, what: str) -> str:
    """The one line of a command that found the pipeline locked by a run that is gone or failed
    (`what` happened to it): the run, and the commands that resume and abandon it."""
    run_id = latest.holder[len(BACKFILL_LOCK_HOLDER):]
    note = latest.lock_note()
    command, args = note.get("command", "backfill"), note.get("args") or "{}"
    planned = bool(json.loads(args).get("plan_only")) and _is_planned(spark, run_id)
    return (f"pipeline {spec.name!r} is locked by {command} run {run_id} ({_describe(note)}), which {what}; nothing "
            f"runs until it is resumed or abandoned: resume it with `{resume_command(spec.name, run_id, command, args, planned)}`"
            f", or abandon it (its writes undone) with `dataflow backfill --pipeline {spec.name} --abandon {run_id}`")


def _is_planned(spark, run_id: str) -> bool:
    """Whether run `run_id` stored a plan still waiting for its decision (its lock is then its apply's)."""
    state = plan_state(spark, run_id)
    return state is not None and state.status == PLANNED


def refuse_if_locked(spark: "SparkSession", spec: PipelineSpec, latest: LoggedBatch | None) -> None:
    """A micro-batch does not start while another run has the pipeline locked: busy while that run
    works, stuck when it is gone or failed."""
    if not latest or latest.status != "started" or latest.holder == MICROBATCH:
        return
    what = lock_holder_gone(spark, spec, latest) if latest.holder.startswith(BACKFILL_LOCK_HOLDER) else None
    if what is not None:
        raise PipelineStuck(stuck_line(spark, spec, latest, what))
    raise PipelineBusy(
        f"pipeline {spec.name!r} is locked by {latest.holder} (batch {latest.batch}), which is writing "
        "its tables; this micro-batch stopped without writing and runs once that run has finished "
        "(a run that stops finishes when run again with the same arguments, or is undone by "
        f"`dataflow backfill --pipeline {spec.name} --abandon {latest.holder.split(' ', 1)[-1]}`)"
    )


def _processing_time(now: Instant | None, last: LoggedBatch | None) -> Instant:
    floor = last.now_ms if last else None
    if now is None:
        clock = int(time.time() * 1000)
        return clock if floor is None else max(clock, floor)
    if floor is not None and now < floor:
        raise DataflowError(
            f"--now {format_instant(now)} is before the processing time of the pipeline's last batch "
            f"({format_instant(floor)}); a backfill's corrections follow the panes they correct, so give a later "
            "--now, or leave it out for the clock"
        )
    return now


def planned_from(spec: PipelineSpec, lock: PipelineLock) -> dict[str, int]:
    """The versions a plan made under `lock` is made from: the input's it read and every
    table of the pipeline a plan's corrections follow from (a plan's apply refuses it once
    one moved). Not the plans themselves, nor the quarantine, which nothing reads back: an
    input gate quarantining another range's rows leaves this plan as true as it was."""
    left_out = {plan_table(stage) for stage in spec.stages} | {quarantine_table(spec)}
    return {name: v for name, v in lock.record.versions.items() if name not in left_out}


def input_key(pipeline: str) -> str:
    """The key of the input's version in a lock's `versions` (apart from the pipeline's own
    tables, which an input table could share a name with only by mistake)."""
    return f"input:{pipeline}"


def _lock_record(spark, spec: PipelineSpec, batch: int, last: LoggedBatch | None, run: Run, owner: Owner) -> BatchRecord:
    """The lock's record for `batch`: the live clock, watermarks and estimator of the last
    finished batch (a lock changes none of them), the versions it pins, the run and its owner."""
    versions = {name: table_version(spark, name) for name in pipeline_tables(spec)}
    versions[input_key(spec.name)] = table_version(spark, spec.input_table)
    holder = BACKFILL_LOCK_HOLDER + run.run_id
    note = json.dumps({"command": run.command, "args": run.args, "now": run.now, "owner": owner.as_dict()})
    return BatchRecord(
        batch=batch, stream_batch=None, now=last.now_ms if last else 0, versions=versions, attempt=0,
        token=holder, stream_id=None, watermarks=dict(last.watermarks) if last else {},
        estimator=last.estimator_state if last else None, holder=holder, note=note,
    )


def record_of(row: LoggedBatch) -> BatchRecord:
    """The lock's record `row` as its run writes it again (its release, an abandon's)."""
    return BatchRecord(
        batch=row.batch, stream_batch=None, now=row.now_ms, versions=dict(row.versions), attempt=row.attempt,
        token=row.run_token, stream_id=None, watermarks=dict(row.watermarks), estimator=row.estimator_state,
        holder=row.holder, note=row.reason,
    )


def release_if_finished(spark: "SparkSession", spec: PipelineSpec, latest: LoggedBatch) -> bool:
    """Release the backfill lock `latest` (the pipeline's latest record) if its run finished
    (it was stopped between recording that and releasing); True if it did."""
    holder = latest.holder
    if latest.status != "started" or not holder.startswith(BACKFILL_LOCK_HOLDER):
        return False
    run_id = holder[len(BACKFILL_LOCK_HOLDER):]
    if run_status(spark, run_id) != FINISHED:
        return False
    release_finished(spark, spec, record_of(latest), run_id, spec.stages, None)
    return True


def release_finished(spark: "SparkSession", spec: PipelineSpec, rec: BatchRecord, run_id: str,
                     stages: Iterable[StageSpec], ledger: Ledger | None) -> None:
    """A finished run's lock released: its plans of `stages` dropped (a finished run is never
    resumed from them), then its batch finished. The run does it, and so does whoever finds it
    finished but not released (killed between the two), which can be at the same moment: one
    DELETE of the plans then conflicts with the other. Both steps are idempotent (a DELETE of
    the run's rows, an append under the lock's key), so the loser does them again."""
    for attempt in range(3):
        try:
            forget_run_plans(spark, stages, run_id)
            release(spark, spec, rec, ledger)
            return
        except Exception as exc:
            if attempt == 2 or isinstance(exc, PipelineBusy) or not is_concurrent(exc):
                raise


def release(spark: "SparkSession", spec: PipelineSpec, rec: BatchRecord, ledger: Ledger | None) -> None:
    """The run is done (recorded finished or failed first): its batch finishes, leaving the
    live clock where it was; its heartbeat goes."""
    append_record(spark, spec, rec, FINISHED, ledger)
    if rec.holder.startswith(BACKFILL_LOCK_HOLDER):
        forget_beat(spark, spec.name, rec.holder[len(BACKFILL_LOCK_HOLDER):])


def owner_words(spark, spec: PipelineSpec, latest: LoggedBatch) -> str:
    """The working holder's process and heartbeat, in words."""
    run_id = latest.holder[len(BACKFILL_LOCK_HOLDER):]
    owner, beat_at = last_beat(spark, spec.name, run_id)
    owner = owner or Owner.of(latest.lock_note().get("owner"))
    where = owner.describe() if owner else "its process is not recorded"
    return where + (f", last heartbeat {time.time() - beat_at:.0f} s ago" if beat_at else "")
