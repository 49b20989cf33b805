"""A batch backfill's corrections of one stage: what changed, emitted by the model, written.

1. The diff (Spark SQL, a comparison only): the recomputed windows against the stage's
   results, keeping windows that are new, changed (value or timestamp) or gone.
2. The corrections (`execute.corrections`, the model per key in executors): each changed
   window's next pane after its standing one, retractions in retracting mode. The plan
   (`sinks.corrections_plan`) is committed before any write: the changed windows, or with
   live state the corrections themselves, so that a resumed run applies the same ones. A
   first stage that had no results and no live state when the run took its lock stores no
   plan: every window is a change, computed from the input version the lock pinned, which
   the lock's record already says (so a resumed run, finding the results its first attempt
   wrote, still recomputes them all; and a first backfill commits, then deletes, no plan).
3. The writes: pane log, results (the window's total), where micro-batches keep live state
   for the pipeline the state (the corrected windows' accumulators rebuilt from the
   backfill's input, so later batches carry on from the corrected figures), and the seen ids
   (the event ids the backfill counted, so a row it counted that the stream has yet to
   deliver is a duplicate then, not counted twice; before the pipeline goes live, they also
   tell its first micro-batch which input the windows it takes over hold).

Corrections are paced by the live pipeline: their pane metadata follows the stage's live
watermark when micro-batches run it (the end of time otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout
from dataflow_core.spark.execute.corrections import STANDING, run_corrections
from dataflow_core.spark.execute.keyed_stage import KeyCodec
from dataflow_core.spark.input.rows import EventRange
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.concurrent_writes import write_at_once
from dataflow_core.spark.platform.delta import table_version
from dataflow_core.spark.platform.tables import table_exists
from dataflow_core.spark.sinks.corrections_plan import (
    ChangedWindows, Plan, RecomputeFromInput, StoredCorrections, read_plan, write_changes, write_plan,
)
from dataflow_core.spark.sinks.live_state import read_states, state_table, write_state
from dataflow_core.spark.sinks.panes import panes_table, write_panes
from dataflow_core.spark.sinks.results import current_results, result_rows, standing_panes, write_results
from dataflow_core.spark.sinks.runs import Ledger, Run
from dataflow_core.spark.sinks.seen_ids import overlapping, remember_ids, seen_table, with_owned_span

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class StageOutcome:
    """What `correct_stage` did for a stage: `planned`, the run has a plan of corrections
    for it (to forget once the run finished); `results`, with `plan_only`, the stage's
    corrected results rows (`sinks.results.result_rows`, `_delete` on a window the
    corrections delete; persisted, for the caller to unpersist), which a later stage of a
    plan is planned from, since the plan writes none."""

    planned: bool
    results: "DataFrame | None" = None


@dataclass(frozen=True)
class Correcting:
    """What the corrections of every stage of one run share: the run, its ledger (which each
    stage adds its counts to), its progress, the stages' live watermarks (None: no
    micro-batch ran the pipeline) and whether it only plans."""

    spark: "SparkSession"
    spec: PipelineSpec
    run: Run
    ledger: Ledger
    say: Callable[[str], None]
    live_watermarks: dict[str, Instant] | None = None
    plan_only: bool = False

    def watermark(self, stage: StageSpec) -> Instant:
        """The watermark the stage's corrections are paced by (see the module docstring)."""
        marks = self.live_watermarks
        return END_OF_TIME if marks is None else marks.get(stage.output, END_OF_TIME)


def correct_stage(
    c: Correcting, stage: StageSpec, finals: "DataFrame", elements: "DataFrame", owned: EventRange | None,
    input_version: int | None = None, had_results: bool = True,
) -> StageOutcome:
    """Correct `stage` to `finals` (its recomputed windows, `batch.FINAL_COLUMNS`) for the
    windows starting in `owned` (all windows when None); `elements` is the stage's input,
    `input_version` the version of the pipeline's input table they come from (first stage;
    a later stage's input is its upstream's results, which this run wrote before it),
    `had_results` whether the stage had a results table when the run took its lock.
    With `c.plan_only`: store the plan and count what it would do, write nothing else."""
    spark, run = c.spark, c.run
    watermark = c.watermark(stage)
    live = c.live_watermarks is not None and table_exists(spark, state_table(stage))
    plan = read_plan(spark, stage, run.run_id) if run.resumed else None  # a new run id has no plan yet
    # (a plan being applied is a resumed run with a stored plan, whatever the stage had)
    if plan is None and not (had_results or live or c.plan_only):
        plan = RecomputeFromInput(input_version, watermark)  # the lock's record is the plan: nothing stored
    elif plan is None:
        plan = _store_plan(c, stage, finals, elements, owned, watermark, live)
    else:
        c.say(f"stage {stage.output}: {'counting' if c.plan_only else 'applying'} the corrections run "
              f"{run.run_id} planned before")
    crash_point(f"{stage.output}-planned")
    kept: list["DataFrame"] = []
    out = planned_corrections(stage, plan, finals, owned, run, kept)
    if out is not None:  # counted, then read by each write: the model's corrections run once
        kept.append(out := persist_uncompressed(out))
    counts = _counts(out)
    results = None
    if counts is None:  # nothing changed (a range without input, say)
        out, counts = None, {"panes": 0, "retractions": 0, "fixed": 0}
    elif c.plan_only:
        results = persist_uncompressed(result_rows(stage, out.where("kind = 'result'"), run.run_id, one_per_window=True))
        results.count()
    else:
        _write(c, stage, out, elements, owned, plan is not None and plan.every_window, live)
    for df in kept:
        df.unpersist()
    panes, retractions, corrected = int(counts["panes"]), int(counts["retractions"]), int(counts["fixed"])
    c.ledger.add_stage(stage.output, panes, retractions, corrected_windows=corrected)
    c.say(f"stage {stage.output}: {panes:,} panes, {retractions:,} retractions, "
          f"{corrected:,} windows corrected{' (planned, not applied)' if c.plan_only else ''}")
    return StageOutcome(plan is not None and not isinstance(plan, RecomputeFromInput), results)


