"""The micro-batch sequencer (MillWheel's): which batch comes next, and one batch from its
claim to its `finished` record.

Each batch, in order: claim its number and processing time in `dataflow_batches` (a retry
reuses both); accept its input (`live_input`); advance the watermark estimator; run every
stage on its woken keys (`stage_chain`, `live_stage`); record the batch as finished with its
ledger, watermarks and what the estimator learnt. A batch the operator skips (`--skip-batch`,
`jobs.skip`) has its rows quarantined instead, and nothing else.

Exactly once: every write of batch N is a Delta commit under the idempotent key
(`dataflow:<pipeline>:<table>`, N), so a retried batch skips what already committed; and a
retry reads state and seen ids as of the versions recorded when the batch started (time
travel; going live, the input too), so it computes exactly what the first attempt did. Before each commit a run checks
that no later attempt claimed its batch (`batches.fence`).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import Instant, format_instant, format_watermark
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.model.windows import AssignContext
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.runners.schedule import Schedule, Step
from dataflow_core.spark.jobs import live_input, live_stage
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.jobs.observe import live_summary, refuse_live
from dataflow_core.spark.jobs.skip import skip_batch
from dataflow_core.spark.jobs.stage_chain import first_arrivals, run_chain
from dataflow_core.spark.platform import snapshot_warming
from dataflow_core.spark.platform.delta import Txn, gone_cause, read_as_of, table_version
from dataflow_core.spark.platform.tables import table_exists
from dataflow_core.spark.sinks.batch_records import ATTEMPTS, BatchRecord, LoggedBatch
from dataflow_core.spark.sinks.batches import append_record, claim, fence, log_version, next_batch, read_log, records
from dataflow_core.spark.sinks.pipeline_lock import ensure_control_tables, input_key, refuse_if_locked, release_if_finished
from dataflow_core.spark.sinks.live_state import next_wake, state_table
from dataflow_core.spark.sinks.panes import panes_table
from dataflow_core.spark.sinks.quarantine import quarantine_table
from dataflow_core.spark.sinks.runs import Ledger
from dataflow_core.spark.sinks.seen_ids import seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Done = tuple[BatchRecord, Ledger]
"""A finished batch: its record (as written) and its ledger."""


def before_input(spark: "SparkSession", spec: PipelineSpec, now_ms: Instant, say: Callable[[str], None],
                 token: str) -> Done | None:
    """Before reading input: refuse while a backfill has the pipeline locked, complete a tick
    batch that did not finish (returned), and make sure the input table exists. An estimator
    only a bounded replay can feed is refused first (`observe.refuse_live`)."""
    refuse_live(spec.name, spec.watermark())
    if log_version(spark) < 0:  # a fresh warehouse: made once, however many runs race
        ensure_control_tables(spark)
    pending = records(spark, spec)
    if pending and release_if_finished(spark, spec, pending[0]):
        pending = records(spark, spec)
    refuse_if_locked(spark, spec, pending[0] if pending else None)
    finished = None
    if pending and pending[0].status == "started" and pending[0].stream_batch is None:
        say(f"finishing tick batch {pending[0].batch} that did not complete")
        finished = run_batch(spark, spec, None, None, now_ms, say, token, pending[0].stream_id)
    if not table_exists(spark, spec.input_table):
        raise DataflowError(f"pipeline {spec.name!r}: its input table {spec.input_table} does not exist yet")
    return finished


def run_batch(spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame | None", stream_batch: int | None,
              now_ms: Instant, say: Callable[[str], None], token: str, stream_id: str | None) -> Done | None:
    """One micro-batch (a tick when `rows` is None); None when it had nothing to do."""
    begun = _begin(spark, spec, stream_batch, now_ms, token, stream_id)
    if begun is None:
        if stream_batch is not None:
            say(f"stream batch {stream_batch} was already processed and committed; writing nothing")
        return None
    rec, prev = begun

    def txn(table: str) -> Txn:
        """The idempotent key of this batch's commit to `table`, once sure no later attempt
        took the batch over."""
        fence(spark, spec, rec)
        return f"dataflow:{spec.name}:{table}", rec.batch

    if rec.skip is not None:
        ledger = skip_batch(spark, spec, rows, rec, prev, txn, say)
        finished = rec
    else:
        with _readable(spec, rec):
            ledger, watermarks, estimator = _compute(spark, spec, rows, rec, prev, txn, say)
        finished = dataclasses.replace(rec, watermarks=watermarks, estimator=estimator)
    crash_point("before-finish")
    fence(spark, spec, finished)
    append_record(spark, spec, finished, "finished", ledger)
    return finished, ledger


def _begin(spark: "SparkSession", spec: PipelineSpec, stream_batch: int | None, now_ms: Instant, token: str,
           stream_id: str | None) -> tuple[BatchRecord, LoggedBatch | None] | None:
    """This batch's record, claimed (a retry resumes the unfinished batch with the next
    attempt), and the last finished one; None when there is nothing to do: the stream
    re-delivered a batch that already finished, or a tick at the last batch's time or with
    nothing due (`_idle_tick`)."""
    log = read_log(spark, spec)  # one read of dataflow_batches for the records and the stream
    known = log.records
    # a backfill's lock of a pipeline not yet live carries no live clock: not a batch to follow
    last_finished = next((r for r in known if r.status == "finished"), None) if log.ran_live else None
    latest = known[0] if known else None
    refuse_if_locked(spark, spec, latest)
    if stream_batch is not None:
        done_stream, done_id, done_batch = log.committed
        if done_id is not None and stream_id is not None and done_id != stream_id:
            raise DataflowError(
                f"pipeline {spec.name!r}: its stream checkpoint was recreated (stream {stream_id}, but batch "
                f"{done_batch} was read by stream {done_id}); it would read the input again from the start. "
                f"Restore the checkpoint, or start the pipeline's live runs afresh: `dataflow reset --pipeline {spec.name}`"
            )
        if done_stream is not None and stream_batch <= done_stream:
            return None  # input behind the committed state: already processed as batch <= done_batch
    if latest and latest.status == "started":
        return _retry(spark, spec, latest, stream_batch, token, stream_id), last_finished
    if stream_batch is None and last_finished and now_ms == last_finished.now_ms:
        return None  # a tick at the same processing time fires nothing new
    if last_finished and now_ms < last_finished.now_ms:
        raise DataflowError(
            f"--now {format_instant(now_ms)} is before the last batch's processing time "
            f"{format_instant(last_finished.now_ms)}; processing time never moves back"
        )
    if stream_batch is None and last_finished and _idle_tick(spark, spec, last_finished, now_ms):
        return None
    names = [seen_table(spec)] + [state_table(s) for s in spec.stages]
    if last_finished is None:  # going live: the results backfills left are taken over (`live_stage`)
        names += [s.output for s in spec.stages if s.keeps_results]
    versions = {n: table_version(spark, n) for n in names}
    if last_finished is None:  # ... with the input they counted, as of this claim (`live_stage._taken_over`)
        versions[input_key(spec.name)] = table_version(spark, spec.input_table)
    rec = BatchRecord(next_batch(known), stream_batch, now_ms, versions, token=token, stream_id=stream_id)
    claim(spark, spec, rec)
    crash_point("started")
    warm_tables(spark, spec)  # while the batch reads and checks its input
    return rec, last_finished


def warm_tables(spark: "SparkSession", spec: PipelineSpec) -> None:
    """Delta's state of every table a batch reads or writes, computed in the background
    (`platform.snapshot_warming`) in the order the batch needs them: the seen ids and each
    stage's state (read first), the quarantine, then each stage's pane log and results."""
    outputs = [t for s in spec.stages for t in (panes_table(s), *([s.output] if s.keeps_results else []))]
    snapshot_warming.warm(spark, [seen_table(spec), *map(state_table, spec.stages), quarantine_table(spec), *outputs])


def _retry(spark: "SparkSession", spec: PipelineSpec, latest: LoggedBatch, stream_batch: int | None, token: str,
           stream_id: str | None) -> BatchRecord:
    """The unfinished batch `latest`, claimed again by its next attempt."""
    if latest.stream_batch != stream_batch:
        raise DataflowError(
            f"pipeline {spec.name!r}: batch {latest.batch} did not finish and is not the one "
            "the stream delivers now; its checkpoint and dataflow_batches disagree"
        )
    rec = BatchRecord(latest.batch, stream_batch, latest.now_ms, dict(latest.versions), attempt=latest.attempt + 1,
                      token=token, stream_id=stream_id, skip=latest.skip)
    if rec.attempt >= ATTEMPTS:
        raise DataflowError(f"pipeline {spec.name!r}: batch {rec.batch} was attempted {ATTEMPTS} times; giving up")
    claim(spark, spec, rec)
    return rec


def _idle_tick(spark: "SparkSession", spec: PipelineSpec, prev: LoggedBatch, now_ms: Instant) -> bool:
    """Whether a tick at `now_ms` after the finished batch `prev` would change nothing but
    the batch log: the watermark estimator learns nothing from time passing, no later
    stage's watermark is held back below the input's (so none can move), and no key of any
    stage has a timer or watermark deadline due (`live_state.Wake`). Such a tick is not made, so an
    idle `--loop` costs no query at all while the state stays as it is (`next_wake`: read
    once per version) instead of a batch's commits; the next batch fires what comes due, as
    this tick would have."""
    estimator = _estimator(spec, prev)
    learnt = estimator.to_state()
    watermarks = prev.watermarks
    wm = estimator.update(Progress(processing_time=now_ms, max_skew=spec.max_skew))
    if wm != watermarks.get("input", BEGINNING_OF_TIME) or estimator.to_state() != learnt:
        return False
    if any(watermarks.get(s.output) != wm for s in spec.stages[1:]):
        return False
    wakes = [next_wake(spark, s) for s in spec.stages]
    return not any(w is not None and w.due(now_ms, wm) for w in wakes)


def _estimator(spec: PipelineSpec, prev: LoggedBatch | None):
    """The pipeline's watermark estimator, as the finished batch `prev` left it."""
    estimator = spec.watermark()
    if prev and prev.estimator_state:
        estimator.load_state(prev.learnt())
    return estimator


