"""The stream adapter of `dataflow microbatch`: new input from Structured Streaming's Delta
source, each stream batch one micro-batch (`live_sequencer.run_batch`) through `foreachBatch`.

The stream's checkpoint remembers which table versions were consumed and refuses a second
concurrent query on it (MillWheel's sequencer, with `dataflow_batches`), and a batch that
crashed is delivered again, with the same rows, to the next run.

An input table with its change data feed on (`delta.enableChangeDataFeed = true`) is read as
its changes (`readChangeFeed`): deletes and updates are live events (`input.changes`,
`live_input`). Without it, commits that change or remove rows (an UPDATE, DELETE, upsert,
overwrite or `replaceWhere`) are skipped (`skipChangeCommits`): what they changed is not a
live event, a `dataflow backfill` over its range applies it, and the first micro-batch says
once how to turn the feed on.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from dataflow_core.errors import PipelineBusy, is_concurrent
from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.going_live import FirstRead, source_options
from dataflow_core.spark.input.changes import ENABLE_HINT, FEED_PROPERTY, feed_enabled
from dataflow_core.spark.jobs.live_sequencer import run_batch
from dataflow_core.spark.platform.tables import table_path
from dataflow_core.spark.sinks.batches import checkpoint_path, records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class FeedNotYet(Exception):
    """The input's change data feed was turned on after the version the stream goes on from
    (Delta: `DELTA_MISSING_CHANGE_DATA`): the stream is started again skipping change commits
    (`change_options`) until it has read past the version that turned the feed on."""


class _Halted(Exception):
    """Raised in a stream batch that starts after the loop was told to stop: its input is
    left to the next run (the checkpoint does not commit it)."""


class Stream:
    """The pipeline's streaming query over its input table (Structured Streaming's Delta
    source, `foreachBatch`), each of its batches a micro-batch (`live_sequencer.run_batch`) at `clock()`. Its
    checkpoint refuses a second concurrent query: that run is PipelineBusy. `lock` keeps a
    stream batch and a tick of the loop from running at once; `before_batch` raises to stop
    a batch before it claims anything (a loop that lost its lock)."""

    def __init__(self, spark, spec: PipelineSpec, say, token: str, clock: Callable[[], Instant], done: Callable,
                 first_read: FirstRead | None = None, before_batch: Callable[[], None] = lambda: None):
        self.spark, self.spec, self.say, self.token, self.clock, self.done = spark, spec, say, token, clock, done
        self.first_read, self.before_batch = first_read, before_batch
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
                self.before_batch()  # a loop's lock still held (`sinks.loop_lock`), else it stops here
                result = run_batch(self.spark, self.spec, df, stream_batch, self.clock(), self.say, self.token, self.id)
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
        options.update(change_options(self.spark, self.spec, self.say))
        try:
            query = (
                self.spark.readStream.format("delta").options(**options)
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
            if MISSING_CHANGE_DATA in str(exc):
                _before_feed.add(self.spec.name)
                self.say(f"input table {self.spec.input_table} records its change data feed only since a version after "
                         "the one this pipeline's stream goes on from: reading on skipping change commits until it "
                         "reaches it (changes committed before then need a backfill over their range)")
                raise FeedNotYet() from None
            if is_concurrent(exc):
                raise self.busy from None
            if not self.halting:
                raise


_told: set[str] = set()
"""Pipelines this process has told that their input has no change data feed."""
_before_feed: set[str] = set()
"""Pipelines whose stream this process found behind the version their input's feed starts at."""
MISSING_CHANGE_DATA = "DELTA_MISSING_CHANGE_DATA"


def change_options(spark, spec: PipelineSpec, say: Callable[[str], None]) -> dict[str, str]:
    """How the stream reads changed and removed rows: as the change data feed when the input
    table records it, else skipping the commits that change rows, and saying once (a
    pipeline's first micro-batch, or this process's first of it) that a backfill applies them."""
    if spec.name in _before_feed:
        _before_feed.discard(spec.name)  # this one query: the next reads the feed again
        return {"skipChangeCommits": "true"}
    if feed_enabled(spark, spec.input_table):
        return {"readChangeFeed": "true"}
    if spec.name not in _told and not any(r.status == "finished" for r in records(spark, spec)):
        say(f"input table {spec.input_table} has no change data feed: rows deleted or updated there after they "
            f"were counted stay counted until a `dataflow backfill` over their range (and rows an upsert or "
            f"overwrite adds are read by that backfill only); to correct them live, turn the feed on: "
            + ENABLE_HINT.format(table=spec.input_table, prop=FEED_PROPERTY))
    _told.add(spec.name)
    return {"skipChangeCommits": "true"}
