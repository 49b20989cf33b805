"""An input table read as Delta's change data feed (`readChangeFeed`, on when the table has
`delta.enableChangeDataFeed = true`): a micro-batch's rows are its commits' changes, each
with `_change_type` (`insert`, `delete`, `update_preimage`, `update_postimage`) and
`_commit_version`. Additions (inserts, post-images) are new rows as ever; removals (deletes,
pre-images) take back out the element a counted row was (`model` rule 19, input retractions).

Within one batch an event's changes are taken in commit order, a commit's removals before
its additions: an addition followed later in the batch by a removal of the same event id is
withdrawn (it never reaches the model, and the removal finds nothing counted); an event's
first removal is the one that may retract what an earlier batch counted (its pre-image is
the row that was counted), and any later removal of it in the batch removes a row the batch
withdrew. docs/spark-runner.md, "Input corrections".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.model.input_rules import input_of
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.input.fields import field_value, with_fields
from dataflow_core.spark.input.rows import content_hash
from dataflow_core.spark.platform.tables import latest_snapshot, table_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FEED_PROPERTY = "delta.enableChangeDataFeed"
CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
REMOVALS = ("delete", "update_preimage")
_ID, _AT, _LAST_REMOVAL, _NTH = "_dataflow_change_id", "_dataflow_change_at", "_dataflow_last_removal", "_dataflow_nth"
ENABLE_HINT = "ALTER TABLE {table} SET TBLPROPERTIES ({prop} = true)"


def feed_enabled(spark: "SparkSession", table: str) -> bool:
    """Whether the input table records its change data feed (its table property)."""
    found = latest_snapshot(spark, table_path(spark, table)).metadata().configuration().get(FEED_PROPERTY)
    return found.isDefined() and str(found.get()).strip().lower() == "true"


def is_feed(rows: "DataFrame") -> bool:
    """Whether a stream batch's rows are changes (read with `readChangeFeed`)."""
    return CHANGE_TYPE in rows.columns


@dataclass
class Changes:
    """A batch's changes apart: `additions`, the rows to accept (input columns only);
    `removals`, each event's first removal (input columns only), the row that may have been
    counted; `counts`, one row: `inserts`, `deletes`, `updates` (pre-images), `withdrawn`
    (additions a later removal in the batch takes back) and `repeated` (removals of rows
    the batch withdrew)."""

    additions: "DataFrame"
    removals: "DataFrame"
    counts: "DataFrame"


def split_changes(spec: PipelineSpec, rows: "DataFrame") -> Changes:
    """The batch's changes (`rows`, with `FEED_COLUMNS`) apart, by event id in commit order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = [c for c in rows.columns if c not in FEED_COLUMNS]
    removal = F.col(CHANGE_TYPE).isin(*REMOVALS)
    event_id = next(f for f in input_of(spec).fields if f.column == "event_id")
    ids = with_fields(spec, rows).select(*[F.col(f"`{c}`") for c in rows.columns],
                                         field_value(event_id).alias(_ID))
    # a commit's removals before its additions (an update's pre-image before its post-image)
    at = F.col(COMMIT_VERSION) * 2 + F.when(removal, F.lit(0)).otherwise(F.lit(1))
    event = Window.partitionBy(_ID)
    marked = ids.withColumn(_AT, at).withColumn(_LAST_REMOVAL, F.max(F.when(removal, F.col(_AT))).over(event))
    withdrawn = ~removal & F.col(_LAST_REMOVAL).isNotNull() & (F.col(_AT) < F.col(_LAST_REMOVAL))
    marked = marked.withColumn("_withdrawn", withdrawn).withColumn(
        _NTH, F.when(removal, F.row_number().over(Window.partitionBy(_ID, removal).orderBy(_AT, content_hash(ids)))))
    own = [F.col(f"`{c}`") for c in columns]
    counts = marked.agg(
        F.count_if(F.col(CHANGE_TYPE) == "insert").alias("inserts"),
        F.count_if(F.col(CHANGE_TYPE) == "delete").alias("deletes"),
        F.count_if(F.col(CHANGE_TYPE) == "update_preimage").alias("updates"),
        F.count_if(F.col("_withdrawn")).alias("withdrawn"),
        F.count_if(removal & (F.col(_NTH) > 1)).alias("repeated"),
    )
    return Changes(marked.where(~removal & ~F.col("_withdrawn")).select(*own),
                   marked.where(removal & (F.col(_NTH) == 1)).select(*own), counts)

