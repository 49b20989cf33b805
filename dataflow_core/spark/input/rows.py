"""A pipeline's input as the model's elements: select, check, quarantine, deduplicate.

Every row read ends up in exactly one place: quarantined (with its reasons), a duplicate
delivery of an event already accepted, or an accepted element. The columns of an element
are the first stage's key columns, `value`, `event_ms`, `ingest_ms` and `event_id`.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import Instant
from dataflow_core.pipelines.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REASON = "quarantine_reason"
REFUSED = "_dataflow_refused"
DELIVERIES = "_dataflow_deliveries"
DUPLICATES = "_dataflow_duplicates"
_TAGS = "_dataflow_failed"


@dataclass(frozen=True)
class EventRange:
    """Event time `[start, end)` in ms; rows belong to it by event time, or by ingest time
    when their event time is unusable (null or beyond the allowed skew)."""

    start: Instant
    end: Instant

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise DataflowError(f"empty range: end {_iso(self.end)} is not after start {_iso(self.start)}")

    def widened(self, before: int, after: int) -> "EventRange":
        return EventRange(self.start - before, self.end + after)


def _iso(ms: Instant) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def pipeline_rules(spec: PipelineSpec) -> list[tuple[str, "Column"]]:
    """(reason, passes) pairs: the pipeline's own checks, after the input suite's."""
    from pyspark.sql import functions as F

    skew_ms = spec.max_skew
    event = F.expr(spec.event_time)
    ingest = F.expr(spec.ingest_time)
    rules = [(f"key_{c}_not_null", F.expr(e).isNotNull()) for c, e in spec.key.items()]
    rules += [
        ("event_id_not_null", F.expr(spec.event_id).isNotNull()),
        ("event_time_not_null", event.isNotNull()),
        ("ingest_time_not_null", ingest.isNotNull()),
        (
            "event_time_beyond_skew",
            event.isNull() | ingest.isNull()
            | (F.unix_millis(event) <= F.unix_millis(ingest) + F.lit(skew_ms)),
        ),
        ("value_invalid", F.expr(spec.value).isNotNull()),
    ]
    return [(name, F.coalesce(ok, F.lit(False))) for name, ok in rules]


def read_rows(spark: "SparkSession", spec: PipelineSpec, span: EventRange, version: int | None = None) -> "DataFrame":
    """The input rows of `span` that the pipeline takes (its `where`), reading only the
    partitions that can hold them: the span's dates, plus dates after tomorrow, which only
    rows with broken clocks can be in. `version`: the input as of that version, not the latest."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.delta import read_as_of
    from dataflow_core.spark.platform.tables import read_table

    missing_or_latest = version is None or version < 0  # read_table names a missing table
    df = read_table(spark, spec.input_table) if missing_or_latest else read_as_of(spark, spec.input_table, version)
    missing = [c for c in (spec.partition_column,) if c and c not in df.columns]
    if missing:
        raise DataflowError(f"pipeline {spec.name!r}: input table {spec.input_table} has no column {missing[0]!r}")
    if spec.where:
        df = df.where(F.expr(spec.where))
    if spec.partition_column:
        first = F.to_date(F.timestamp_millis(F.lit(span.start)))
        last = F.to_date(F.timestamp_millis(F.lit(span.end)))
        part = F.col(spec.partition_column)
        df = df.where(part.between(first, last) | (part > F.date_add(F.current_date(), 1)))
    return df.where(in_range(spec, span))


def in_range(spec: PipelineSpec, span: EventRange) -> "Column":
    """Whether an input row belongs to `span` (see `EventRange`)."""
    from pyspark.sql import functions as F

    event_ms, ingest_ms = F.unix_millis(F.expr(spec.event_time)), F.unix_millis(F.expr(spec.ingest_time))
    usable = event_ms.isNotNull() & (ingest_ms.isNull() | (event_ms <= ingest_ms + F.lit(spec.max_skew)))
    when = F.when(usable, event_ms).otherwise(ingest_ms)
    return F.coalesce((when >= F.lit(span.start)) & (when < F.lit(span.end)), F.lit(False))


