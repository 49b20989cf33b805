"""A backfill's plan, previewed, then applied or rejected: `dataflow backfill --plan-only`,
`--apply RUN_ID`, `--reject RUN_ID`.

A plan (`run_backfill(plan_only=True)`) has the pipeline locked while it reads and plans, exactly
as a backfill does, stores its plans of corrections (`<stage>__corrections`) and writes
nothing else; it is recorded `planned` in `dataflow_runs` with the versions it was planned
from (the input's it read, every output table's), and then releases the pipeline. Keeping
the lock until someone decides would stop the pipeline's micro-batches for as long as a plan
waits for a human, which may be days. So a plan is checked instead: `--apply` takes the lock
again under the plan's own run id and processing time, refuses the plan, naming the tables,
when the rows it was diffed against changed since (input of its range written, a
micro-batch or another backfill writing its windows: `plan_staleness`; commits of other
windows and OPTIMIZE leave it standing), and otherwise
applies exactly the stored plan as a resumed run would. A refused plan is recorded
`rejected`, with the reason; the range is planned again.

Exactly once: an apply is a run locking the pipeline, so two at once are one writer and one
busy; a plan already applied or rejected is not applied (the caller is told by whom and
when), and an apply killed midway is resumed by `--apply` again, its writes idempotent. A
reject has the pipeline locked too (a run of its own, `reject`), so an apply and a reject of one
plan exclude each other: whichever has it locked first decides, the other is busy and then finds
the plan decided. A reject killed midway is resumed by the same `--reject`.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError, first_line
from dataflow_core.model.time import format_instant, parse_instant
from dataflow_core.pipelines import PipelineSpec, get, layout
from dataflow_core.spark.input.rows import EventRange
from dataflow_core.spark.sinks.batch_records import LoggedBatch
from dataflow_core.spark.sinks.batches import read_log
from dataflow_core.spark.sinks.corrections_plan import forget_run_plans
from dataflow_core.spark.sinks.pipeline_lock import (
    BACKFILL_LOCK_HOLDER, PipelineLock, lock_holder_gone, release, take_lock,
)
from dataflow_core.spark.sinks.runs import (
    APPLIED, PLANNED, REJECTED, Ledger, PlanState, RunResult, args_text, fail_run, finish_run, plan_state,
    record_decision,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]
REJECT = "reject"
"""The command of a reject's run, which has the pipeline locked while it decides."""


def default_decider() -> str:
    """Who decides when nobody says: the operating-system user running the command."""
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "unknown"


def planned_run(spark: "SparkSession", pipeline: str, run_id: str) -> PlanState:
    """The plan `run_id` of `pipeline` as recorded; one line when there is none."""
    state = plan_state(spark, run_id)
    if state is None:
        raise DataflowError(f"no planned backfill run {run_id!r} in {layout.RUNS} (plans are made with "
                            f"`dataflow backfill --pipeline {pipeline} --start ... --end ... --plan-only`)")
    if state.run.pipeline != pipeline:
        raise DataflowError(f"run {run_id} is a plan of pipeline {state.run.pipeline!r}, not {pipeline!r}")
    return state


def decided(state: PlanState) -> str:
    """One line on a plan already decided."""
    who = state.decided_by or "an earlier --apply"
    when = f" at {state.decided_at:%Y-%m-%d %H:%M:%S} UTC" if state.decided_at else ""
    why = f" ({state.reason})" if state.reason else ""
    return f"run {state.run.run_id} was already {state.status} by {who}{when}{why}; nothing changed"


