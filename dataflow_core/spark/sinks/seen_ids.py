"""`<pipeline>__seen_ids`: the event ids micro-batches (and backfills that correct them)
have counted, so a later delivery of the same event is a duplicate.

An id is kept until a delivery of its event would be dropped as too late anyway: until the
watermark is past its event time plus the first stage's window reach (`WindowFn.reach`: the
window size, or a session's gap) and allowed lateness, plus a day (`SEEN_HORIZON`) to spare.
Ids of global windows, or windows of unknown reach, are kept (maintenance may not forget them).

Where the first stage's windows overlap (sliding windows: an element in several windows, each
known from its time, `overlapping`), a backfill owns only the windows that start in its range,
so an event near the range's edges is counted in some of its windows and not in others. Its id
is then remembered with the span of window starts it was counted in (`OWNED`, a row per span);
a later delivery goes into its other windows only (`model.group_by_window.Element.counted`), and
is a duplicate only once every window of it is counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.model.time import Instant, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.pipelines import layout
from dataflow_core.spark.platform.delta import Txn, add_columns, append_rows, merge_rows
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from dataflow_core.spark.sinks.batches import records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEEN_HORIZON = parse_duration("1d")
OWNED = ("owned_start", "owned_end")
"""A seen id's span `[owned_start, owned_end)` of window starts: counted in the windows starting
there only. Null (or absent, in tables from before spans): counted in every window of its event."""


def overlapping(spec: PipelineSpec) -> bool:
    """Whether the first stage's windows overlap, each element's known from its time (a SQL
    form of several windows, none of one): the pipelines whose seen ids may carry spans."""
    window_fn = spec.stages[0].strategy.window_fn
    return window_fn.sql_window("event_ms") is None and window_fn.sql_windows("event_ms") is not None


def counted_spans(spec: PipelineSpec, candidates: "DataFrame", seen: "DataFrame") -> "DataFrame":
    """`candidates` (rows with `event_id`, `event_ms` and `_seen`, true for an id counted in
    every window) with `counted`: the spans of window starts its windows hold it in, from the
    seen ids with spans (`OWNED`); an id whose every window is in them is marked `_seen`."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.execute.keyed_stage import COUNTED

    spans = seen.where(F.col(OWNED[0]).isNotNull()).groupBy("event_id").agg(F.collect_list(F.struct(
        F.col(OWNED[0]).alias("start"), F.col(OWNED[1]).alias("end"))).alias(COUNTED))
    windows = spec.stages[0].strategy.window_fn.sql_windows("event_ms")
    every_window_held = F.expr(f"forall({windows}, w -> exists({COUNTED}, c -> w.start >= c.start AND w.start < c.end))")
    return candidates.join(spans, "event_id", "left").withColumn(
        "_seen", F.when(F.col("_seen").isNull() & F.col(COUNTED).isNotNull() & every_window_held, F.lit(True))
        .otherwise(F.col("_seen")))


def with_owned_span(spec: PipelineSpec, els: "DataFrame", start: Instant, end: Instant) -> "DataFrame":
    """`els` with the span `OWNED` of window starts `[start, end)` (a backfill's range), null for
    an element whose windows all start in it."""
    from pyspark.sql import functions as F

    windows = spec.stages[0].strategy.window_fn.sql_windows("event_ms")
    inside = F.expr(f"forall({windows}, w -> w.start >= {start}L AND w.start < {end}L)")
    return els.withColumn(OWNED[0], F.when(inside, F.lit(None)).otherwise(F.lit(start)).cast("bigint")).withColumn(
        OWNED[1], F.when(inside, F.lit(None)).otherwise(F.lit(end)).cast("bigint"))


def seen_table(spec: PipelineSpec) -> str:
    return layout.seen_ids(spec)


def horizon(spec: PipelineSpec, watermark: Instant) -> Instant | None:
    """Ids of events before this time can be forgotten at `watermark` (None: keep all)."""
    dropped_before = spec.stages[0].strategy.dropped_before(watermark)
    return None if dropped_before is None else dropped_before - SEEN_HORIZON


def remember_ids(
    spark, spec: PipelineSpec, els: "DataFrame", batch: int, txn: Txn, watermark: Instant | None = None,
    unseen: bool = False, forget: "DataFrame | None" = None,
) -> None:
    """Event ids of `els` join the seen set. With `watermark`, ids beyond the `horizon` are
    forgotten (a delivery that late would be dropped as too late anyway). `unseen`: the
    caller knows none of the ids is in the set (a micro-batch's, checked against the version
    it reads, which nothing else writes while it has the pipeline locked), so they are appended
    rather than merged on the id. Spans (`OWNED` columns of `els`) are kept: an id is merged
    on its id and span, so a row per span it was counted in. `forget`: event ids (`event_id`,
    none of them in `els`) taken back out of the windows that counted them everywhere (an
    input delete), which leave the set in the same commit."""
    from pyspark.sql import functions as F

    name = seen_table(spec)
    before = None if watermark is None else horizon(spec, watermark)
    spans = list(OWNED) if overlapping(spec) else []  # null: counted in every window
    ids = els.select("event_id", "event_ms", F.lit(batch).cast("bigint").alias("batch"),
                     *[F.col(c) if c in els.columns else F.lit(None).cast("bigint").alias(c) for c in spans])
    if unseen and before is None and forget is None:
        append_rows(spark, name, ids, txn)
        return
    rows = ids.withColumn("_delete", F.lit(False))
    if forget is not None:
        rows = rows.unionByName(forget.select("event_id", F.lit(None).cast("bigint").alias("event_ms"),
                                              F.lit(batch).cast("bigint").alias("batch"),
                                              *[F.lit(None).cast("bigint").alias(c) for c in spans],
                                              F.lit(True).alias("_delete")))
    if spans and table_exists(spark, name):  # a table from before spans: its ids were counted everywhere
        add_columns(spark, name, {c: "bigint" for c in OWNED})
    if before is not None and table_exists(spark, name):
        expired = read_table(spark, name).where(F.col("event_ms") < F.lit(before)).select(
            "event_id", "event_ms", "batch", *spans, F.lit(True).alias("_delete"))
        rows = rows.unionByName(expired)
    merge_rows(spark, name, rows, ["event_id", *spans], delete=True, update=False, txn=txn)


def expire_seen_ids(spark: "SparkSession", spec: PipelineSpec) -> int:
    """Forget event ids beyond the horizon (see `remember_ids`) outside a batch: for
    maintenance. Returns how many were deleted."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    name = seen_table(spec)
    finished = [r for r in records(spark, spec) if r.status == "finished"]
    if not table_exists(spark, name) or not finished:
        return 0
    before = horizon(spec, finished[0].watermarks.get("input", BEGINNING_OF_TIME))
    if before is None:
        return 0
    table = DeltaTable.forPath(spark, table_path(spark, name))
    expired = table.toDF().where(F.col("event_ms") < F.lit(before)).count()
    if expired:
        table.delete(F.col("event_ms") < F.lit(before))
    return expired
