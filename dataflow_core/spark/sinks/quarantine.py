"""`<pipeline>__quarantine`: the input rows a pipeline refused, each with its reasons.

One table per pipeline (two pipelines of one input never write the same table, so their
writes cannot conflict), one writer for backfills, micro-batches and the input gate. Every
row carries its `row_id`, and no retry writes it twice; columns added to the input later are
added to the table (schema evolution), so a changed input never wedges a run.

Runs that read a range (backfills, the input gate) MERGE on `row_id`: running one again, or
another over the same rows, finds its rows there. A micro-batch appends under its batch's
idempotent key instead (`per_delivery`): the stream delivers each input row to one batch only,
a retried batch's append is skipped, and an append costs no join against the table's history
(about a second of a warm batch's 27 on the benchmark's 2,000 keys).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import layout
from dataflow_core.pipelines.spec import PipelineSpec
from dataflow_core.spark.input.rows import REASON
from dataflow_core.spark.platform.delta import Txn, append_rows, merge_rows
from dataflow_core.spark.platform.tables import read_table, table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def quarantine_table(spec: PipelineSpec) -> str:
    return layout.quarantine(spec)


def write_quarantine(
    spark: "SparkSession", spec: PipelineSpec, bad: "DataFrame", run_id: str, txn: Txn | None = None,
    per_delivery: bool = False,
) -> None:
    """Bad rows (input columns and `quarantine_reason`) into `<pipeline>__quarantine`, none
    twice whatever the retries: MERGEd on `row_id`, or with `per_delivery` (the rows are a
    micro-batch's, delivered to it alone) appended under `txn` (see the module's docstring)."""
    from pyspark.sql import functions as F

    name = quarantine_table(spec)
    input_cols = [c for c in bad.columns if c != REASON]
    rows = bad.select(
        *bad.columns,
        F.lit(spec.name).alias("pipeline"),
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("quarantined_at"),
        F.sha2(F.concat_ws("|", F.lit(spec.name), F.to_json(F.struct(*input_cols))), 256).alias("row_id"),
    )
    if table_exists(spark, name):
        if "row_id" not in read_table(spark, name).columns:
            raise DataflowError(
                f"table {name} exists with another layout (no row_id column; written by an older demo?); "
                "move it away and run again"
            )
    if per_delivery:
        append_rows(spark, name, rows, txn)
    else:
        merge_rows(spark, name, rows, ["row_id"], delete=False, update=False, txn=txn)