def _store_plan(c: Correcting, stage: StageSpec, finals: "DataFrame", elements: "DataFrame",
                owned: EventRange | None, watermark: Instant, live: bool) -> Plan | None:
    """Diff once and commit the plan (see `sinks.corrections_plan`); the plan as stored.
    Every window of a stage without results is a change (a plan to preview lists them)."""
    spark, run = c.spark, c.run
    current = current_results(spark, stage)
    changed = _changed(stage, finals, current, owned)
    if live:
        states = read_states(spark, stage, table_version(spark, state_table(stage)))
        write_plan(spark, c.spec, stage, run_corrections(
            changed, stage.strategy, KeyCodec(stage.key_columns), stage.value_type, run.now, watermark,
            elements=elements, states=states), run.run_id)
    else:
        # without results, every recomputed window is a change
        write_changes(spark, c.spec, stage, changed, watermark, current is None, run.run_id)
    return read_plan(spark, stage, run.run_id)


def planned_corrections(stage: StageSpec, plan: Plan | None, finals: "DataFrame | None", owned: EventRange | None,
                        run: Run, kept: list["DataFrame"]) -> "DataFrame | None":
    """The output rows the plan makes (`execute.corrections`), lazily; what is persisted on
    the way is added to `kept`. `finals` is needed only for a plan to recompute from the input."""
    codec = KeyCodec(stage.key_columns)
    if isinstance(plan, RecomputeFromInput):  # every window, from the input as of that version
        changes = _changed(stage, finals, None, owned)
        if not finals.is_cached:  # read by the counts, the pane log and the results
            kept.append(changes := persist_uncompressed(changes))
        return run_corrections(changes, stage.strategy, codec, stage.value_type, run.now, plan.watermark,
                               all_fresh=True)
    if isinstance(plan, ChangedWindows):  # the plan holds the changed windows: corrected here
        return run_corrections(plan.rows, stage.strategy, codec, stage.value_type, run.now, plan.watermark,
                               persisted=kept)
    if isinstance(plan, StoredCorrections):
        return plan.rows
    return None


def _counts(out: "DataFrame | None") -> dict | None:
    """Panes, retractions and corrected windows of the output rows (None: there are none)."""
    from pyspark.sql import functions as F

    if out is None:
        return None
    counts = out.agg(
        F.count_if((F.col("kind") == "pane") & ~F.col("is_retraction")).alias("panes"),
        F.count_if((F.col("kind") == "pane") & F.col("is_retraction")).alias("retractions"),
        F.count_if((F.col("kind") == "result") & (F.col("is_retraction") | (F.col("pane_index") > 0))).alias("fixed"),
        F.count(F.lit(1)).alias("rows"),
    ).first()
    return counts.asDict() if counts["rows"] else None


def _write(c: Correcting, stage: StageSpec, out: "DataFrame", elements: "DataFrame", owned: EventRange | None,
           every_window: bool, live: bool) -> None:
    """Apply the corrections: pane log, results, live state, seen ids, each under the run's
    key, written at once (`platform.concurrent_writes`: a resumed run applies the same plan
    and skips whichever of them already committed)."""
    # Appended under the run's idempotent key, as the state is: a resumed run applies the
    # same plan, so whatever already committed is skipped (no MERGE on pane ids needed).
    spec, run = c.spec, c.run

    def pane_log(session: "SparkSession") -> None:
        write_panes(session, stage, out.where("kind = 'pane'"), run.run_id,
                    txn=(f"dataflow:{spec.name}:{panes_table(stage)}:{run.run_id}", 0))
        crash_point(f"{stage.output}-corrected-panes")

    def results(session: "SparkSession") -> None:
        write_results(session, stage, out.where("kind = 'result'"), run.run_id, one_per_window=True,
                      txn=(f"dataflow:{spec.name}:{layout.results(stage)}:{run.run_id}", 0))
        crash_point(f"{stage.output}-corrected-results")

    def state(session: "SparkSession") -> None:
        write_state(session, stage, out, -1, (f"dataflow:{spec.name}:{state_table(stage)}:{run.run_id}", 0))
        crash_point(f"{stage.output}-corrected-state")
        c.say(f"stage {stage.output}: live state corrected (micro-batches carry on from these figures)")

    def seen(session: "SparkSession") -> None:  # live or not yet: the first micro-batch takes these windows over
        _mark_seen(session, spec, stage, out, elements, run.run_id, owned, every_window)
        crash_point(f"{stage.output}-corrected-seen")

    writes = [results] if stage.keeps_results else []
    writes += [w for w, needed in ((seen, stage is spec.stages[0]), (pane_log, True), (state, live)) if needed]
    write_at_once(c.spark, writes)
    if not stage.keeps_results:
        crash_point(f"{stage.output}-corrected-results")