def _compute(spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame | None", rec: BatchRecord,
             prev: LoggedBatch | None, txn: Callable[[str], Txn], say: Callable[[str], None]):
    """The batch's input accepted, the watermark moved and every stage run and written.
    Returns its ledger, the watermarks to record and the estimator after it."""
    from pyspark.sql import functions as F

    if rec.attempt:
        for name, version in rec.versions.items():  # a retry whose versions are gone fails here, before any work
            read_as_of(spark, spec.input_table if name == input_key(spec.name) else name, version)
    prev_wms = prev.watermarks if prev else {}
    estimator = _estimator(spec, prev)
    old_wm = prev_wms.get("input", BEGINNING_OF_TIME)
    ledger = Ledger()
    accepted = live_input.accept(spark, spec, rows, rec, old_wm, ledger, txn)
    summary = live_summary(estimator, accepted.arrived, accepted.elements)
    new_wm = estimator.update(Progress(batch_summary=summary, processing_time=rec.now, max_skew=spec.max_skew))
    say(f"batch {rec.batch} at {format_instant(rec.now)}: {ledger.read:,} rows read, {ledger.accepted:,} accepted, "
        f"{ledger.duplicates:,} duplicates, {ledger.quarantined:,} quarantined; watermark -> {format_watermark(new_wm)}")
    schedule = Schedule([Step((rec.batch,), rec.now, new_wm)], old_wm,
                        start_time=prev.now_ms if prev else BEGINNING_OF_TIME)
    arrivals = None
    if accepted.elements is not None:
        seq, at_ms = F.array(F.lit(rec.batch).cast("bigint")), F.lit(rec.now).cast("bigint")
        arrivals = first_arrivals(accepted.elements, spec.stages[0], seq, at_ms)
        if accepted.retracted is not None:  # with the batch's elements, as one bundle (model rule 19)
            arrivals = arrivals.unionByName(first_arrivals(accepted.retracted, spec.stages[0], seq, at_ms, True),
                                            allowMissingColumns=True)

    def write(current, counts, _schedule) -> None:
        live_stage.write_stage(spark, current, counts, rec, txn)
        say(f"  {current.stage.output}: {counts.panes:,} panes, {counts.retractions:,} retractions")

    try:
        watermarks = run_chain(
            spec, arrivals, schedule,
            lambda stage, stage_arrivals, stage_schedule, first: live_stage.run_woken_keys(
                spark, spec, stage, stage_arrivals, stage_schedule, rec, first),
            write, ledger, start=lambda stage: prev_wms.get(stage.output, BEGINNING_OF_TIME))
    except BaseException:
        accepted.release(failed=True)
        raise
    accepted.release()  # the input's writes, under way while the stages ran, done
    _say_corrections(spec, ledger, accepted.corrected, say)
    return ledger, {"input": new_wm, **watermarks}, estimator


