"""`<output>_panes`, a stage's pane log: every pane and retraction, append-only.

A pane of a merged window (sessions) names in `replaces` the windows it absorbed that had
emitted (`Pane.replaces`): they no longer exist, and the results (and the results gate) drop
them, whatever the accumulation mode.

Each pane has a deterministic `pane_id` (stage, key, window, index, retraction, emission
time). A micro-batch, and a batch backfill's corrections, append under their idempotent key
(a retry or a resumed run appends nothing twice); an arrival-order replay, which may be
re-run with the same panes, inserts only the ids not already there.
Runner DataFrames carry the pane codec's fields (`pane_codec.PANE_FIELDS`, times in ms);
the table stores timestamps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.model.pane_codec import REPLACES
from dataflow_core.pipelines import layout
from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.spark.platform.delta import Txn, append_rows, merge_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PANE_COLUMNS = (
    "window_start", "window_end", "value", "timestamp", "timing", "pane_index", "on_time_index",
    "is_first", "is_last", "is_retraction", "emitted_at", "run_id", "pane_id", REPLACES,
)


def panes_table(stage: StageSpec) -> str:
    return layout.panes(stage)


def ms_to_timestamp(column: str) -> "Column":
    from pyspark.sql import functions as F

    return F.timestamp_millis(F.col(column))


def pane_id(stage: StageSpec) -> "Column":
    from pyspark.sql import functions as F

    parts = [F.lit(stage.output), F.to_json(F.struct(*stage.key_columns))]
    parts += [F.coalesce(F.col(c).cast("string"), F.lit("-")) for c in
              ("window_start", "window_end", "pane_index", "is_retraction", "emitted_at")]
    return F.sha2(F.concat_ws("|", *parts), 256)


def pane_rows(stage: StageSpec, panes: "DataFrame", run_id: str) -> "DataFrame":
    """Runner panes (the pane codec's fields, times in ms) as pane-log rows."""
    from pyspark.sql import functions as F

    return panes.select(
        *stage.key_columns,
        ms_to_timestamp("window_start").alias("window_start"),
        ms_to_timestamp("window_end").alias("window_end"),
        F.col("value").cast(stage.value_type).alias("value"),
        ms_to_timestamp("ts").alias("timestamp"),
        "timing",
        F.col("pane_index").cast("int").alias("pane_index"),
        F.col("on_time_index").cast("int").alias("on_time_index"),
        "is_first", "is_last", "is_retraction",
        ms_to_timestamp("emitted_at").alias("emitted_at"),
        F.lit(run_id).alias("run_id"),
        pane_id(stage).alias("pane_id"),
        replaced_windows(panes).alias(REPLACES),
    )


def replaced_windows(panes: "DataFrame") -> "Column":
    """A runner pane's `REPLACES` (the windows its window absorbed, `Pane.replaces`) with the
    pane log's timestamps for bounds; null for a pane that replaces nothing, or a frame
    without the column."""
    from pyspark.sql import functions as F

    bounds = "array<struct<window_start: timestamp, window_end: timestamp>>"
    if REPLACES not in panes.columns:
        return F.lit(None).cast(bounds)
    return F.transform(REPLACES, lambda w: F.struct(
        F.timestamp_millis(w["window_start"]).alias("window_start"),
        F.timestamp_millis(w["window_end"]).alias("window_end")))


def write_panes(spark: "SparkSession", stage: StageSpec, panes: "DataFrame", run_id: str,
                txn: Txn | None = None) -> int | None:
    """Add runner panes to the pane log; returns how many were inserted (None when
    appended under an idempotent key, which counts nothing)."""
    rows = pane_rows(stage, panes, run_id)
    if txn is None:
        return merge_rows(spark, panes_table(stage), rows, ["pane_id"], delete=False, update=False)
    append_rows(spark, panes_table(stage), rows, txn)
    return None
