"""One stage of a micro-batch: the keys it wakes, and what it writes.

A stage runs only on the keys that got data or have a timer or watermark deadline due (found
through the state table's wake-up columns, `live_state.due`), each resumed from its stored
state. A pipeline's first micro-batch takes over the windows backfills left in its results
(`execute.take_over`). The stage's panes, results and state are each written under the
batch's idempotent key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout
from dataflow_core.runners.schedule import Schedule
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.execute.take_over import taken_over_states
from dataflow_core.spark.input.rows import elements, tag_rows
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.jobs.stage_chain import StageCounts, StageOutput
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.concurrent_writes import write_at_once
from dataflow_core.spark.platform.delta import Txn, read_as_of, settings_unless_configured
from dataflow_core.spark.platform.session import COMPILED_SQL
from dataflow_core.spark.platform.tables import read_table
from dataflow_core.spark.sinks.batch_records import BatchRecord
from dataflow_core.spark.sinks.pipeline_lock import input_key
from dataflow_core.spark.sinks.live_state import due, read_states, state_table, write_state
from dataflow_core.spark.sinks.panes import write_panes
from dataflow_core.spark.sinks.results import standing_panes, write_results
from dataflow_core.spark.sinks.seen_ids import seen_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def run_woken_keys(spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, arrivals: "DataFrame | None",
                   schedule: Schedule, rec: BatchRecord, first: bool) -> StageOutput:
    """The stage on the keys that got data or have something due, from their state as of
    the version the batch recorded."""
    from pyspark.sql import functions as F

    keys = list(stage.key_columns)
    states = read_states(spark, stage, rec.versions[state_table(stage)])
    wm = schedule.steps[-1].watermark if schedule.steps else schedule.start
    latest_time = max((s.time for s in schedule.steps), default=rec.now)
    if arrivals is None:
        arrivals = _no_arrivals(spark, stage, first)
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
    last = stage is spec.stages[-1]
    out = persist_uncompressed(run_stage(arrivals, stage.strategy, schedule, KeyCodec(stage.key_columns),
                                         stage.value_type, states=woken, track_holds=not last))
    idle = None
    if states is not None and not last:  # keys that did not run hold the next stage where they stood
        ran = out.where("kind = 'state'").select(*keys)
        idle = states.where(F.col("hold") < F.lit(wm)).join(ran, keys, "left_anti").agg(
            F.collect_set("hold").alias("idle_holds"))
    return StageOutput(stage, out, idle)


def write_stage(spark: "SparkSession", current: StageOutput, counts: StageCounts, rec: BatchRecord,
                txn: Callable[[str], Txn]) -> None:
    """The stage's panes (when it emitted any), results and state, each under this batch's
    idempotent key, written at once (`platform.concurrent_writes`)."""
    stage, run_id = current.stage, f"batch-{rec.batch}"
    panes = current.out.where("kind = 'pane'")
    emitted = counts.panes + counts.retractions > 0

    def pane_log(session: "SparkSession") -> None:
        if emitted:
            write_panes(session, stage, panes, run_id, txn=txn(layout.panes(stage)))
        crash_point(f"{stage.output}-panes")

    def results(session: "SparkSession") -> None:
        if stage.keeps_results and emitted:
            with settings_unless_configured(session, COMPILED_SQL):  # the results grow with history
                write_results(session, stage, panes, run_id, txn=txn(layout.results(stage)), continues=True,
                              window_end_from=counts.first_window_end)
        crash_point(f"{stage.output}-results")

    def state(session: "SparkSession") -> None:
        write_state(session, stage, current.out, rec.batch, txn(state_table(stage)))
        crash_point(f"{stage.output}-state")

    writes = [results] if emitted and stage.keeps_results else []
    writes += [state, *([pane_log] if emitted else [])]
    write_at_once(spark, writes)
    for skipped in {pane_log, results} - set(writes):
        skipped(spark)  # writes nothing: its crash point only


def _taken_over(spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, rec: BatchRecord,
                watermark: Instant) -> "DataFrame | None":
    """Going live: the first batch's state for a stage whose results backfills wrote, those
    windows taken over (`execute.take_over`) with their accumulators rebuilt from the input
    the backfills counted (their seen ids; for a later stage, its upstream's standing panes
    as the first batch found them). None when there are no results to take over."""
    from pyspark.sql import functions as F

    results = read_as_of(spark, layout.results(stage), rec.versions[layout.results(stage)])
    if results is None:
        return None
    standing = standing_panes(results, stage)
    counted = None
    if stage.strategy.accumulation.accumulates:
        index = spec.stages.index(stage)
        if index == 0:
            seen = read_as_of(spark, seen_table(spec), rec.versions[seen_table(spec)])
            if seen is not None:
                rows = tag_rows(spark, spec, _pinned_input(spark, spec, rec).where(F.expr(spec.where or "true")))
                counted = elements(spec, rows).join(seen.where("batch < 0").select("event_id"), "event_id", "left_semi")
        else:
            up = spec.stages[index - 1]
            up_results = read_as_of(spark, layout.results(up), rec.versions.get(layout.results(up), -1))
            if up_results is not None:
                counted = elements_from_panes(standing_panes(up_results, up), up, stage)
    return taken_over_states(standing, stage.strategy, KeyCodec(stage.key_columns), watermark, elements=counted)


def _pinned_input(spark: "SparkSession", spec: PipelineSpec, rec: BatchRecord) -> "DataFrame":
    """The input as the going-live batch's claim found it (its `versions`), so that a retry,
    or a commit to the input between the claim and this read, rebuilds the same
    accumulators; the latest for a claim made before the input was pinned."""
    version = rec.versions.get(input_key(spec.name))
    pinned = read_as_of(spark, spec.input_table, version) if version is not None else None
    return pinned if pinned is not None else read_table(spark, spec.input_table)


def _no_arrivals(spark: "SparkSession", stage: StageSpec, first: bool) -> "DataFrame":
    """A tick's arrivals: none, in the schema the stage reads."""
    types = ", ".join(f"`{c}` string" for c in stage.key_columns)
    value_type = stage.input_type if not first else "string"
    return spark.createDataFrame(
        [], f"{types}, value {value_type}, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"
    )