def _say_corrections(spec: PipelineSpec, ledger: Ledger, corrected: tuple, say: Callable[[str], None]) -> None:
    """The batch's input changes in the task log, and the range to backfill for those it left
    (the event times of every counted row it removed: a backfill over more than it needs
    plans no change outside)."""
    if not ledger.inserts + ledger.deletes + ledger.updates:
        return
    say(f"  input changes: {ledger.inserts:,} inserts, {ledger.deletes:,} deletes, {ledger.updates:,} updates; "
        f"{ledger.retracted:,} retracted, {ledger.deletes_never_counted:,} never counted, "
        f"{ledger.left_for_backfill:,} corrections left for a backfill")
    if ledger.left_for_backfill and corrected:
        starts = [w.start for t in corrected
                  for w in spec.stages[0].strategy.window_fn.assign(AssignContext(None, None, t))]
        say(f"  {ledger.left_for_backfill:,} corrections left for a backfill (past the first stage's allowed lateness, "
            f"or a stage that cannot take them back live): `dataflow backfill --pipeline {spec.name} --start "
            f"{format_instant(min(starts))} --end {format_instant(max(starts) + 1)} --plan-only` shows them")


@contextmanager
def _readable(spec: PipelineSpec, rec: BatchRecord) -> Iterator[None]:
    """A batch whose recorded versions can no longer be read (left unfinished for longer
    than VACUUM's retention or the log's) fails with one line naming it and the way out."""
    try:
        yield
    except Exception as exc:
        cause = gone_cause(exc)
        if cause is None:
            raise
        raise DataflowError(
            f"pipeline {spec.name!r}: batch {rec.batch} cannot be retried: the table versions it recorded when "
            f"it started ({', '.join(f'{k} v{v}' for k, v in rec.versions.items())}) can no longer be read "
            f"(vacuumed, or the log cleaned: {cause}); skip it (`dataflow microbatch --pipeline {spec.name} "
            f"--skip-batch {rec.batch}`) or start the live runs afresh (`dataflow reset --pipeline {spec.name} "
            f"--abandon-batch {rec.batch}`)"
        ) from None
