"""`dataflow microbatch`: one (or a loop of) exactly-once micro-batches of a pipeline.

New input comes from Structured Streaming's Delta source with an available-now trigger (or,
under `--loop`, one long-running query with a processing-time trigger) and `foreachBatch`:
the stream's checkpoint remembers which table versions were consumed and refuses a second
concurrent query on it (MillWheel's sequencer), and a batch that crashed is delivered
again, with the same rows, to the next run. A batch with no new input (a "tick") still
fires due timers and watermark panes; one with nothing due is not made (`_idle_tick`).
Commits that rewrite input files (an overwrite, `replaceWhere`, an upsert, an UPDATE or
DELETE) are read with `ignoreChanges`: the rows of the rewritten files come again, so new
rows among them count, and the rows the pipeline has seen are duplicates by their event ids
(or, beyond the seen-ids horizon, too late for any window). What the rewrite changed or
removed is not a live event: a `dataflow backfill` over its range applies it, to the
results and to the live state.

Each batch, in order: record its number and processing time (a retry reuses both);
quarantine bad rows; drop duplicate deliveries (event ids are remembered in
`<pipeline>__seen_ids` until a delivery would be too late anyway, `seen_ids.horizon`);
advance the watermark estimator; then per stage, on the keys that got data or have a timer
due (found through the state table's wake-up columns), fire timers, deliver elements and
move the watermark (`runners.keyed.run_key`); write panes, results and state; record the
batch as finished with its ledger and watermarks. A batch the operator skips
(`--skip-batch`, `jobs.skip`) has its rows quarantined instead, and nothing else.

Exactly once: every write of batch N is a Delta commit under the idempotent key
(`dataflow:<pipeline>:<table>`, N), so a retried batch skips what already committed; and a
retry reads state and seen ids as of the versions recorded when the batch started (time
travel), so it computes exactly what the first attempt did.

Fenced (MillWheel's sequencer): each attempt at batch N claims it with a `started` row in
`dataflow_batches` under the idempotent key (`...:batches:started`, N*1000 + attempt), so
of two runs claiming the same attempt exactly one commits (the other is refused). A later
attempt (a retry after a crash, or a second run while the first still goes) supersedes the
earlier one: before each of its commits a run checks that no later attempt claimed its
batch, and stops with a clear message if one did. Both attempts compute the same rows from
the same recorded versions and write them under the same keys, so whichever commits first
wins and the other's commit is skipped: the tables are those of one run. A run whose input
is behind what is committed (its stream batch already finished, or a recreated stream
checkpoint) writes nothing.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator

from dataflow_core.errors import BUSY_EXIT, DataflowError, PipelineBusy, is_concurrent
from dataflow_core.model.time import Instant, format_instant, format_watermark
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.options import parse_time
from dataflow_core.pipelines import PipelineSpec, StageSpec, get
from dataflow_core.runners.keyed import HoldSpan, Schedule, Step, carried_hold_spans, downstream_schedule
from dataflow_core.spark.execute.keyed_stage import HOLD_FIELDS, KeyCodec, hold_span, run_stage
from dataflow_core.spark.execute.take_over import taken_over_states
from dataflow_core.spark.input.going_live import FirstRead, source_options
from dataflow_core.spark.input.rows import elements, quarantined, read_counts, tag_rows
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.jobs.crash import CRASH_ENV, crash_point
from dataflow_core.spark.jobs.skip import skip_batch
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.delta import Txn, gone_cause, read_as_of, session_settings, table_version
from dataflow_core.spark.platform.session import COMPILED_SQL, MICRO_BATCH_SQL, unless_configured
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from dataflow_core.spark.sinks.batches import (
    ATTEMPTS, BATCHES_TABLE, BatchRecord, append_record, checkpoint_path, claim, fence, next_batch, read_log, records,
    refuse_if_backfill_holds,
)
from dataflow_core.spark.sinks.holds import ensure_control_tables, release_if_finished
from dataflow_core.spark.sinks.lease import Lease
from dataflow_core.spark.sinks.live_state import due, next_wake, read_states, state_table, write_state
from dataflow_core.spark.sinks.panes import write_panes
from dataflow_core.spark.sinks.quarantine import write_quarantine
from dataflow_core.spark.sinks.results import standing_panes, write_results
from dataflow_core.spark.sinks.runs import Ledger, RunResult
from dataflow_core.spark.sinks.seen_ids import remember_ids, seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BUSY_EXIT", "CRASH_ENV", "PipelineBusy", "run_loop", "run_microbatch"]

FUTURE_TOLERANCE = 5 * 60 * 1000
"""How far ahead of this machine's clock `--now` may be (clocks of machines differ)."""

