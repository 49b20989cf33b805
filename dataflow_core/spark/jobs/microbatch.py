"""`dataflow microbatch`: one (or a loop of) exactly-once micro-batches of a pipeline.

The parts, each in its own module:
- this one: the entry points and the clock (`--now`, or the machine's, never moving back);
- `live_stream`: new input from Structured Streaming's Delta source, an available-now
  trigger for one run, or under `--loop` one long-running query with a processing-time
  trigger; a batch with no new input (a "tick") still fires due timers and watermark panes;
- `live_sequencer`: which batch comes next and one batch from its claim in
  `dataflow_batches` to its `finished` record, fenced and idempotent (exactly once);
- `live_input`: quarantine, duplicates by event id, the ids remembered;
- `stage_chain` and `live_stage`: every stage on its woken keys, and its writes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import BUSY_EXIT, DataflowError, PipelineBusy
from dataflow_core.model.time import Instant, format_instant
from dataflow_core.options import parse_time
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.pipelines.check import with_value_types
from dataflow_core.spark.execute import python_workers
from dataflow_core.spark.input.going_live import FirstRead
from dataflow_core.spark.jobs.crash import CRASH_ENV
from dataflow_core.spark.jobs.live_sequencer import Done, before_input, run_batch, warm_tables
from dataflow_core.spark.jobs.live_stream import FeedNotYet, Stream
from dataflow_core.spark.platform.delta import settings_unless_configured
from dataflow_core.spark.platform.session import MICRO_BATCH_SQL, warehouse_root
from dataflow_core.spark.sinks.batches import records
from dataflow_core.spark.sinks.definitions import record_definitions, refuse_changed_definitions
from dataflow_core.spark.sinks.loop_lock import LoopLock
from dataflow_core.spark.sinks.runs import Ledger, RunResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BUSY_EXIT", "CRASH_ENV", "PipelineBusy", "run_loop", "run_microbatch"]

FUTURE_TOLERANCE = 5 * 60 * 1000
"""How far ahead of this machine's clock `--now` may be (clocks of machines differ)."""

def run_microbatch(
    spark: "SparkSession",
    pipeline: str,
    now: str | dt.datetime | None = None,
    progress: Callable[[str], None] | None = None,
    first_read: FirstRead | None = None,
    max_duplicate_share: float | None = None,
) -> RunResult:
    """Every input row committed since the last batch, as one or more micro-batches (a
    tick when there is none and something is due). Raises PipelineBusy when another run
    has the pipeline locked. Its queries run interpreted (`session.MICRO_BATCH_SQL`).
    `first_read`: how the stream reads while it has no checkpoint (`input.going_live`);
    `max_duplicate_share`: the operator's override of the pipeline's, for this run only (a
    batch refused for its duplicates, accepted as it is)."""
    with settings_unless_configured(spark, MICRO_BATCH_SQL):
        return _microbatch(spark, pipeline, now, progress, first_read, max_duplicate_share)


def _microbatch(spark, pipeline: str, now, progress, first_read: FirstRead | None = None,
                max_duplicate_share: float | None = None) -> RunResult:
    spec = with_value_types(pipeline, warehouse_root(spark))
    if max_duplicate_share is not None:
        spec = dataclasses.replace(spec, max_duplicate_share=max_duplicate_share)
    refuse_changed_definitions(spark, spec)
    say = progress or (lambda _m: None)
    clock = int(time.time() * 1000)
    if now is None:
        now_ms = _processing_time(spark, spec, clock, say)
    else:
        now_ms = parse_time(now, "--now")
        if now_ms > clock + FUTURE_TOLERANCE:
            raise DataflowError(
                f"--now {format_instant(now_ms)} is in the future (the clock says {format_instant(clock)}); "
                "processing time never moves back, so every later batch would have to wait for it"
            )
    token = uuid.uuid4().hex
    python_workers.warm(spark)  # while the stream plans its batch
    done: list[Done] = []
    _record(done.append, before_input(spark, spec, now_ms, say, token))
    stream = Stream(spark, spec, say, token, lambda: now_ms, done.append, first_read)
    try:
        stream.finish(stream.start({"availableNow": True}))
    except FeedNotYet:  # read on once skipping change commits (`live_stream.change_options`)
        stream = Stream(spark, spec, say, token, lambda: now_ms, done.append, first_read)
        stream.finish(stream.start({"availableNow": True}))
    if not stream.batches:
        _record(done.append, run_batch(spark, spec, None, None, now_ms, say, token, stream.id))
    if not done:
        last = records(spark, spec)[0]
        say(f"nothing new since batch {last.batch} at {format_instant(last.now_ms)} and nothing due at "
            f"{format_instant(now_ms)}: nothing to do")
        return RunResult(f"{spec.name}-batch-{last.batch}", Ledger().as_dict(), last.now_ms)
    record_definitions(spark, spec)
    return _result(spec, done)


