"""A stage's two output tables, written through Delta `MERGE`.

- `<output>_panes`, the pane log: append-only; each pane has a deterministic `pane_id`
  (stage, key, window, index, retraction, emission time). A retried micro-batch appends
  nothing twice (Delta's idempotent key); a backfill inserts only the panes not already
  there, so a re-run writes nothing twice.
- `<output>`, the current results: per key and window the value a reader should believe
  now. A pane replaces its row; a retraction with no replacement (a session merged away)
  deletes it.

Both take DataFrames with times in epoch milliseconds (the model's instants) and store
timestamps.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Sequence

from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.spark.platform.tables import register_table, table_exists, table_path

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PANE_COLUMNS = (
    "window_start", "window_end", "value", "timestamp", "timing", "pane_index", "on_time_index",
    "is_first", "is_last", "is_retraction", "emitted_at", "run_id", "pane_id",
)
RESULT_COLUMNS = (
    "window_start", "window_end", "value", "timestamp", "timing", "pane_index", "on_time_index",
    "updated_at", "pane_id", "run_id",
)
PANE_INPUT = (
    "window_start", "window_end", "value", "ts", "timing", "pane_index", "on_time_index",
    "is_first", "is_last", "is_retraction", "emitted_at",
)
"""Columns (after the key) of the pane DataFrames runners hand in; times in ms."""


def panes_table(stage: StageSpec) -> str:
    return f"{stage.output}_panes"


def _ts(column: str) -> "Column":
    from pyspark.sql import functions as F

    return F.timestamp_millis(F.col(column))


def pane_id(stage: StageSpec) -> "Column":
    from pyspark.sql import functions as F

    parts = [F.lit(stage.output), F.to_json(F.struct(*stage.key_columns))]
    parts += [F.coalesce(F.col(c).cast("string"), F.lit("-")) for c in
              ("window_start", "window_end", "pane_index", "is_retraction", "emitted_at")]
    return F.sha2(F.concat_ws("|", *parts), 256)


def pane_rows(stage: StageSpec, panes: "DataFrame", run_id: str) -> "DataFrame":
    """Runner panes (times in ms) as pane-log rows."""
    from pyspark.sql import functions as F

    return panes.select(
        *stage.key_columns,
        _ts("window_start").alias("window_start"),
        _ts("window_end").alias("window_end"),
        F.col("value").cast(stage.value_type).alias("value"),
        _ts("ts").alias("timestamp"),
        "timing",
        F.col("pane_index").cast("int").alias("pane_index"),
        F.col("on_time_index").cast("int").alias("on_time_index"),
        "is_first", "is_last", "is_retraction",
        _ts("emitted_at").alias("emitted_at"),
        F.lit(run_id).alias("run_id"),
        pane_id(stage).alias("pane_id"),
    )


def final_rows(stage: StageSpec, panes: "DataFrame", run_id: str) -> "DataFrame":
    """Per key and window, the last of these panes (by emission, then position `ordinal`
    or index), as a results row with `_delete` set when it is a retraction."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window_id = [*stage.key_columns, "window_start", "window_end"]
    order = [F.col(c).desc() for c in ("emitted_at", "sub", "ordinal", "pane_index") if c in panes.columns]
    order.append(F.col("is_retraction").desc())
    last = panes.withColumn("_n", F.row_number().over(Window.partitionBy(*window_id).orderBy(*order)))
    rows = pane_rows(stage, last.where("_n = 1"), run_id)
    return rows.select(
        *stage.key_columns, "window_start", "window_end", "value", "timestamp", "timing",
        "pane_index", "on_time_index", F.col("emitted_at").alias("updated_at"), "pane_id", "run_id",
        F.col("is_retraction").alias("_delete"),
    )


Txn = tuple[str, int]
"""Delta's idempotent-write key (application id, version): a commit with a version not
above the last one committed under that id is skipped, so a retried batch writes nothing
twice."""