def tag_rows(spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame") -> "DataFrame":
    """`rows` plus `_dataflow_failed`: the names of the rules each row breaks."""
    from pyspark.sql import functions as F

    rules = []
    if spec.quality_suite:
        from dataflow_core.spark.input.expectations import load_rules

        suite = load_rules(spec.quality_suite)
        suite.check_columns(rows.columns)
        rules += [(rule.name, rule.passes()) for rule in suite.rules]
    rules += pipeline_rules(spec)
    # The names are gathered only for a row that breaks a rule: gathering them (a lambda
    # over an array) runs without Spark's generated code, and nearly every row passes.
    passes = functools.reduce(lambda a, b: a & b, [ok for _, ok in rules])
    named = F.filter(F.array(*[F.when(~ok, F.lit(name)) for name, ok in rules]), lambda t: t.isNotNull())
    return rows.withColumn(_TAGS, F.when(passes, F.array().cast("array<string>")).otherwise(named))


def quarantined(tagged: "DataFrame") -> "DataFrame":
    """Bad rows with every input column and the reasons, joined by '; '."""
    from pyspark.sql import functions as F

    return (
        tagged.where(F.size(_TAGS) > 0)
        .withColumn(REASON, F.array_join(F.col(_TAGS), "; "))
        .drop(_TAGS)
    )


def elements(spec: PipelineSpec, tagged: "DataFrame", within: "Column | None" = None,
             duplicates_within: "Column | None" = None) -> "DataFrame":
    """Accepted rows as elements, each event once: the first delivery (earliest ingest)
    of each event id wins; later deliveries are duplicates.

    With `within` (the rows a run accounts for, e.g. those of its range), one pass over the
    input also yields what its ledger and quarantine need: the bad rows for which `within`
    holds come along, each one, in `REFUSED` (their input columns and reasons, as
    `quarantined` gives them; null for an element), and each element has in `DELIVERIES`
    how many of its event's deliveries `within` holds for (0 for a refused row).

    With `within` or `duplicates_within`, each element also has in `DUPLICATES` how many
    deliveries of its event (for which that condition holds) lost the first-delivery dedup:
    counted from the dedup itself, so that a ledger built on it can fail."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ok = F.size(_TAGS) == 0
    cols = [(c, F.expr(e)) for c, e in spec.key.items()] + [
        ("value", F.expr(spec.value)),
        ("event_ms", F.unix_millis(F.expr(spec.event_time))),
        ("ingest_ms", F.unix_millis(F.expr(spec.ingest_time))),
        ("event_id", F.expr(spec.event_id).cast("string")),
    ]
    if within is None:
        counted = F.lit(True) if duplicates_within is None else duplicates_within
        rows = tagged.where(ok).select(*[e.alias(c) for c, e in cols], counted.cast("int").alias("_within"))
        event = Window.partitionBy("event_id").orderBy("ingest_ms", "event_ms")
        whole = event.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        kept = F.col("_delivery") == 1
    else:
        inputs = [F.col(f"`{c}`") for c in tagged.columns if c != _TAGS]
        refused = F.when(~ok, F.struct(*inputs, F.array_join(F.col(_TAGS), "; ").alias(REASON)))
        rows = tagged.where(ok | within).select(
            *[F.when(ok, e).alias(c) for c, e in cols], refused.alias(REFUSED),
            (ok & within).cast("int").alias("_within"), (~ok).alias("_refused"))
        # One window spec (partitioned on a column, not an expression) for both functions:
        # one shuffle and one sort of the input.
        event = Window.partitionBy("event_id", "_refused").orderBy("ingest_ms", "event_ms")
        whole = event.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        rows = rows.withColumn(DELIVERIES, F.sum("_within").over(whole))  # refused rows apart: none is a duplicate
        kept = (F.col("_delivery") == 1) | F.col("_refused")
    rows = rows.withColumn("_delivery", F.row_number().over(event))
    if within is not None or duplicates_within is not None:  # same window: no second shuffle or sort
        lost = F.when(F.col("_delivery") > 1, F.col("_within")).otherwise(F.lit(0))
        rows = rows.withColumn(DUPLICATES, F.sum(lost).over(whole).cast("bigint"))
    return rows.where(kept).drop("_delivery", "_within", "_refused")


def read_counts(tagged: "DataFrame") -> "DataFrame":
    """One row: `read`, the rows read, and `bad`, how many are quarantined."""
    from pyspark.sql import functions as F

    return tagged.agg(F.count(F.lit(1)).alias("read"), F.count_if(F.size(_TAGS) > 0).alias("bad"))