def apply_plan(spark: "SparkSession", pipeline: str, run_id: str, decided_by: str | None = None,
               say: Say = lambda _m: None, fast: bool | None = None) -> RunResult | PlanState:
    """Apply the stored plan `run_id` once (see the module docstring): its result, or the
    plan's state when it was already decided. DataflowError, recorded, for a stale plan."""
    from dataflow_core.spark.jobs.backfill import BackfillRun
    from dataflow_core.spark.sinks.definitions import refuse_changed_definitions

    spec = get(pipeline)
    who = decided_by or default_decider()
    state = planned_run(spark, pipeline, run_id)
    if state.status != PLANNED:
        return state
    refuse_changed_definitions(spark, spec)  # a plan's corrections are the definition's it was planned under
    lock = take_lock(spark, spec, "backfill", {}, None, say, planned=state.run)
    again = plan_state(spark, run_id)  # decided while this run waited for the lock
    if again is not None and again.status != PLANNED:
        release(spark, spec, lock.record, None)
        return again
    stale = staleness(spark, spec, state.versions, lock, _span_of(state))
    if stale:
        release(spark, spec, lock.record, None)
        reason = f"stale: {stale} since it was planned"
        record_decision(spark, state.run, REJECTED, who, reason)
        forget_run_plans(spark, spec.stages, run_id)
        raise DataflowError(f"plan {run_id} of {spec.name!r} refused, nothing applied: {stale} since it was "
                            "planned; plan the range again")
    say(f"run {run_id} has locked pipeline {spec.name}; applying its plan (planned at processing time "
        f"{format_instant(state.run.now)})")
    return BackfillRun(spark, spec, _span_of(state), lock, say, fast=fast).finish(decided_by=who)


def reject_plan(spark: "SparkSession", pipeline: str, run_id: str, decided_by: str | None = None,
                say: Say = lambda _m: None) -> PlanState | None:
    """Discard the stored plan `run_id`: recorded `rejected` by `decided_by`, its plans
    dropped, no output table touched, all while locking the pipeline (see the module
    docstring). The plan's state when it was already decided (None when this call rejected
    it); refused while an apply of it has the pipeline locked, busy while another run does."""
    spec = get(pipeline)
    state = planned_run(spark, pipeline, run_id)
    args = {"plan": run_id}
    latest = (read_log(spark, spec).records or [None])[0]
    held = latest if latest and latest.status == "started" else None
    if state.status != PLANNED and not (held and _note(held) == (REJECT, args_text(args))):
        return state  # (unless a reject of it stopped midway: this one finishes it)
    if held and held.holder == BACKFILL_LOCK_HOLDER + run_id and lock_holder_gone(spark, spec, held) is None:
        raise DataflowError(f"run {run_id} has locked pipeline {spec.name!r}: it is being applied (or planned) now; "
                            "nothing rejected")
    lock = take_lock(spark, spec, REJECT, args, None, say)
    try:
        again = plan_state(spark, run_id)  # an apply may have decided it before this run locked the pipeline
        if again is not None and again.status == APPLIED:
            finish_run(spark, lock.run, Ledger())
            release(spark, spec, lock.record, None)
            return again
        record_decision(spark, state.run, REJECTED, decided_by or default_decider())
        forget_run_plans(spark, spec.stages, run_id)
        finish_run(spark, lock.run, Ledger())
    except BaseException as exc:
        fail_run(spark, lock.run, f"{type(exc).__name__}: {first_line(exc)}"[:500])
        raise
    release(spark, spec, lock.record, None)
    say(f"plan {run_id} of {spec.name} rejected; no table of the pipeline was changed")
    return None


def _note(record: LoggedBatch) -> tuple[str | None, str | None]:
    """The command and arguments of the run whose lock `record` is."""
    note = record.lock_note()
    return note.get("command"), note.get("args")


def staleness(spark: "SparkSession", spec: PipelineSpec, planned: dict[str, int], lock: PipelineLock,
              span: EventRange) -> str:
    """What changed since the plan in the rows it was diffed against (empty when nothing
    did: commits of other windows, OPTIMIZE and the like leave a plan standing), in words:
    the input table or which output tables, how many rows, their versions then and now."""
    from dataflow_core.spark.jobs.plan_staleness import span_read, stale_tables

    moved = stale_tables(spark, spec, planned, lock.record.versions, span, span_read(spec, span))
    return "; ".join(m.describe() for m in moved)


def _span_of(state: PlanState) -> EventRange:
    import json

    args = json.loads(state.run.args)
    return EventRange(parse_instant(args["start"]), parse_instant(args["end"]))