# --- the run ------------------------------------------------------------------------


def run_microbatch(
    spark: "SparkSession",
    pipeline: str,
    now: str | dt.datetime | None = None,
    progress: Callable[[str], None] | None = None,
    first_read: FirstRead | None = None,
) -> RunResult:
    """Every input row committed since the last batch, as one or more micro-batches (a
    tick when there is none and something is due). Raises PipelineBusy when another run
    holds the pipeline. Its queries run interpreted (`session.MICRO_BATCH_SQL`).
    `first_read`: how the stream reads while it has no checkpoint (`input.going_live`)."""
    with _holding(spark, MICRO_BATCH_SQL):
        return _microbatch(spark, pipeline, now, progress, first_read)


def _microbatch(spark, pipeline: str, now, progress, first_read: FirstRead | None = None) -> RunResult:
    spec = get(pipeline)
    say = progress or (lambda _m: None)
    clock = int(time.time() * 1000)
    now_ms = parse_time(now, "--now") if now is not None else clock
    if now_ms > clock + FUTURE_TOLERANCE:
        raise DataflowError(
            f"--now {format_instant(now_ms)} is in the future (the clock says {format_instant(clock)}); "
            "processing time never moves back, so every later batch would have to wait for it"
        )
    token = uuid.uuid4().hex
    done: list[tuple[BatchRecord, Ledger]] = []
    _finish_tick(spark, spec, now_ms, say, token, done.append)
    stream = _Stream(spark, spec, say, token, lambda: now_ms, done.append, first_read)
    stream.finish(stream.start({"availableNow": True}))
    if not stream.batches:
        tick = _process(spark, spec, None, None, now_ms, say, token, stream.id)
        if tick is not None:
            done.append(tick)
    if not done:
        last = records(spark, spec)[0]
        say(f"nothing new since batch {last['batch']} at {format_instant(last['now_ms'])} and nothing due at "
            f"{format_instant(now_ms)}: nothing to do")
        return RunResult(f"{spec.name}-batch-{last['batch']}", Ledger().as_dict(), last["now_ms"])
    return _result(spec, done)


def run_loop(
    spark: "SparkSession",
    pipeline: str,
    every_s: float,
    progress: Callable[[str], None] | None = None,
    on_result: Callable[[RunResult], None] | None = None,
    stop: threading.Event | None = None,
    first_read: FirstRead | None = None,
) -> None:
    """`--loop`: one streaming query with a processing-time trigger every `every_s` seconds,
    so a batch pays no query start-up; each of its batches, and a tick whenever an interval
    brings no input and something is due, is a micro-batch of `run_microbatch`'s kind at
    the clock's time, with its result handed to `on_result`. Runs until `stop` is set (or
    Ctrl-C), letting the batch under way finish; while another run holds the pipeline it
    waits and tries again. Its queries run interpreted (`session.MICRO_BATCH_SQL`)."""
    with _holding(spark, MICRO_BATCH_SQL):
        _loop(spark, pipeline, every_s, progress, on_result, stop, first_read)


def _loop(spark, pipeline: str, every_s: float, progress, on_result, stop, first_read=None) -> None:
    spec = get(pipeline)
    say = progress or (lambda _m: None)
    report = on_result or (lambda _r: None)
    stop = stop or threading.Event()
    latest = [0]

    def clock() -> Instant:  # never back, whatever the machine's clock does
        latest[0] = max(latest[0], int(time.time() * 1000))
        return latest[0]

    def handle(done: tuple[BatchRecord, Ledger]) -> None:
        report(_result(spec, [done]))

    with Lease(spark, spec.name):  # `dataflow reset` refuses while the loop runs
        _loop_batches(spark, spec, every_s, say, handle, stop, clock, first_read)


