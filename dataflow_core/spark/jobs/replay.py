"""`dataflow backfill --replay`: a range of input in ingest-time order, as a live pipeline
would have seen it (the paper's figure 11).

The range's input is cut into micro-batches of `batch_interval` by ingest time; the
pipeline's watermark estimator is updated after each batch and the processing time set to
each batch's end; every stage runs per key against that schedule (later stages under the
watermark their upstream's holds leave), and the pane history a live pipeline would have
emitted is written, with the results it leaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.model.time import format_watermark
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.runners.keyed import Schedule, Step, downstream_schedule
from dataflow_core.spark.execute.keyed_stage import HOLD_FIELDS, KeyCodec, hold_span, run_stage
from dataflow_core.spark.input.rows import EventRange
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.jobs.range_input import read_range
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.sinks.panes import write_panes
from dataflow_core.spark.sinks.results import write_results
from dataflow_core.spark.sinks.runs import Ledger, Run, record_watermarks
from dataflow_core.spark.sinks.seen_ids import remember_ids, seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def replay_range(spark: "SparkSession", spec: PipelineSpec, span: EventRange, interval: int, run: Run,
                 say: Callable[[str], None], version: int | None = None) -> Ledger:
    """The range's input (as of `version`, the one the run's hold pinned) replayed in
    arrival order; returns the ledger."""
    from pyspark.sql import functions as F

    ledger = Ledger()
    els, cached = read_range(spark, spec, span, span, run, ledger, say, version)
    unique = ledger.accepted
    if not unique:
        say("no accepted rows in the range; nothing to replay")
        cached.unpersist()
        return ledger
    # the ids it counted: a micro-batch taking the pipeline live later takes its windows over
    remember_ids(spark, spec, els, -1, (f"dataflow:{spec.name}:{seen_table(spec)}:{run.run_id}", 0))
    t0_row = els.agg(F.min("ingest_ms").alias("t0"), F.max("ingest_ms").alias("t1")).first()
    t0 = t0_row["t0"] - t0_row["t0"] % interval
    batches = els.withColumn("batch", F.floor((F.col("ingest_ms") - F.lit(t0)) / F.lit(interval)).cast("bigint"))
    stats = {
        r["batch"]: (r["lo"], r["hi"])
        for r in batches.groupBy("batch").agg(F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi")).collect()
    }
    last = (t0_row["t1"] - t0) // interval
    estimator = spec.watermark()
    steps = []
    for b in range(last + 1):
        at = t0 + (b + 1) * interval
        lo_hi = stats.get(b)
        wm = estimator.update(Progress(batch_event_times=lo_hi or (), processing_time=at))
        steps.append(Step((b,), at, wm))
    schedule = Schedule(steps, BEGINNING_OF_TIME)
    say(f"{unique:,} unique events in {len(steps):,} micro-batches of {interval // 1000}s; "
        f"watermark ends at {format_watermark(steps[-1].watermark)}")
    record_watermarks(spark, run, spec.stages[0].output, [(n, s.time, s.watermark) for n, s in enumerate(steps)])
    first = spec.stages[0]
    arrivals = batches.select(
        *first.key_columns, "value", "event_ms", F.lit(False).alias("retraction"),
        F.array(F.col("batch")).alias("seq"), (F.lit(t0) + (F.col("batch") + 1) * F.lit(interval)).alias("at_ms"),
    )
    out = persist_uncompressed(run_stage(arrivals, first.strategy, schedule, KeyCodec(first.key_columns),
                                         first.value_type, track_holds=len(spec.stages) > 1))
    totals = out.where("kind = 'stats'").agg(F.sum("elements").alias("n"), F.sum("dropped_elements").alias("d")).first()
    ledger.dropped_late = int(totals["d"] or 0)
    ledger.aggregated = int(totals["n"] or 0) - ledger.dropped_late
    _write_history(spark, first, out, run, ledger, say)
    previous, prev_stage = out, first
    for stage in spec.stages[1:]:
        spans = [hold_span(r) for r in previous.where("kind = 'hold'").select(*HOLD_FIELDS).collect()]
        schedule = downstream_schedule(schedule, spans)
        record_watermarks(spark, run, stage.output, [(n, s.time, s.watermark) for n, s in enumerate(schedule.steps)])
        panes = previous.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn("at_ms", F.col("emitted_at"))
        mapped = elements_from_panes(panes, prev_stage, stage, passthrough=("seq", "at_ms"))
        out2 = persist_uncompressed(run_stage(mapped, stage.strategy, schedule, KeyCodec(stage.key_columns),
                                              stage.value_type, track_holds=stage is not spec.stages[-1]))
        _write_history(spark, stage, out2, run, ledger, say)
        previous.unpersist()
        previous, prev_stage = out2, stage
    previous.unpersist()
    cached.unpersist()
    return ledger


def _write_history(spark, stage: StageSpec, out: "DataFrame", run: Run, ledger: Ledger, say) -> None:
    from pyspark.sql import functions as F

    panes = out.where("kind = 'pane'")
    counts = panes.agg(F.count_if(~F.col("is_retraction")).alias("p"), F.count_if("is_retraction").alias("r")).first()
    written = write_panes(spark, stage, panes, run.run_id)
    if stage.keeps_results:
        write_results(spark, stage, panes, run.run_id, txn=(f"dataflow:{run.pipeline}:{stage.output}:{run.run_id}", 0))
    p, r = int(counts["p"]), int(counts["r"])
    ledger.per_stage[stage.output] = {"panes": p, "retractions": r, "corrected_windows": 0}
    ledger.panes += p
    ledger.retractions += r
    say(f"stage {stage.output}: {p:,} panes and {r:,} retractions ({written:,} new in {stage.output}_panes)")
