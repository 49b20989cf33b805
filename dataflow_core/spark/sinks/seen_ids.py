"""`<pipeline>__seen_ids`: the event ids micro-batches (and backfills that correct them)
have counted, so a later delivery of the same event is a duplicate.

An id is kept until a delivery of its event would be dropped as too late anyway: until the
watermark is past its event time plus the first stage's window reach (`WindowFn.reach`: the
window size, or a session's gap) and allowed lateness, plus a day (`SEEN_HORIZON`) to spare.
Ids of global windows, or windows of unknown reach, are kept (maintenance may not forget them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from dataflow_core.model.time import Instant, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.platform.delta import Txn, append_rows, merge_rows
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from dataflow_core.spark.sinks.batches import records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEEN_HORIZON = parse_duration("1d")


def seen_table(spec: PipelineSpec) -> str:
    return f"{spec.name}__seen_ids"


def horizon(spec: PipelineSpec, watermark: Instant) -> Instant | None:
    """Ids of events before this time can be forgotten at `watermark` (None: keep all)."""
    dropped_before = spec.stages[0].strategy.dropped_before(watermark)
    return None if dropped_before is None else dropped_before - SEEN_HORIZON


def remember_ids(
    spark, spec: PipelineSpec, els: "DataFrame", batch: int, txn: Txn, watermark: Instant | None = None,
    unseen: bool = False,
) -> None:
    """Event ids of `els` join the seen set. With `watermark`, ids beyond the `horizon` are
    forgotten (a delivery that late would be dropped as too late anyway). `unseen`: the
    caller knows none of the ids is in the set (a micro-batch's, checked against the version
    it reads, which nothing else writes while it holds the pipeline), so they are appended
    rather than merged on the id."""
    from pyspark.sql import functions as F

    name = seen_table(spec)
    before = None if watermark is None else horizon(spec, watermark)
    ids = els.select("event_id", "event_ms", F.lit(batch).cast("bigint").alias("batch"))
    if unseen and before is None:
        append_rows(spark, name, ids, txn)
        return
    rows = ids.withColumn("_delete", F.lit(False))
    if before is not None and table_exists(spark, name):
        expired = read_table(spark, name).where(F.col("event_ms") < F.lit(before)).select(
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
    before = horizon(spec, json.loads(finished[0]["watermarks"]).get("input", BEGINNING_OF_TIME))
    if before is None:
        return 0
    table = DeltaTable.forPath(spark, table_path(spark, name))
    expired = table.toDF().where(F.col("event_ms") < F.lit(before)).count()
    if expired:
        table.delete(F.col("event_ms") < F.lit(before))
    return expired