def _loop_batches(spark, spec: PipelineSpec, every_s: float, say, handle, stop, clock, first_read) -> None:
    """`_loop`'s batches, until `stop` is set."""
    while not stop.is_set():
        token = uuid.uuid4().hex
        try:
            _finish_tick(spark, spec, clock(), say, token, handle)
            stream = _Stream(spark, spec, say, token, clock, handle, first_read)
            query = stream.start({"processingTime": f"{round(every_s * 1000)} milliseconds"})
            try:
                seen = 0
                while query.isActive and not stop.wait(every_s):
                    if query.status["isTriggerActive"]:
                        continue  # the stream is reading or planning a batch: no tick before it
                    with stream.lock:
                        if stream.batches == seen and not stream.failures:
                            tick = _process(spark, spec, None, None, clock(), say, token, stream.id)
                            if tick is not None:
                                handle(tick)
                        seen = stream.batches
            finally:
                stream.halt(query)
            stream.finish(query)
        except PipelineBusy as exc:
            say(f"{exc}; trying again in {every_s:g} s")
            stop.wait(every_s)


def _finish_tick(spark, spec: PipelineSpec, now_ms: Instant, say, token: str, done: Callable) -> None:
    """Before reading input: refuse while a backfill holds the pipeline, complete a tick
    batch that did not finish, and make sure the input table exists."""
    if not table_exists(spark, BATCHES_TABLE):  # a fresh warehouse: made once, however many runs race
        ensure_control_tables(spark)
    pending = records(spark, spec)
    if pending and release_if_finished(spark, spec, pending[0]):
        pending = records(spark, spec)
    refuse_if_backfill_holds(spec, pending[0] if pending else None)
    if pending and pending[0]["status"] == "started" and pending[0]["stream_batch"] is None:
        say(f"finishing tick batch {pending[0]['batch']} that did not complete")
        finished = _process(spark, spec, None, None, now_ms, say, token, pending[0]["stream_id"])
        if finished is not None:
            done(finished)
    if not table_exists(spark, spec.input_table):
        raise DataflowError(f"pipeline {spec.name!r}: its input table {spec.input_table} does not exist yet")


def _result(spec: PipelineSpec, done: list[tuple[BatchRecord, Ledger]]) -> RunResult:
    """One result for these batches: their ledgers summed, named after the last."""
    total = Ledger()
    for _, ledger in done:
        for k in ("read", "accepted", "duplicates", "quarantined", "aggregated", "dropped_late", "panes", "retractions"):
            setattr(total, k, getattr(total, k) + getattr(ledger, k))
        for stage, counts in ledger.per_stage.items():
            agg = total.per_stage.setdefault(stage, {"panes": 0, "retractions": 0, "corrected_windows": 0})
            for k, v in counts.items():
                agg[k] = agg.get(k, 0) + v
    last = done[-1][0]
    return RunResult(f"{spec.name}-batch-{last.batch}", total.as_dict(), last.now)


class _Halted(Exception):
    """Raised in a stream batch that starts after the loop was told to stop: its input is
    left to the next run (the checkpoint does not commit it)."""


