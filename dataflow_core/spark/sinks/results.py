"""`<output>`, a stage's current results: per key and window, the value a reader should
believe now, with the metadata of the pane that set it.

One sink for every mode and path. A batch of panes leaves, per window, its last pane's
metadata; the value is that pane's (accumulating and retracting stages) or, for discarding
panes, the merge of the batch's pane values by the combiner's declared `output_merge`, and
a batch that continues earlier ones (micro-batches) merges it with the value already there.
A last pane that is a retraction deletes the row, and so does a window that a pane of its
key declares merged away (`Pane.replaces`: a session absorbed by another), in every
accumulation mode: the table holds the current windows only, while the pane log keeps the
history the mode emits (`output_merge.with_merged_away`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.model.pane_codec import standing_flags
from dataflow_core.pipelines import layout
from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.spark.execute.output_merge import discarding_merge, merge_pair, window_totals
from dataflow_core.spark.platform.delta import Txn, merge_rows
from dataflow_core.spark.platform.tables import read_table, table_exists
from dataflow_core.spark.sinks.panes import pane_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CLUSTER_COLUMNS = ("window_end",)
"""A results table is clustered on `window_end` (Delta's liquid clustering, kept up by
OPTIMIZE): a later run's MERGE touches recent windows only (`window_end_from`), and with the
files laid out by window end, Delta skips the files of older windows instead of rewriting
files that mix every hour of the table's history."""

CHANGE_FEED = {"delta.enableChangeDataFeed": "true"}
"""A results table is created with Delta's change data feed on: a downstream reader asks
Delta what changed since the version it last read (`readChangeFeed`, `table_changes`), and
a correction reads as the update of a window's row (its pre- and post-image), a window
retracted or merged away as its row's delete."""

RESULT_COLUMNS = (
    "window_start", "window_end", "value", "timestamp", "timing", "pane_index", "on_time_index",
    "updated_at", "pane_id", "run_id",
)

def result_rows(stage: StageSpec, panes: "DataFrame", run_id: str, one_per_window: bool = False) -> "DataFrame":
    """Per key and window of runner panes (pane codec fields, times in ms), the results row
    they leave (`window_totals`), with `_delete` where the last of them is a retraction. `one_per_window`: each window
    has one row already, the one to keep, its value the window's total (corrections)."""
    if one_per_window:
        return _as_results_row(stage, pane_rows(stage, panes, run_id))
    window_id = [*stage.key_columns, "window_start", "window_end"]
    totals = window_totals(panes, stage.strategy, window_id, stage.value_type)
    return _as_results_row(stage, pane_rows(stage, totals, run_id))


def _as_results_row(stage: StageSpec, rows: "DataFrame") -> "DataFrame":
    """A window's last pane (a pane-log row) as its results row."""
    from pyspark.sql import functions as F

    return rows.select(
        *stage.key_columns, "window_start", "window_end", "value", "timestamp", "timing",
        "pane_index", "on_time_index", F.col("emitted_at").alias("updated_at"), "pane_id", "run_id",
        F.col("is_retraction").alias("_delete"),
    )


def write_results(
    spark: "SparkSession", stage: StageSpec, panes: "DataFrame", run_id: str, txn: Txn | None = None,
    continues: bool = False, window_end_from: int | None = None, one_per_window: bool = False,
) -> int:
    """Write the results rows `panes` leave. With `continues` the panes follow what the
    table holds (a later micro-batch): a discarding stage's value merges with the row's.
    `window_end_from` (ms), when no pane's window ends earlier, lets Delta skip the files of
    older windows. `one_per_window`: see `result_rows`."""
    merge = discarding_merge(stage.strategy)
    if continues and merge is not None and not one_per_window:
        panes = with_stored_parts(spark, stage, panes)
    rows = result_rows(stage, panes, run_id, one_per_window)
    update_set = None
    if continues and merge is not None:
        ts_merge = "least" if stage.strategy.timestamp_combiner.merge == "min" else "greatest"
        update_set = {"`value`": merge_pair(merge, "t.value", "s.value"),
                      "`timestamp`": f"{ts_merge}(t.timestamp, s.timestamp)"}
    keys = [*stage.key_columns, "window_start", "window_end"]
    prune = None if window_end_from is None else f"t.window_end >= timestamp_millis({int(window_end_from)})"
    return merge_rows(spark, layout.results(stage), rows, keys, delete=True, update=True, txn=txn,
                      target_filter=prune, update_set=update_set, cluster_by=CLUSTER_COLUMNS, properties=CHANGE_FEED)


