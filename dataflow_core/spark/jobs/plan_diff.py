"""What a stored plan will change, per stage: stored once when the plan is made, read by
`dataflow plan show`, the approval task's summary and the pane explorer's plan view.

The preview is made from the plan by the code its apply runs (`jobs.corrections.
planned_corrections`), not from a description of it: each window's new value is the
results row the apply will write (or its deletion), its panes and retractions are the
pane-log rows it will append, and its old value is the results row as it stood at the
version the plan was made from. So the preview is what the apply does, by construction. It
is stored beside the plan (`corrections_plan.write_preview`) while the plan's lock still
stands, so showing it later needs no executors and no old table version, and a reader
without Spark (the explorer's fast reader) reads the same rows.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dataflow_core.diagram.plan_table import StageDiff, WindowChange, not_stored, order
from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import PipelineSpec, StageSpec, get, layout
from dataflow_core.spark.jobs.corrections import planned_corrections
from dataflow_core.spark.platform.delta import read_as_of
from dataflow_core.spark.sinks.corrections_plan import read_plan, read_preview, write_preview
from dataflow_core.spark.sinks.results import standing_panes
from dataflow_core.spark.sinks.runs import PlanState, Run, plan_state

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def store_previews(spark: "SparkSession", spec: PipelineSpec, run: Run, versions: dict[str, int]) -> None:
    """Store the preview of each stage's plan of run `run` (made against `versions`)."""
    for stage in spec.stages:
        plan = read_plan(spark, stage, run.run_id)
        if plan is None:
            continue
        kept: list["DataFrame"] = []
        rows = _preview(spark, stage, planned_corrections(stage, plan, None, None, run, kept),
                        versions.get(stage.output, -1))
        write_preview(spark, spec, stage, rows, run.run_id)
        for df in kept:
            df.unpersist()


def _preview(spark: "SparkSession", stage: StageSpec, out: "DataFrame", version: int) -> "DataFrame":
    """Per window the corrections `out` touch: old value (results at `version`), new value
    (null where the apply deletes the row), panes and retractions appended."""
    from pyspark.sql import functions as F

    wid = [*stage.key_columns, "window_start", "window_end"]
    results = out.where("kind = 'result'").select(
        *wid, F.when(~F.col("is_retraction"), F.col("value")).alias("new_value"))
    panes = out.where("kind = 'pane'").groupBy(*wid).agg(
        F.count_if(~F.col("is_retraction")).cast("int").alias("preview_panes"),
        F.count_if("is_retraction").cast("int").alias("preview_retractions"))
    rows = _outer(results, panes, wid)
    table = read_as_of(spark, layout.results(stage), version)
    if table is None:
        return rows.withColumn("old_value", F.lit(None).cast(stage.value_type))
    old = standing_panes(table, stage).select(*wid, F.col("value").alias("old_value"))
    return _outer(rows, old.join(rows.select(*[F.col(c).alias(f"_t_{c}") for c in wid]),
                                 [old[c].eqNullSafe(F.col(f"_t_{c}")) for c in wid], "left_semi"), wid)


def _outer(left: "DataFrame", right: "DataFrame", wid: list[str]) -> "DataFrame":
    """Full outer join on the window's identity, nulls equal (a global window has none)."""
    from pyspark.sql import functions as F

    r = right.select(*[F.col(c).alias(f"_r_{c}") for c in wid], *[c for c in right.columns if c not in wid])
    joined = left.join(r, [left[c].eqNullSafe(r[f"_r_{c}"]) for c in wid], "full_outer")
    return joined.select(*[F.coalesce(left[c], r[f"_r_{c}"]).alias(c) for c in wid],
                         *[c for c in left.columns if c not in wid], *[c for c in right.columns if c not in wid])


def plan_diff(spark: "SparkSession", run_id: str, pipeline: str | None = None) -> tuple[PlanState, list[StageDiff]]:
    """The plan's state and its stored preview per stage. One line for an unknown run, a run
    of another pipeline, or a plan no longer stored (decided: applied or rejected)."""
    state = plan_state(spark, run_id)
    refused = not_stored(run_id, None if state is None else plan_record(state), pipeline)
    if refused:
        raise DataflowError(refused)
    return state, [_stage_diff(spark, stage, run_id) for stage in get(state.run.pipeline).stages]


def plan_record(state: PlanState) -> dict[str, Any]:
    """The plan as the fast reader's `query.plans` gives it (what `plan_table.headline` and
    `dataflow plan show` print)."""
    args = json.loads(state.run.args)
    return {"run_id": state.run.run_id, "pipeline": state.run.pipeline, "start": args.get("start", "?"),
            "end": args.get("end", "?"), "ledger": state.ledger, "status": state.status,
            "decided_by": state.decided_by, "decided_at": state.decided_at, "reason": state.reason}


def _stage_diff(spark: "SparkSession", stage: StageSpec, run_id: str) -> StageDiff:
    diff = StageDiff(stage.output, tuple(stage.key_columns))
    rows = read_preview(spark, stage, run_id)
    if rows is None:
        return diff
    changes = [WindowChange(tuple(r[k] for k in stage.key_columns), r["window_start"], r["window_end"],
                            r["old_value"], r["new_value"], int(r["preview_panes"] or 0),
                            int(r["preview_retractions"] or 0)) for r in rows.collect()]
    diff.changes = sorted(changes, key=lambda c: order(c.key, c.window_start, c.window_end))
    return diff