@contextmanager
def idempotent(spark: "SparkSession", txn: Txn | None) -> Iterator[None]:
    """Delta's session settings for an idempotent MERGE (writer options cannot reach it),
    unset afterwards so that no other write inherits them."""
    if txn is None:
        yield
        return
    spark.conf.set("spark.databricks.delta.write.txnAppId", txn[0])
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(txn[1]))
    try:
        yield
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def write_panes(spark: "SparkSession", stage: StageSpec, rows: "DataFrame", txn: Txn | None = None) -> int | None:
    """Insert the pane-log rows not already there; returns how many were inserted (None
    when appended under an idempotent key, which counts nothing).

    Under an idempotent key (a micro-batch) the rows are appended: Delta skips the append
    if the key already committed, and the cost stays that of the batch, not of the log.
    Without one (a backfill, which may be re-run with the same panes) they are merged on
    `pane_id`."""
    name = panes_table(stage)
    if txn is None:
        return merge_rows(spark, name, rows, ["pane_id"], delete=False, update=False)
    rows.write.format("delta").mode("append").option("txnAppId", txn[0]).option("txnVersion", txn[1]).save(
        table_path(spark, name))
    register_table(spark, name)
    return None


def merge_results(
    spark: "SparkSession", stage: StageSpec, rows: "DataFrame", txn: Txn | None = None,
    window_end_from: int | None = None,
) -> int:
    """Replace (or delete, where `_delete`) each key and window's results row.

    `window_end_from` (ms), when no row ends earlier, lets Delta skip the files of older
    windows, so a micro-batch's MERGE reads what is recent rather than all of history."""
    keys = [*stage.key_columns, "window_start", "window_end"]
    prune = None if window_end_from is None else f"t.window_end >= timestamp_millis({int(window_end_from)})"
    return merge_rows(spark, stage.output, rows, keys, delete=True, update=True, txn=txn, target_filter=prune)


def merge_rows(
    spark: "SparkSession", name: str, rows: "DataFrame", keys: Sequence[str], delete: bool, update: bool,
    txn: Txn | None = None, target_filter: str | None = None, cluster_by: Sequence[str] = (),
) -> int:
    """MERGE `rows` into table `name` (created empty first if missing, with Delta's liquid
    clustering on `cluster_by`) on `keys`, and on `target_filter` (a condition on the
    target `t` that every matching row meets)."""
    from delta.tables import DeltaTable

    if not table_exists(spark, name):
        empty = rows.drop("_delete").limit(0)
        if cluster_by:
            (DeltaTable.createIfNotExists(spark).location(table_path(spark, name))
             .addColumns(empty.schema).clusterBy(*cluster_by).execute())
        else:
            empty.write.format("delta").save(table_path(spark, name))
        register_table(spark, name)
    target = DeltaTable.forPath(spark, table_path(spark, name))
    version = target.history(1).collect()[0]["version"]
    cond = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in keys] + ([target_filter] if target_filter else []))
    columns = [c for c in rows.columns if c != "_delete"]
    values = {f"`{c}`": f"s.`{c}`" for c in columns}
    m = target.alias("t").merge(rows.alias("s"), cond)
    if delete:
        m = m.whenMatchedDelete("s._delete")
        if update:
            m = m.whenMatchedUpdate("NOT s._delete", set=values)
        m = m.whenNotMatchedInsert("NOT s._delete", values=values)
    else:
        m = m.whenNotMatchedInsert(values=values)
    with idempotent(spark, txn):
        m.execute()
    register_table(spark, name)
    last = target.history(1).collect()[0]
    if last["version"] == version:
        return 0  # nothing to change: no commit
    metrics = last["operationMetrics"] or {}
    return int(metrics.get("numTargetRowsInserted", 0)) + int(metrics.get("numTargetRowsUpdated", 0)) + int(
        metrics.get("numTargetRowsDeleted", 0)
    )


def current_results(spark: "SparkSession", stage: StageSpec) -> "DataFrame | None":
    from dataflow_core.spark.platform.tables import read_table

    return read_table(spark, stage.output) if table_exists(spark, stage.output) else None