def with_stored_parts(spark: "SparkSession", stage: StageSpec, panes: "DataFrame") -> "DataFrame":
    """`panes` plus, as standing panes, the stored results rows of the windows they declare
    merged away (`Pane.replaces`): a discarding window's total takes theirs in
    (`WindowingStrategy.current_panes`), and a later batch's panes carry only the increment."""
    from pyspark.sql import functions as F

    from dataflow_core.model.pane_codec import REPLACES

    stored = current_results(spark, stage)
    if stored is None or REPLACES not in panes.columns or not stage.strategy.window_fn.is_merging:
        return panes
    keys = list(stage.key_columns)
    gone = panes.where(F.col(REPLACES).isNotNull() & ~F.col("is_retraction")).select(
        *keys, F.explode(REPLACES).alias("_gone")).select(
        *keys, F.col("_gone.window_start").alias("_gs"), F.col("_gone.window_end").alias("_ge")).distinct()
    parts = standing_panes(stored, stage)
    cond = [parts[k].eqNullSafe(gone[k]) for k in keys] + [parts["window_start"] == gone["_gs"],
                                                            parts["window_end"] == gone["_ge"]]
    parts = parts.join(gone, cond, "left_semi")
    return panes.unionByName(parts.select(*[F.col(c).cast(panes.schema[c].dataType) for c in parts.columns]),
                             allowMissingColumns=True)


def current_results(spark: "SparkSession", stage: StageSpec) -> "DataFrame | None":
    name = layout.results(stage)
    return read_table(spark, name) if table_exists(spark, name) else None


def standing_panes(results: "DataFrame", stage: StageSpec) -> "DataFrame":
    """A results table's rows as the panes standing in each window (pane codec fields,
    times in ms), its value being the window's total."""
    from pyspark.sql import functions as F

    first, last = standing_flags(F.col("pane_index"))
    return results.select(
        *stage.key_columns,
        F.unix_millis("window_start").alias("window_start"),
        F.unix_millis("window_end").alias("window_end"),
        "value",
        F.unix_millis("timestamp").alias("ts"),
        "timing",
        "pane_index",
        "on_time_index",
        first.alias("is_first"),
        F.lit(last).alias("is_last"),
        F.lit(False).alias("is_retraction"),
        F.unix_millis("updated_at").alias("emitted_at"),
    )


def corrected_results(current: "DataFrame | None", fixes: "DataFrame", stage: StageSpec) -> "DataFrame":
    """The results `current` as they will stand once the results rows `fixes` (`result_rows`,
    `_delete` on a window they delete) are written: what a plan of corrections leaves, in
    memory, for the stage downstream of it to be planned from."""
    from pyspark.sql import functions as F

    kept = fixes.where(~F.col("_delete")).drop("_delete")
    if current is None:
        return kept
    wid = [*stage.key_columns, "window_start", "window_end"]
    fixed = fixes.select(*[F.col(c).alias(f"_f_{c}") for c in wid])
    untouched = current.join(fixed, [current[c].eqNullSafe(fixed[f"_f_{c}"]) for c in wid], "left_anti")
    return untouched.unionByName(kept.select(*[c for c in current.columns if c in kept.columns]),
                                 allowMissingColumns=True)