class _Stream:
    """The pipeline's streaming query over its input table (Structured Streaming's Delta
    source, `foreachBatch`), each of its batches through `_process` at `clock()`. Its
    checkpoint refuses a second concurrent query: that run is PipelineBusy. `lock` keeps a
    stream batch and a tick of the loop from running at once."""

    def __init__(self, spark, spec: PipelineSpec, say, token: str, clock: Callable[[], Instant], done: Callable,
                 first_read: FirstRead | None = None):
        self.spark, self.spec, self.say, self.token, self.clock, self.done = spark, spec, say, token, clock, done
        self.first_read = first_read
        self.batches = 0
        self.id: str | None = None
        self.failures: list[BaseException] = []
        self.lock = threading.Lock()
        self.halting = False
        self._started = threading.Event()
        self.checkpoint = checkpoint_path(spark, spec.name)
        self.busy = PipelineBusy(
            f"pipeline {spec.name!r} is already running elsewhere (its stream checkpoint {self.checkpoint} is "
            "taken); this run stopped, and the tables are as the other run leaves them"
        )

    def each(self, df: "DataFrame", stream_batch: int) -> None:
        self._started.wait(60)
        with self.lock:
            if self.halting:
                raise _Halted()
            self.batches += 1
            try:
                result = _process(self.spark, self.spec, df, stream_batch, self.clock(), self.say, self.token, self.id)
            except BaseException as exc:  # re-raised by `finish` as itself, not as a stream error
                if is_concurrent(exc) and not isinstance(exc, PipelineBusy):
                    exc = PipelineBusy(
                        f"pipeline {self.spec.name!r}: another run committed to the same table at the same moment "
                        f"({type(exc).__name__}); this run stopped, and what it had committed is exactly what "
                        "the other commits"
                    )
                self.failures.append(exc)
                raise exc
            if result is not None:
                self.done(result)

    def start(self, trigger: dict[str, Any]):
        """The query, started with this trigger (`availableNow` or `processingTime`)."""
        options = source_options(self.spark, self.checkpoint, self.spec.input_table, self.first_read, self.say)
        try:
            query = (
                self.spark.readStream.format("delta").option("ignoreChanges", "true").options(**options)
                .load(table_path(self.spark, self.spec.input_table))
                .writeStream.foreachBatch(self.each)
                .option("checkpointLocation", self.checkpoint)
                .trigger(**trigger)
                .start()
            )
        except Exception as exc:  # two runs creating the same checkpoint at once
            if is_concurrent(exc):
                raise self.busy from None
            raise
        self.id = str(query.id)
        self._started.set()
        return query

    def halt(self, query) -> None:
        """Stop the query once the batch under way (if any) has finished."""
        with self.lock:
            self.halting = True
        query.stop()

    def finish(self, query) -> None:
        """Wait for the query to end; a batch's failure is raised as itself."""
        from pyspark.errors import StreamingQueryException

        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            failures = [f for f in self.failures if not isinstance(f, _Halted)]
            if failures:
                raise failures[0] from None
            if is_concurrent(exc):
                raise self.busy from None
            if not self.halting:
                raise


def _begin(
    spark, spec: PipelineSpec, stream_batch: int | None, now_ms: Instant, token: str, stream_id: str | None,
) -> tuple[BatchRecord, dict | None] | None:
    """This batch's record, claimed (a retry resumes the unfinished batch with the next
    attempt), and the last finished one; None when there is nothing to do: the stream
    re-delivered a batch that already finished, or a tick at the last batch's time or with
    nothing due (`_idle_tick`)."""
    log = read_log(spark, spec)  # one read of dataflow_batches for the records and the stream
    known = log.records
    # a backfill's hold of a pipeline not yet live carries no live clock: not a batch to follow
    last_finished = next((r for r in known if r["status"] == "finished"), None) if log.ran_live else None
    latest = known[0] if known else None
    refuse_if_backfill_holds(spec, latest)
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
    if latest and latest["status"] == "started":
        if latest["stream_batch"] != stream_batch:
            raise DataflowError(
                f"pipeline {spec.name!r}: batch {latest['batch']} did not finish and is not the one "
                "the stream delivers now; its checkpoint and dataflow_batches disagree"
            )
        rec = BatchRecord(latest["batch"], stream_batch, latest["now_ms"], json.loads(latest["versions"]),
                          attempt=(latest.get("attempt") or 0) + 1, token=token, stream_id=stream_id,
                          skip=latest["skip"])
        if rec.attempt >= ATTEMPTS:
            raise DataflowError(f"pipeline {spec.name!r}: batch {rec.batch} was attempted {ATTEMPTS} times; giving up")
        claim(spark, spec, rec)
        return rec, last_finished
    if stream_batch is None and last_finished and now_ms == last_finished["now_ms"]:
        return None  # a tick at the same processing time fires nothing new
    number = next_batch(known)
    if last_finished and now_ms < last_finished["now_ms"]:
        raise DataflowError(
            f"--now {format_instant(now_ms)} is before the last batch's processing time "
            f"{format_instant(last_finished['now_ms'])}; processing time never moves back"
        )
    if stream_batch is None and last_finished and _idle_tick(spark, spec, last_finished, now_ms):
        return None
    names = [seen_table(spec)] + [state_table(s) for s in spec.stages]
    if last_finished is None:  # going live: the results backfills left are taken over (`_taken_over`)
        names += [s.output for s in spec.stages if s.keeps_results]
    rec = BatchRecord(number, stream_batch, now_ms, {n: table_version(spark, n) for n in names},
                      token=token, stream_id=stream_id)
    claim(spark, spec, rec)
    crash_point("started")
    return rec, last_finished