def _processing_time(spark, spec: PipelineSpec, clock: Instant, say: Callable[[str], None]) -> Instant:
    """A batch's processing time from this machine's clock: the clock, or the last finished
    batch's processing time when that is ahead of it. A worker whose clock ran ahead records a
    batch in the future, and processing time never moves back; refusing would stop every
    correctly clocked worker until the clock caught up, so they carry on at that time (its
    timers wait for it) and say why."""
    last = next((r for r in records(spark, spec) if r.status == "finished"), None)
    if last is None or last.now_ms <= clock:
        return clock
    ahead = (last.now_ms - clock) / 1000
    say(f"batch {last.batch} ran at processing time {format_instant(last.now_ms)}, {ahead:,.0f} s ahead of "
        f"this machine's clock ({format_instant(clock)}): a worker's clock runs ahead (or this one's behind; check "
        "NTP). This batch runs at that time, since processing time never moves back; timers wait for it")
    return last.now_ms


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
    Ctrl-C), letting the batch under way finish; while another run has the pipeline locked it
    waits and tries again. Its queries run interpreted (`session.MICRO_BATCH_SQL`)."""
    with settings_unless_configured(spark, MICRO_BATCH_SQL):
        _loop(spark, pipeline, every_s, progress, on_result, stop, first_read)


def _loop(spark, pipeline: str, every_s: float, progress, on_result, stop, first_read=None) -> None:
    spec = with_value_types(pipeline, warehouse_root(spark))
    refuse_changed_definitions(spark, spec)  # a definition is code: edited, the loop is started again
    say = progress or (lambda _m: None)
    report = on_result or (lambda _r: None)
    stop = stop or threading.Event()
    latest = [_processing_time(spark, spec, int(time.time() * 1000), say)]

    def clock() -> Instant:  # never back, whatever the machine's clock does
        latest[0] = max(latest[0], int(time.time() * 1000))
        return latest[0]

    def handle(done: Done) -> None:
        record_definitions(spark, spec)  # once per table: the tables' first batch made them
        warm_tables(spark, spec)  # the next batch's, while the loop waits for its trigger
        report(_result(spec, [done]))

    python_workers.warm(spark)
    refused = "this loop did not start (one loop per pipeline): stop that one first"
    with LoopLock(spark, spec.name, "microbatch --loop", refused, say) as lock:  # `dataflow reset` refuses meanwhile
        _loop_batches(spark, spec, every_s, say, handle, stop, clock, first_read, lock)


def _loop_batches(spark, spec: PipelineSpec, every_s: float, say, handle, stop, clock, first_read,
                  lock: LoopLock) -> None:
    """`_loop`'s batches, until `stop` is set; each checks first that the loop still holds
    its lock (LockLost, never retried: another writer owns the pipeline now)."""
    while not stop.is_set():
        token = uuid.uuid4().hex
        try:
            lock.check()
            _record(handle, before_input(spark, spec, clock(), say, token))
            stream = Stream(spark, spec, say, token, clock, handle, first_read, before_batch=lock.check)
            query = stream.start({"processingTime": f"{round(every_s * 1000)} milliseconds"})
            lock.on_lost = lambda: stream.halt(query)  # no stream batch planned once the lock is gone
            try:
                seen = 0
                while query.isActive and not stop.wait(every_s):
                    if query.status["isTriggerActive"]:
                        continue  # the stream is reading or planning a batch: no tick before it
                    with stream.lock:
                        if stream.batches == seen and not stream.failures:
                            lock.check()
                            _record(handle, run_batch(spark, spec, None, None, clock(), say, token, stream.id))
                        seen = stream.batches
            finally:
                stream.halt(query)
            stream.finish(query)
        except PipelineBusy as exc:
            say(f"{exc}; trying again in {every_s:g} s")
            stop.wait(every_s)
        except FeedNotYet:
            continue  # started again at once, skipping change commits (`live_stream.change_options`)


def _record(handle: Callable[[Done], None], done: Done | None) -> None:
    if done is not None:
        handle(done)


def _result(spec: PipelineSpec, done: list[Done]) -> RunResult:
    """One result for these batches: their ledgers summed, named after the last."""
    total = functools.reduce(Ledger.plus, (ledger for _, ledger in done), Ledger())
    last = done[-1][0]
    return RunResult(f"{spec.name}-batch-{last.batch}", total.as_dict(), last.now)
