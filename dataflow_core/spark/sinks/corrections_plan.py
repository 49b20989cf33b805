"""`<output>__corrections`: a backfill's corrections of a stage, stored before any of them is
applied.

The corrections (panes, results rows, live state rows) are computed once, by the model,
and committed here under the run's idempotent key; then they are applied to the pane log,
the results, the live state and the seen ids, each write idempotent. A backfill
interrupted anywhere and run again (it resumes the same run id) finds its plan and applies
exactly the same corrections, instead of diffing against half-written tables.

The table is partitioned by `run_id`: a run reads back only its own plan, and forgetting a
finished run's plan is a DELETE of its partition, which Delta does in its log alone (no
file is read or rewritten). A plan table made unpartitioned by an earlier release keeps
working as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.pipelines import PipelineSpec, StageSpec
from dataflow_core.spark.platform.delta import append_rows
from dataflow_core.spark.platform.tables import read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def plan_table(stage: StageSpec) -> str:
    return f"{stage.output}__corrections"


def read_plan(spark: "SparkSession", stage: StageSpec, run_id: str) -> "DataFrame | None":
    """The corrections run `run_id` planned for `stage` (None when it planned none yet)."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    if not table_exists(spark, name):
        return None
    plan = read_table(spark, name).where(F.col("run_id") == run_id).drop("run_id")
    return plan if plan.limit(1).count() else None


def write_plan(spark: "SparkSession", spec: PipelineSpec, stage: StageSpec, out: "DataFrame", run_id: str) -> None:
    """Store the corrections (computing them now), once per run whatever the retries."""
    from pyspark.sql import functions as F

    name = plan_table(stage)
    append_rows(spark, name, out.withColumn("run_id", F.lit(run_id)), (f"dataflow:{spec.name}:{name}:{run_id}", 0),
                partition_by=("run_id",))


def forget_plans(spark: "SparkSession", stage: StageSpec, run_ids: list[str]) -> None:
    """Drop the plans of runs that finished."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import table_path

    name = plan_table(stage)
    if run_ids and table_exists(spark, name):
        DeltaTable.forPath(spark, table_path(spark, name)).delete(F.col("run_id").isin(run_ids))