def _idle_tick(spark, spec: PipelineSpec, prev: dict, now_ms: Instant) -> bool:
    """Whether a tick at `now_ms` after the finished batch `prev` would change nothing but
    the batch log: the watermark estimator learns nothing from time passing, no later
    stage's watermark is held back below the input's (so none can move), and no key of any
    stage has a timer or watermark deadline due (`live_state.Wake`). Such a tick is not made, so an
    idle `--loop` costs no query at all while the state stays as it is (`next_wake`: read
    once per version) instead of a batch's commits; the next batch fires what comes due, as
    this tick would have."""
    estimator = spec.watermark()
    if prev.get("estimator_state"):
        estimator.load_state(json.loads(prev["estimator_state"]))
    learnt = estimator.to_state()
    watermarks = json.loads(prev["watermarks"])
    wm = estimator.update(Progress(batch_event_times=(), processing_time=now_ms))
    if wm != watermarks.get("input", BEGINNING_OF_TIME) or estimator.to_state() != learnt:
        return False
    if any(watermarks.get(s.output) != wm for s in spec.stages[1:]):
        return False
    wakes = [next_wake(spark, s) for s in spec.stages]
    return not any(w is not None and w.due(now_ms, wm) for w in wakes)


@dataclass
class _StageOutput:
    """One stage's output rows in this batch and the keys it ran (which the next stage's
    hold spans need: the keys it did not run hold where they stood)."""

    stage: StageSpec
    out: "DataFrame"
    idle: "DataFrame | None"  # one row: the holds of the keys it did not run (for a stage with one downstream)
    holds: list[HoldSpan] = field(default_factory=list)  # its hold spans, collected by `_write`
    idle_holds: list[Instant] = field(default_factory=list)  # `idle`'s holds, collected by `_write`


def _process(
    spark, spec: PipelineSpec, rows: "DataFrame | None", stream_batch, now_ms, say, token: str, stream_id,
) -> tuple[BatchRecord, Ledger] | None:
    """One micro-batch (see the module docstring); None when it had nothing to do."""
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
    else:
        with _readable(spec, rec):
            ledger = _compute(spark, spec, rows, rec, prev, txn, say)
    crash_point("before-finish")
    fence(spark, spec, rec)
    append_record(spark, spec, rec, "finished", ledger)
    return rec, ledger


def _compute(spark, spec: PipelineSpec, rows, rec: BatchRecord, prev: dict | None, txn, say) -> Ledger:
    """The batch's processing (steps 2 to 5 of the module docstring); sets the watermarks
    and estimator to record on `rec`, returns the ledger."""
    if rec.attempt:
        for name, version in rec.versions.items():
            read_as_of(spark, name, version)  # a retry whose versions are gone fails here, before any work
    prev_wms = json.loads(prev["watermarks"]) if prev else {}
    estimator = spec.watermark()
    if prev and prev.get("estimator_state"):
        estimator.load_state(json.loads(prev["estimator_state"]))
    old_wm = prev_wms.get("input", BEGINNING_OF_TIME)
    ledger = Ledger()
    els, arrived, cached = _accepted(spark, spec, rows, rec, old_wm, ledger, txn)
    new_wm = estimator.update(Progress(batch_event_times=arrived, processing_time=rec.now))
    say(f"batch {rec.batch} at {format_instant(rec.now)}: {ledger.read:,} rows read, {ledger.accepted:,} accepted, "
        f"{ledger.duplicates:,} duplicates, {ledger.quarantined:,} quarantined; watermark -> {format_watermark(new_wm)}")
    schedule = Schedule([Step((rec.batch,), rec.now, new_wm)], old_wm,
                        start_time=prev["now_ms"] if prev else BEGINNING_OF_TIME)
    rec.watermarks = _run_stages(spark, spec, els, schedule, rec, prev_wms, ledger, txn, say)
    if cached is not None:
        cached.unpersist()
    rec.estimator = estimator
    return ledger


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


