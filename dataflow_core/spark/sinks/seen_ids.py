"""`<pipeline>__seen_ids`: the event ids micro-batches (and backfills that correct them)
have counted, so a later delivery of the same event is a duplicate.

Ids are kept for the first stage's allowed lateness plus a day (`SEEN_HORIZON`) of event
time behind the watermark: a delivery later than that would be dropped as too late anyway.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dataflow_core.model.time import Instant, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.platform.delta import Txn, merge_rows
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from dataflow_core.spark.sinks.batches import records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEEN_HORIZON = parse_duration("1d")


def seen_table(spec: PipelineSpec) -> str:
    return f"{spec.name}__seen_ids"


def remember_ids(
    spark, spec: PipelineSpec, els: "DataFrame", batch: int, txn: Txn, watermark: Instant | None = None,
) -> None:
    """Event ids of `els` join the seen set. With `watermark`, ids further behind it than
    the first stage's allowed lateness plus a day are forgotten (a delivery that late would
    be dropped as too late anyway)."""
    from pyspark.sql import functions as F

    rows = els.select("event_id", "event_ms", F.lit(batch).cast("bigint").alias("batch"), F.lit(False).alias("_delete"))
    name = seen_table(spec)
    if watermark is not None and watermark > BEGINNING_OF_TIME and table_exists(spark, name):
        horizon = watermark - spec.stages[0].strategy.allowed_lateness - SEEN_HORIZON
        expired = read_table(spark, name).where(F.col("event_ms") < F.lit(horizon)).select(
            "event_id", "event_ms", "batch", F.lit(True).alias("_delete"))
        rows = rows.unionByName(expired)
    merge_rows(spark, name, rows, ["event_id"], delete=True, update=False, txn=txn)


def expire_seen_ids(spark: "SparkSession", spec: PipelineSpec) -> int:
    """Forget event ids beyond the horizon (see `remember_ids`) outside a batch: for
    maintenance. Returns how many were deleted."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    name = seen_table(spec)
    finished = [r for r in records(spark, spec) if r["status"] == "finished"]
    if not table_exists(spark, name) or not finished:
        return 0
    wm = json.loads(finished[0]["watermarks"]).get("input", BEGINNING_OF_TIME)
    if wm <= BEGINNING_OF_TIME:
        return 0
    horizon = wm - spec.stages[0].strategy.allowed_lateness - SEEN_HORIZON
    table = DeltaTable.forPath(spark, table_path(spark, name))
    expired = table.toDF().where(F.col("event_ms") < F.lit(horizon)).count()
    if expired:
        table.delete(F.col("event_ms") < F.lit(horizon))
    return expired
