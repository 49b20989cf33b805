"""`<output>__corrections`: a backfill's plan of corrections for a stage, stored before any
of them is applied.

A run diffs the recomputed windows against the results once, and commits what it will
apply here under its idempotent key; then it applies it to the pane log, the results, the
live state and the seen ids, each write idempotent. A backfill interrupted anywhere and run
again (it resumes the same run id) finds its plan and applies exactly the same corrections,
instead of diffing against half-written tables.

What is stored depends on what the corrections follow from:
- without live state, the changed windows themselves (`kind = 'change'`, one narrow row per
  window, with the watermark that paces them): the model's corrections are a function of
  those, the run's processing time and that watermark, so a run (or its resumption)
  computes them again from the plan, in memory, instead of writing and reading back every
  pane and results row;
- with live state, the corrections (`'pane'`, `'result'`, `'state'` rows): they also depend
  on the live state and the input, which the run itself rewrites;
- for a stage with neither results nor live state when the run took its lock (a
  pipeline's first backfill), nothing: every window it computes is a change, and a resumed
  run computes them again from the stage's input (`RecomputeFromInput`): for the first stage
  the input version its lock pinned, for a later one its upstream's results, which the run
  wrote (each write idempotent) before it corrects the stage, and which are therefore the same
  on every resumption; so the lock's record is the plan (`jobs.corrections`). A plan made for approval
  (`--plan-only`) stores the changed windows instead, so that its preview can list them.

A plan made for approval also stores its preview (`kind = 'preview'`, one row per window it
changes: `old_value`, `new_value`, `preview_panes`, `preview_retractions`; written by
`jobs.plan_diff`), which `dataflow plan show`, the approval task and the pane explorer read;
a plan read back for its apply leaves those rows out.

The table is partitioned by `run_id`: a run reads back only its own plan, and forgetting a
finished run's plan is a DELETE of its partition, which Delta does in its log alone (no
file is read or rewritten). A plan table made unpartitioned by an earlier release keeps
working as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Union

from dataflow_core.model.time import Instant
from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.pipelines import layout
from dataflow_core.spark.execute.corrections import CORRECTION_COLUMNS
from dataflow_core.spark.platform.delta import append_rows
from dataflow_core.spark.platform.tables import read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHANGE = "change"
PREVIEW = "preview"
WATERMARK = "planned_watermark"
EVERY_WINDOW = "planned_every_window"


@dataclass(frozen=True)
class StoredCorrections:
    """A plan of the corrections themselves (`'pane'`, `'result'`, `'state'` rows): with live
    state they depend on the state and the input too, which the run itself rewrites."""

    rows: "DataFrame"

    every_window = False


@dataclass(frozen=True)
class ChangedWindows:
    """A plan of the changed windows (`execute.corrections.CORRECTION_COLUMNS` after the key
    columns), to correct at `watermark`; `every_window`: they are every window the run
    recomputed (the stage had no results)."""

    rows: "DataFrame"
    watermark: Instant
    every_window: bool = False


@dataclass(frozen=True)
class RecomputeFromInput:
    """Nothing stored: every window recomputed from the stage's input is a change, corrected
    at `watermark` (a stage without results, see the module docstring): the pipeline's input
    as of `input_version` for the first stage, the upstream's results for a later one (None);
    the run's record of its pin is the plan."""

    input_version: int | None
    watermark: Instant

    every_window = True


Plan = Union[StoredCorrections, ChangedWindows, RecomputeFromInput]
"""A run's plan of corrections for one stage: one of the three forms the module docstring
describes."""


def plan_table(stage: StageSpec) -> str:
    return layout.plan(stage)


def read_plan(spark: "SparkSession", stage: StageSpec, run_id: str) -> Plan | None:
    """The plan run `run_id` stored for `stage` (None when it planned nothing yet)."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    if not table_exists(spark, name):
        return None
    # 'recompute' rows were a first backfill's plan before its lock's record was (same content)
    kinds = ~F.col("kind").isin(PREVIEW, "recompute")
    plan = read_table(spark, name).where((F.col("run_id") == run_id) & kinds).drop("run_id")
    marks = [c for c in ("kind", WATERMARK, EVERY_WINDOW) if c in plan.columns]
    first = plan.select(*marks).limit(1).collect()
    if not first:
        return None
    if first[0]["kind"] != CHANGE:
        return StoredCorrections(plan)
    return ChangedWindows(plan.select(*stage.key_columns, *CORRECTION_COLUMNS), first[0][WATERMARK],
                          bool(first[0][EVERY_WINDOW]) if EVERY_WINDOW in marks else False)


def write_plan(spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, out: "DataFrame", run_id: str) -> None:
    """Store the corrections (computing them now), once per run whatever the retries."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    append_rows(spark, name, out.withColumn("run_id", F.lit(run_id)), (f"dataflow:{spec.name}:{name}:{run_id}", 0),
                partition_by=("run_id",))


def write_changes(
    spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, changes: "DataFrame", watermark: Instant,
    every_window: bool, run_id: str,
) -> None:
    """Store the changed windows (`CORRECTION_COLUMNS`) to correct at `watermark`, as
    `write_plan` does; `every_window`: see `Plan`."""
    from pyspark.sql import functions as F

    rows = changes.select(*stage.key_columns, *CORRECTION_COLUMNS, F.lit(CHANGE).alias("kind"),
                          F.lit(watermark).cast("bigint").alias(WATERMARK), F.lit(every_window).alias(EVERY_WINDOW))
    write_plan(spark, spec, stage, rows, run_id)


def write_preview(spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, rows: "DataFrame", run_id: str) -> None:
    """Store the plan's preview rows (see the module docstring), once per run."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    append_rows(spark, name, rows.withColumn("kind", F.lit(PREVIEW)).withColumn("run_id", F.lit(run_id)),
                (f"dataflow:{spec.name}:{name}:{run_id}:{PREVIEW}", 0), partition_by=("run_id",))


def read_preview(spark: "SparkSession", stage: StageSpec, run_id: str) -> "DataFrame | None":
    """The preview rows run `run_id` stored for `stage` (None: the table has none)."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    if not table_exists(spark, name):
        return None
    table = read_table(spark, name)
    if "old_value" not in table.columns:
        return None
    return table.where((F.col("run_id") == run_id) & (F.col("kind") == PREVIEW))


def forget_run_plans(spark: "SparkSession", stages: Iterable[StageSpec], run_id: str) -> None:
    """Drop the run's plans of these stages: it finished (or its plan was decided), so it is
    never resumed from them."""
    for stage in stages:
        forget_plans(spark, stage, [run_id])


def forget_plans(spark: "SparkSession", stage: StageSpec, run_ids: list[str]) -> None:
    """Drop the plans of runs that finished."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import table_path

    name = plan_table(stage)
    if run_ids and table_exists(spark, name):
        DeltaTable.forPath(spark, table_path(spark, name)).delete(F.col("run_id").isin(run_ids))