def _accepted(spark, spec: PipelineSpec, rows, rec: BatchRecord, old_wm: Instant, ledger: Ledger, txn):
    """The batch's input as elements (None for a tick): selected, bad rows
    quarantined, deliveries of ids seen in earlier batches dropped as duplicates; the ids
    it accepts are remembered. Fills the ledger's input side. Also returns the least and
    greatest event time of the valid rows that arrived, duplicates included: what the
    watermark estimator observes (rows a backfill counted before the stream delivered them
    are duplicates then, and still tell how far event time has come); and the persisted
    DataFrame the elements are read from, to unpersist after the batch."""
    from pyspark.sql import functions as F

    if rows is None:
        crash_point("deduplicated")
        return None, (), None
    if spec.where:
        rows = rows.where(F.expr(spec.where))
    tagged = persist_uncompressed(tag_rows(spark, spec, rows))
    candidates = elements(spec, tagged)
    seen = read_as_of(spark, seen_table(spec), rec.versions[seen_table(spec)])
    if seen is not None:  # marked, not dropped, so one pass also gives the range of event times that arrived
        candidates = candidates.join(seen.select("event_id", F.lit(True).alias("_seen")), "event_id", "left")
    else:
        candidates = candidates.withColumn("_seen", F.lit(None).cast("boolean"))
    # Planned (the cache) and run (the job) compiled, in the session of the stream's rows:
    # the seen ids grow with the pipeline's history.
    with _holding(candidates.sparkSession, COMPILED_SQL):
        candidates = persist_uncompressed(candidates)
        stats = _one_job(read_counts(tagged), candidates.agg(
            F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi"),
            F.count_if(F.col("_seen").isNull()).alias("new")))
    ledger.read, ledger.quarantined = int(stats["read"]), int(stats["bad"])
    if ledger.quarantined:
        write_quarantine(spark, spec, quarantined(tagged), f"batch-{rec.batch}", txn("quarantine"))
    crash_point("quarantined")
    arrived = (stats["lo"], stats["hi"]) if stats["lo"] is not None else ()
    els = candidates.where(F.col("_seen").isNull()).drop("_seen")
    ledger.accepted = int(stats["new"])
    ledger.duplicates = ledger.read - ledger.quarantined - ledger.accepted
    remember_ids(spark, spec, els, rec.batch, txn(seen_table(spec)), old_wm if rec.batch % 100 == 0 else None,
                 unseen=True)
    tagged.unpersist()
    crash_point("deduplicated")
    return els, arrived, candidates


def _holding(spark, settings: dict[str, str]) -> ContextManager[None]:
    """These session settings (`session.MICRO_BATCH_SQL` for a run; `session.COMPILED_SQL`
    around a query over a table that grows with the pipeline's history) for what runs
    inside, except those the user's Spark configuration gives."""
    return session_settings(spark, unless_configured(spark, settings))


def _one_job(*aggregates: "DataFrame") -> dict[str, Any]:
    """The columns of these one-row aggregates, computed by one Spark job (their union)
    rather than one job each."""
    from pyspark.sql import functions as F

    names = [c for agg in aggregates for c in agg.columns]
    padded = [agg.select(*[F.col(c) if c in agg.columns else F.lit(None).alias(c) for c in names]) for agg in aggregates]
    rows = functools.reduce(lambda a, b: a.unionByName(b), padded).collect()
    return {c: rows[i][c] for i, agg in enumerate(aggregates) for c in agg.columns}


