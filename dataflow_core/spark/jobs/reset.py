"""`dataflow reset`: start a pipeline's live runs afresh.

Deletes the live state of every stage, the seen ids, the backfills' correction plans and
the stream checkpoint (and, on request, the stage outputs), then appends a `reset` row to
`dataflow_batches`. Batch numbers go on after it, never reused: deleted tables take their
Delta transaction ids with them, and tables that stay (the outputs, `dataflow_batches`)
never see an old batch number again, so no write of the new life is skipped as a retry of
the old one. The next micro-batch reads the input from the start, as a new pipeline would.

A reset has the pipeline locked from before it deletes anything until its `reset` row (a run of
its own, `reset`, claimed as a backfill claims it): nothing else writes meanwhile, and a
reset that stops midway is finished by the same command (or abandoned). It also takes the
loop's lock (`sinks.loop_lock`) for as long as it works: refused while a `--loop` holds it,
and a loop that lost it to the reset stops before its next batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import PipelineBusy, first_line
from dataflow_core.pipelines import PipelineSpec, get
from dataflow_core.spark.platform.tables import drop_path, drop_table
from dataflow_core.spark.sinks.batch_records import MICROBATCH
from dataflow_core.spark.sinks.batches import checkpoint_path, mark_reset, records
from dataflow_core.spark.sinks.corrections_plan import plan_table
from dataflow_core.spark.sinks.lock_holders import Heartbeat, forget_beat
from dataflow_core.spark.sinks.pipeline_lock import take_lock
from dataflow_core.spark.sinks.loop_lock import LoopLock
from dataflow_core.spark.sinks.live_state import state_table
from dataflow_core.spark.sinks.panes import panes_table
from dataflow_core.spark.sinks.runs import Ledger, fail_run, finish_run
from dataflow_core.spark.sinks.seen_ids import seen_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def reset_pipeline(
    spark: "SparkSession", pipeline: str, drop_outputs: bool = False, progress: Callable[[str], None] | None = None,
    abandon: int | None = None,
) -> list[str]:
    """Reset `pipeline` (see the module docstring); returns what was deleted. Refused while
    a run has the pipeline locked, unless the operator abandons that unfinished micro-batch by its
    number (`abandon`: it fails on every retry and cannot be skipped; no run of it may be going);
    PipelineStuck when the run locking it is gone or failed."""
    spec = get(pipeline)
    say = progress or (lambda _m: None)
    # the loop's lock (`sinks.loop_lock`): refused while a loop runs, and none starts until the reset is done
    with LoopLock(spark, spec.name, "reset", "stop it first; reset refused, nothing deleted", say):
        return _reset(spark, spec, drop_outputs, say, abandon)


def _reset(spark: "SparkSession", spec: PipelineSpec, drop_outputs: bool, say: Callable[[str], None],
           abandon: int | None) -> list[str]:
    known = records(spark, spec)
    abandoned = abandon is not None and known and known[0].batch == abandon and known[0].holder == MICROBATCH
    if known and known[0].status == "started" and known[0].holder == MICROBATCH and not abandoned:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: batch {known[0].batch} has not finished (running, or crashed: "
            "run it again to finish it, or skip it: `dataflow microbatch --pipeline "
            f"{spec.name} --skip-batch {known[0].batch}`); reset refused, nothing deleted"
        )
    args = {"drop_outputs": drop_outputs, "abandon_batch": abandon}
    lock = take_lock(spark, spec, "reset", args, None, say, past_batch=abandon if abandoned else None)
    with Heartbeat(spark, spec.name, lock.run.run_id, lock.owner):
        try:
            deleted = _deleted(spark, spec, drop_outputs)
            number = mark_reset(spark, spec)  # the lock ends with it: what came before is another life
            finish_run(spark, lock.run, Ledger())
        except BaseException as exc:
            fail_run(spark, lock.run, f"{type(exc).__name__}: {first_line(exc)}"[:500])
            raise
    forget_beat(spark, spec.name, lock.run.run_id)
    say(f"pipeline {spec.name}: deleted {', '.join(deleted) or 'nothing'}; live runs start afresh "
        f"(next batch {number + 1}, reading the input from the start)")
    return deleted


def _deleted(spark: "SparkSession", spec: PipelineSpec, drop_outputs: bool) -> list[str]:
    """The live state, seen ids, plans and stream checkpoint deleted (the outputs too with
    `drop_outputs`); what was deleted."""
    tables = [seen_table(spec)] + [t for s in spec.stages for t in (state_table(s), plan_table(s))]
    if drop_outputs:
        tables += [t for s in spec.stages for t in (s.output, panes_table(s))]
    deleted = [t for t in tables if drop_table(spark, t)]
    if drop_path(spark, checkpoint_path(spark, spec.name)):
        deleted.append("stream checkpoint")
    return deleted
