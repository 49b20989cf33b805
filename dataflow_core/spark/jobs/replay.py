"""`dataflow backfill --replay`: a range of input in ingest-time order, as a live pipeline
would have seen it (the paper's figure 11).

The range's input is cut into micro-batches of `batch_interval` by ingest time; the
pipeline's watermark estimator is updated after each batch from what it observes (one
aggregation per batch, `observe`; an estimator observing PENDING is also told the least
event time still to replay, the range being bounded) and the processing time set to each
batch's end; every stage runs per key against that schedule (later stages under the
watermark their upstream's holds leave), and the pane history a live pipeline would have
emitted is written, with the results it leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.model.time import format_watermark
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, BatchSummary, Progress, observes_pending, pending_after
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout
from dataflow_core.runners.schedule import Schedule, Step
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.input.rows import EventRange
from dataflow_core.spark.jobs.observe import summary_columns, summary_of
from dataflow_core.spark.jobs.range_input import read_range
from dataflow_core.spark.jobs.stage_chain import StageCounts, StageOutput, first_arrivals, run_chain
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.sinks.panes import write_panes
from dataflow_core.spark.sinks.results import write_results
from dataflow_core.spark.sinks.runs import Ledger, Run, record_watermarks
from dataflow_core.spark.sinks.seen_ids import remember_ids, seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def replay_range(spark: "SparkSession", spec: PipelineSpec, span: EventRange, interval: int, run: Run,
                 say: Callable[[str], None], version: int | None = None) -> Ledger:
    """The range's input (as of `version`, the one the run's lock pinned) replayed in
    arrival order; returns the ledger."""
    ledger = Ledger()
    read = read_range(spark, spec, span, span, run, ledger, say, version)
    try:
        _replay(spark, spec, interval, run, say, ledger, read.elements)
    except BaseException:
        read.wait(failed=True)
        raise
    read.wait()
    read.cached.unpersist()
    return ledger


def _replay(spark: "SparkSession", spec: PipelineSpec, interval: int, run: Run, say: Callable[[str], None],
            ledger: Ledger, els: "DataFrame") -> None:
    """`replay_range` once its input is read: `els`, its elements."""
    from pyspark.sql import functions as F

    unique = ledger.accepted
    if not unique:
        say("no accepted rows in the range; nothing to replay")
        return
    # the ids it counted: a micro-batch taking the pipeline live later takes its windows over
    remember_ids(spark, spec, els, -1, (f"dataflow:{spec.name}:{seen_table(spec)}:{run.run_id}", 0))
    t0_row = els.agg(F.min("ingest_ms").alias("t0"), F.max("ingest_ms").alias("t1")).first()
    t0 = t0_row["t0"] - t0_row["t0"] % interval
    batches = els.withColumn("batch", F.floor((F.col("ingest_ms") - F.lit(t0)) / F.lit(interval)).cast("bigint"))
    estimator = spec.watermark()
    # one row per batch: its least event time and its summary for the estimator (`observe`)
    per_batch = batches.groupBy("batch").agg(F.min("event_ms").alias("lo"), *summary_columns(estimator)).collect()
    summaries = {r["batch"]: summary_of(r, estimator) for r in per_batch}
    last = (t0_row["t1"] - t0) // interval
    # the input is the whole range, read first: a PENDING estimator learns what is left to replay
    pending = pending_after({r["batch"]: r["lo"] for r in per_batch}, last) if observes_pending(estimator) else None
    steps = []
    for b in range(last + 1):
        at = t0 + (b + 1) * interval
        wm = estimator.update(Progress(
            batch_summary=summaries.get(b, BatchSummary()), processing_time=at, max_skew=spec.max_skew,
            pending_event_times=() if pending is None else pending[b], bounded=pending is not None))
        steps.append(Step((b,), at, wm))
    schedule = Schedule(steps, BEGINNING_OF_TIME)
    say(f"{unique:,} unique events in {len(steps):,} micro-batches of {interval // 1000}s; "
        f"watermark ends at {format_watermark(steps[-1].watermark)}")
    first = spec.stages[0]
    arrivals = first_arrivals(batches, first, F.array(F.col("batch")),
                              F.lit(t0) + (F.col("batch") + 1) * F.lit(interval))

    def run_one(stage: StageSpec, stage_arrivals, stage_schedule: Schedule, _first: bool) -> StageOutput:
        return StageOutput(stage, persist_uncompressed(run_stage(
            stage_arrivals, stage.strategy, stage_schedule, KeyCodec(stage.key_columns), stage.value_type,
            track_holds=stage is not spec.stages[-1])))

    def write(current: StageOutput, counts: StageCounts, stage_schedule: Schedule) -> None:
        stage = current.stage
        record_watermarks(spark, run, stage.output,
                          [(n, s.time, s.watermark) for n, s in enumerate(stage_schedule.steps)])
        panes = current.out.where("kind = 'pane'")
        written = write_panes(spark, stage, panes, run.run_id)
        if stage.keeps_results:
            write_results(spark, stage, panes, run.run_id,
                          txn=(f"dataflow:{run.pipeline}:{layout.results(stage)}:{run.run_id}", 0))
        say(f"stage {stage.output}: {counts.panes:,} panes and {counts.retractions:,} retractions "
            f"({written:,} new in {layout.panes(stage)})")

    run_chain(spec, arrivals, schedule, run_one, write, ledger)