def _run_stages(spark, spec: PipelineSpec, els, schedule: Schedule, rec: BatchRecord, prev_wms: dict,
                ledger: Ledger, txn, say) -> dict[str, Instant]:
    """Every stage on this batch, each fed by the previous one's panes under its held-back
    watermark; writes panes, results and state. Returns the watermarks to record."""
    from pyspark.sql import functions as F

    watermarks = {"input": schedule.steps[-1].watermark}
    upstream: _StageOutput | None = None
    for stage in spec.stages:
        if upstream is None:
            arrivals = None if els is None else els.select(
                *stage.key_columns, "value", "event_ms", F.lit(False).alias("retraction"),
                F.array(F.lit(rec.batch).cast("bigint")).alias("seq"), F.lit(rec.now).cast("bigint").alias("at_ms"),
            )
        else:
            spans = _spans(upstream, schedule)
            schedule = downstream_schedule(schedule, spans, start=prev_wms.get(stage.output, BEGINNING_OF_TIME))
            panes = upstream.out.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn(
                "at_ms", F.col("emitted_at"))
            arrivals = elements_from_panes(panes, upstream.stage, stage, passthrough=("seq", "at_ms"))
        current = _run(spark, spec, stage, arrivals, schedule, rec, first=upstream is None)
        counts, (aggregated, dropped) = _write(spark, current, rec, txn)
        ledger.per_stage[stage.output] = counts
        ledger.panes += counts["panes"]
        ledger.retractions += counts["retractions"]
        if upstream is None:
            ledger.dropped_late = dropped
            ledger.aggregated = aggregated - dropped
        else:
            upstream.out.unpersist()
        upstream = current
        watermarks[stage.output] = schedule.steps[-1].watermark if schedule.steps else schedule.start
        say(f"  {stage.output}: {counts['panes']:,} panes, {counts['retractions']:,} retractions")
    if upstream is not None:
        upstream.out.unpersist()
    return watermarks


def _run(spark, spec: PipelineSpec, stage: StageSpec, arrivals, schedule: Schedule, rec: BatchRecord,
         first: bool) -> _StageOutput:
    """The stage on the keys that got data or have something due."""
    from pyspark.sql import functions as F

    keys = list(stage.key_columns)
    states = read_states(spark, stage, rec.versions[state_table(stage)])
    wm = schedule.steps[-1].watermark if schedule.steps else schedule.start
    latest_time = max((s.time for s in schedule.steps), default=rec.now)
    if arrivals is None:
        arrivals = _empty_arrivals(spark, stage, first)
    taken = None
    if states is None and stage.output in rec.versions:
        taken = _taken_over(spark, spec, stage, rec, schedule.start)
    if taken is not None:  # every key taken over runs, so that the watermark collects what it passed
        woken = taken
    elif states is not None:
        with_data = arrivals.select(*keys).distinct().withColumn("_arrived", F.lit(True))
        woken = states.join(with_data, keys, "left").where(
            due(latest_time, wm) | F.col("_arrived").isNotNull()).select(*keys, "state")
    else:
        key_types = ", ".join(f"`{c}` {arrivals.schema[c].dataType.simpleString()}" for c in keys)
        woken = spark.createDataFrame([], f"{key_types}, state string")
    out = persist_uncompressed(run_stage(arrivals, stage.strategy, schedule, KeyCodec(stage.key_columns),
                                         stage.value_type, states=woken, track_holds=stage is not spec.stages[-1]))
    idle = None
    if states is not None and stage is not spec.stages[-1]:  # keys that did not run hold where they stood
        ran = out.where("kind = 'state'").select(*keys)
        idle = states.where(F.col("hold") < F.lit(wm)).join(ran, keys, "left_anti").agg(
            F.collect_set("hold").alias("idle_holds"))
    return _StageOutput(stage, out, idle)