def _changed(stage: StageSpec, finals: "DataFrame", current: "DataFrame | None", owned: EventRange | None) -> "DataFrame":
    """The windows whose recomputed pane differs from the standing pane of the results
    `current` (or that exist on one side only), as `execute.corrections.CORRECTION_COLUMNS`."""
    from pyspark.sql import functions as F

    wid = [*stage.key_columns, "window_start", "window_end"]
    ours = finals.select(*wid, F.lit(True).alias("present"), "value", "ts")
    if current is None:
        return ours.select(
            *wid, "present", "value", "ts",
            F.lit(None).cast(stage.value_type).alias("s_value"), F.lit(None).cast("bigint").alias("s_ts"),
            F.lit(None).cast("string").alias("s_timing"), F.lit(None).cast("int").alias("s_pane_index"),
            F.lit(None).cast("int").alias("s_on_time_index"), F.lit(None).cast("bigint").alias("s_emitted_at"))
    theirs = standing_panes(current, stage)
    if owned is not None:
        theirs = theirs.where((F.col("window_start") >= owned.start) & (F.col("window_start") < owned.end))
    theirs = theirs.select(*[F.col(k).alias(f"_r_{k}") for k in wid],
                           *[F.col(c[2:]).alias(c) for c in STANDING])
    joined = ours.join(theirs, [ours[k].eqNullSafe(theirs[f"_r_{k}"]) for k in wid], "full_outer")
    same = F.col("value").eqNullSafe(F.col("s_value")) & F.col("ts").eqNullSafe(F.col("s_ts"))
    return joined.where(F.col("present").isNull() | F.col("s_pane_index").isNull() | ~same).select(
        *[F.coalesce(F.col(k), F.col(f"_r_{k}")).alias(k) for k in wid],
        F.coalesce(F.col("present"), F.lit(False)).alias("present"), "value", "ts", *STANDING,
    )


def _mark_seen(spark, spec: PipelineSpec, stage: StageSpec, out: "DataFrame", elements: "DataFrame", run_id: str,
               owned: EventRange | None, every_window: bool) -> None:
    """The event ids of the elements inside the corrected windows join the micro-batches'
    seen ids (batch -1: a backfill's). `owned`: the run's windows are those starting in it
    (all when None), so where windows overlap, an element with windows outside it is
    remembered as counted in the windows starting in it only (`seen_ids.OWNED`).
    `every_window`: the corrected windows are every window starting in `owned` (the stage
    had no results)."""
    from pyspark.sql import functions as F

    every = owned if every_window else None
    keys = list(stage.key_columns)
    form = stage.strategy.window_fn.sql_window("event_ms")
    if form is not None and every is not None:  # every window of the range, each known from an element's time
        start = F.expr(form[0])
        inside = elements.where((start >= every.start) & (start < every.end))
    else:
        windows = out.where("kind = 'result' AND NOT is_retraction AND window_start IS NOT NULL").select(
            *[out[k].alias(f"_w_{k}") for k in keys], "window_start", "window_end")
        if every is not None and stage.strategy.window_fn.is_merging:
            # Merged windows are disjoint and hold every element of their key, so all those
            # starting in the range are one stretch of each key's time: one row per key.
            windows = windows.groupBy(*[f"_w_{k}" for k in keys]).agg(
                F.min("window_start").alias("window_start"), F.max("window_end").alias("window_end"))
        if form is not None:  # each element in one window, known from its time: an equi-join, not a range join
            placed = elements.withColumn("_w_start", F.expr(form[0]))
            inside_window = [placed["_w_start"] == windows["window_start"]]
        else:
            placed = elements
            inside_window = [placed["event_ms"] >= windows["window_start"], placed["event_ms"] < windows["window_end"]]
        same_key = [placed[k].eqNullSafe(windows[f"_w_{k}"]) for k in keys]
        inside = placed.join(windows, [*same_key, *inside_window], "left_semi")
    if owned is not None and overlapping(spec):
        inside = with_owned_span(spec, inside, owned.start, owned.end)
    remember_ids(spark, spec, inside, -1, (f"dataflow:{spec.name}:{seen_table(spec)}:{run_id}", 0))