def _taken_over(spark, spec: PipelineSpec, stage: StageSpec, rec: BatchRecord, watermark: Instant):
    """Going live: the first batch's state for a stage whose results backfills wrote, those
    windows taken over (`execute.take_over`) with their accumulators rebuilt from the input
    the backfills counted (their seen ids; for a later stage, its upstream's standing panes
    as the first batch found them). None when there are no results to take over."""
    from pyspark.sql import functions as F

    results = read_as_of(spark, stage.output, rec.versions[stage.output])
    if results is None:
        return None
    standing = standing_panes(results, stage)
    counted = None
    if stage.strategy.accumulation.accumulates:
        index = spec.stages.index(stage)
        if index == 0:
            seen = read_as_of(spark, seen_table(spec), rec.versions[seen_table(spec)])
            if seen is not None:
                rows = tag_rows(spark, spec, read_table(spark, spec.input_table).where(F.expr(spec.where or "true")))
                counted = elements(spec, rows).join(seen.where("batch < 0").select("event_id"), "event_id", "left_semi")
        else:
            up = spec.stages[index - 1]
            up_results = read_as_of(spark, up.output, rec.versions.get(up.output, -1))
            if up_results is not None:
                counted = elements_from_panes(standing_panes(up_results, up), up, stage)
    return taken_over_states(standing, stage.strategy, KeyCodec(stage.key_columns), watermark, elements=counted)


def _empty_arrivals(spark, stage: StageSpec, first: bool):
    types = ", ".join(f"`{c}` string" for c in stage.key_columns)
    value_type = stage.input_type if not first else "string"
    return spark.createDataFrame(
        [], f"{types}, value {value_type}, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"
    )


def _spans(upstream: _StageOutput, schedule: Schedule) -> list[HoldSpan]:
    """Hold spans of the upstream stage in this batch: from the keys it ran, plus, for the
    keys it did not run, the hold stored after their last batch, carried over
    (`runners.keyed.carried_hold_spans`; keys at the same hold give the same spans)."""
    spans = list(upstream.holds)
    for hold in upstream.idle_holds:
        spans += carried_hold_spans(schedule, hold)
    return spans


def _write(spark, current: _StageOutput, rec: BatchRecord, txn) -> tuple[dict[str, int], tuple[int, int]]:
    """The stage's panes, results and state, each under this batch's idempotent key.
    Returns the pane counts and the elements the stage took and dropped as late, and keeps
    its hold spans and its idle keys' holds on `current` for the next stage (one Spark job
    for all)."""
    from pyspark.sql import functions as F

    stage, run_id = current.stage, f"batch-{rec.batch}"
    panes = current.out.where("kind = 'pane'")
    pane, stats = F.col("kind") == "pane", F.col("kind") == "stats"
    hold = F.col("kind") == "hold"
    idle = [] if current.idle is None else [current.idle]
    counts = _one_job(current.out.agg(
        F.count_if(pane & ~F.col("is_retraction")).alias("p"), F.count_if(pane & F.col("is_retraction")).alias("r"),
        F.min(F.when(pane, F.col("window_end"))).alias("end"),
        F.sum(F.when(stats, F.col("elements"))).alias("e"), F.sum(F.when(stats, F.col("dropped_elements"))).alias("d"),
        F.collect_list(F.when(hold, F.struct(*HOLD_FIELDS))).alias("h"),
    ), *idle)
    current.holds = [hold_span(h) for h in counts["h"]]
    current.idle_holds = sorted(counts.get("idle_holds") or [])
    emitted = counts["p"] + counts["r"] > 0
    if emitted:
        write_panes(spark, stage, panes, run_id, txn=txn(f"{stage.output}_panes"))
    crash_point(f"{stage.output}-panes")
    if stage.keeps_results and emitted:
        with _holding(spark, COMPILED_SQL):  # the results grow with history
            write_results(spark, stage, panes, run_id, txn=txn(stage.output), continues=True,
                          window_end_from=counts["end"])
    crash_point(f"{stage.output}-results")
    write_state(spark, stage, current.out, rec.batch, txn(state_table(stage)))
    crash_point(f"{stage.output}-state")
    return ({"panes": int(counts["p"]), "retractions": int(counts["r"]), "corrected_windows": 0},
            (int(counts["e"] or 0), int(counts["d"] or 0)))
