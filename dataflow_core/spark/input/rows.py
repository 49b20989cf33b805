"""A pipeline's input as the model's elements: select, check, quarantine, deduplicate.

Every row read ends up in exactly one place: quarantined (with its reasons), a duplicate
delivery of an event already accepted, or an accepted element. The columns of an element
are the first stage's key columns, `value`, `event_ms`, `ingest_ms` and `event_id`.

What a row must pass, and which delivery counts, is declared in `model.input_rules`; this
module renders it in Spark (the input gate uses the same rendering). Each of the pipeline's
expressions is evaluated once per row, guarded (`fields`): a row it fails on (an ANSI
overflow such as `CAST(1e20 AS DECIMAL(18,3))`, a malformed cast, an index out of bounds) is
quarantined as `value_invalid` with the expression named, and the rest of its batch counts.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.input_rules import (
    DELIVERY_ORDER, Check, InputDescription, InputRule, ProcessingTime, input_of,
)
from dataflow_core.model.time import Instant
from dataflow_core.pipelines.spec import PipelineSpec
from dataflow_core.spark.input.fields import (
    FAILS, REASON, failed, field_column, field_value, guarded, selected, with_fields,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REFUSED = "_dataflow_refused"
DELIVERIES = "_dataflow_deliveries"
DUPLICATES = "_dataflow_duplicates"
_TAGS = "_dataflow_failed"
_CONTENT = "_dataflow_content"


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
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()
    except (ValueError, OverflowError, OSError):  # beyond Python's years 1 to 9999
        return f"{ms} ms after the epoch"


def rule_predicates(spec: PipelineSpec, rows: "DataFrame", at: ProcessingTime | None = None) -> list[tuple[InputRule, "Column", "Column"]]:
    """(rule, passes, reason) per rule of the pipeline's input (`model.input_rules`) over
    `rows` as `with_fields` gives them: `passes` is never null; `reason` is the text a
    quarantined row gets for it (the rule's name, and what failed for `value_invalid`).
    The one rendering of the rules in Spark: the runners tag rows with it and the input gate
    builds its suite's columns from it."""
    desc = input_of(spec)
    return [(rule, *_render(desc, rule, rows)) for rule in desc.rules(at)]


def _render(desc: InputDescription, rule: InputRule, rows: "DataFrame") -> tuple["Column", "Column"]:
    from pyspark.sql import functions as F

    name = F.lit(rule.name)
    event, ingest = field_value(desc.event_time), field_value(desc.ingest_time)
    if rule.check is Check.PRESENT:
        ok = failed(rule.field) | field_value(rule.field).isNotNull()  # a failure is value_invalid's
    elif rule.check is Check.WITHIN_SKEW:
        ok = event.isNull() | ingest.isNull() | (event <= ingest + F.lit(rule.limit_ms))
    elif rule.check is Check.NOT_FUTURE:
        limit = F.lit(rule.limit_ms)
        ok = (event.isNull() | (event <= limit)) & (ingest.isNull() | (ingest <= limit))
    else:
        value = field_value(desc.value)
        details = [F.when(failed(f), F.lit(f"{f.label} fails on this row")) for f in desc.evaluated]
        ok = functools.reduce(lambda a, b: a & b, [~failed(f) for f in desc.evaluated]) & value.isNotNull()
        value_type = rows.schema[field_column(desc.value)].dataType.fields[0].dataType.typeName()
        if value_type in ("double", "float"):
            infinite = F.abs(value) == F.lit(float("inf"))
            details += [F.when(F.isnan(value), F.lit("value is NaN")),
                        F.when(infinite, F.lit("value is infinite"))]
            ok = ok & ~F.isnan(value) & ~infinite
        detail = F.array_join(F.filter(F.array(*details), lambda d: d.isNotNull()), ", ")
        name = F.when(detail == "", name).otherwise(F.concat(name, F.lit(": "), detail))
    return F.coalesce(ok, F.lit(False)), name


def read_rows(spark: "SparkSession", spec: PipelineSpec, span: EventRange, version: int | None = None) -> "DataFrame":
    """The input rows of `span` that the pipeline takes (its `where`), reading only the
    partitions that can hold them: the span's dates, plus dates after tomorrow, which only
    rows with broken clocks can be in. `version`: the input as of that version, not the latest.
    The rows come with their fields (`selected`)."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.delta import read_as_of
    from dataflow_core.spark.platform.tables import read_table

    missing_or_latest = version is None or version < 0  # read_table names a missing table
    df = read_table(spark, spec.input_table) if missing_or_latest else read_as_of(spark, spec.input_table, version)
    missing = [c for c in (spec.partition_column,) if c and c not in df.columns]
    if missing:
        raise DataflowError(f"pipeline {spec.name!r}: input table {spec.input_table} has no column {missing[0]!r}")
    if spec.partition_column:
        first = F.to_date(F.timestamp_millis(F.lit(span.start)))
        last = F.to_date(F.timestamp_millis(F.lit(span.end)))
        part = F.col(spec.partition_column)
        df = df.where(part.between(first, last) | (part > F.date_add(F.current_date(), 1)))
    return selected(spec, df).where(in_range(spec, span))


def in_range(spec: PipelineSpec, span: EventRange) -> "Column":
    """Whether an input row (with its fields, `with_fields`) belongs to `span` (see
    `EventRange`)."""
    from pyspark.sql import functions as F

    desc = input_of(spec)
    event_ms, ingest_ms = field_value(desc.event_time), field_value(desc.ingest_time)
    usable = event_ms.isNotNull() & (ingest_ms.isNull() | (event_ms <= ingest_ms + F.lit(desc.max_skew)))
    when = F.when(usable, event_ms).otherwise(ingest_ms)
    return F.coalesce((when >= F.lit(span.start)) & (when < F.lit(span.end)), F.lit(False))


def tag_rows(spark: "SparkSession", spec: PipelineSpec, rows: "DataFrame", at: ProcessingTime | None = None) -> "DataFrame":
    """`rows` with their fields (`with_fields`) plus `_dataflow_failed`: the reasons of the
    rules each row breaks (`row_rules`)."""
    rows = with_fields(spec, rows)
    return rows.withColumn(_TAGS, broken([(ok, reason) for _, ok, reason in row_rules(spec, rows, at)]))


def row_rules(spec: PipelineSpec, rows: "DataFrame", at: ProcessingTime | None = None) -> list[tuple[str, "Column", "Column"]]:
    """(name, passes, reason) of every rule a row of the pipeline must pass: its own input
    suite's (`quality_suite`), then the model's input rules (`rule_predicates`; future-dated
    rows only when the processing time `at` is known). A suite rule named like one of the
    model's is part of it (a row breaking either is refused once, under that name)."""
    model = rule_predicates(spec, rows, at)
    extra: dict[str, "Column"] = {}
    out: list[tuple[str, "Column", "Column"]] = []
    if spec.quality_suite:
        from dataflow_core.spark.input.expectations import load_rules

        suite = load_rules(spec.quality_suite)
        suite.check_columns(input_columns(rows))
        names = {rule.name for rule, _, _ in model}
        for rule in suite.rules:
            ok, reason = _suite_rule(rows, rule)
            if rule.name in names:
                extra[rule.name] = ok
            else:
                out.append((rule.name, ok, reason))
    for rule, ok, reason in model:
        out.append((rule.name, ok & extra[rule.name] if rule.name in extra else ok, reason))
    return out


def _suite_rule(rows: "DataFrame", rule) -> tuple["Column", "Column"]:
    """(passes, reason) of a rule of the pipeline's own suite, evaluated guarded: a rule whose
    check fails on a row (an ANSI cast of a malformed text compared with a number, say) is
    broken by that row, which is quarantined saying so, instead of failing the job."""
    from pyspark.sql import functions as F

    evaluated = guarded(rows.sparkSession, rule.passes())
    failed = F.lit(f"{rule.name}: the rule's check{FAILS}")
    return F.coalesce(evaluated["v"], F.lit(False)), F.when(evaluated.isNull(), failed).otherwise(_lit(rule.name))


def broken(rules: "list[tuple[Column, Column]]") -> "Column":
    """The reasons (`(passes, reason)` pairs) a row breaks, in order: an empty array when it
    passes them all. The reasons are gathered only for a row that breaks a rule: gathering
    them (a lambda over an array) runs without Spark's generated code, and nearly every row
    passes."""
    from pyspark.sql import functions as F

    if not rules:
        return F.array().cast("array<string>")
    passes = functools.reduce(lambda a, b: a & b, [ok for ok, _ in rules])
    named = F.filter(F.array(*[F.when(~ok, reason) for ok, reason in rules]), lambda t: t.isNotNull())
    return F.when(passes, F.array().cast("array<string>")).otherwise(named)


def _lit(text: str) -> "Column":
    from pyspark.sql import functions as F

    return F.lit(text)


def input_columns(rows: "DataFrame") -> list[str]:
    """The input's own columns of `rows` (not the ones the input layer adds)."""
    return [c for c in rows.columns if not c.startswith("_dataflow_")]


def quarantined(tagged: "DataFrame") -> "DataFrame":
    """Bad rows with every input column and the reasons, joined by '; '."""
    from pyspark.sql import functions as F

    return (
        tagged.where(F.size(_TAGS) > 0)
        .select(*[F.col(f"`{c}`") for c in input_columns(tagged)], F.array_join(F.col(_TAGS), "; ").alias(REASON))
    )


def element_columns(spec: PipelineSpec) -> list["Column"]:
    """An element's columns (the first stage's key columns, `value`, `event_ms`,
    `ingest_ms`, `event_id`) from rows with their fields (`with_fields`): the one mapping
    from a pipeline's input columns to elements (`model.input_rules.input_of`)."""
    return [field_value(f).alias(f.column) for f in input_of(spec).fields]


def content_hash(rows: "DataFrame") -> "Column":
    """A hash of a row's input columns: the last tie-breaker between deliveries of an event
    with equal times (`model.input_rules.DELIVERY_ORDER`), or between removals of an event
    in one commit (`input.changes`), so every run picks the same one. Columns Spark cannot
    hash (maps) are left out."""
    from pyspark.sql import functions as F

    hashable = [F.col(f"`{f.name}`") for f in rows.schema.fields
                if not f.name.startswith("_dataflow_") and _hashable(f.dataType)]
    return F.xxhash64(*hashable) if hashable else F.lit(0).cast("bigint")


def _hashable(data_type) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, MapType):
        return False
    if isinstance(data_type, ArrayType):
        return _hashable(data_type.elementType)
    if isinstance(data_type, StructType):
        return all(_hashable(f.dataType) for f in data_type.fields)
    return True


def elements(spec: PipelineSpec, tagged: "DataFrame", within: "Column | None" = None,
             duplicates_within: "Column | None" = None) -> "DataFrame":
    """Accepted rows as elements, each event once: the first delivery (earliest ingest,
    then event time, then content: `model.input_rules.DELIVERY_ORDER`) of each event id
    wins; later deliveries are duplicates.

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
    order = [*DELIVERY_ORDER, _CONTENT]
    if within is None:
        counted = F.lit(True) if duplicates_within is None else duplicates_within
        rows = tagged.where(ok).select(*element_columns(spec), content_hash(tagged).alias(_CONTENT),
                                       counted.cast("int").alias("_within"))
        event = Window.partitionBy("event_id").orderBy(*order)
        whole = event.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        kept = F.col("_delivery") == 1
    else:
        inputs = [F.col(f"`{c}`") for c in input_columns(tagged)]
        refused = F.when(~ok, F.struct(*inputs, F.array_join(F.col(_TAGS), "; ").alias(REASON)))
        rows = tagged.where(ok | within).select(
            *[F.when(ok, field_value(f)).alias(f.column) for f in input_of(spec).fields],
            F.when(ok, content_hash(tagged)).alias(_CONTENT), refused.alias(REFUSED),
            (ok & within).cast("int").alias("_within"), (~ok).alias("_refused"))
        # One window spec (partitioned on a column, not an expression) for both functions:
        # one shuffle and one sort of the input.
        event = Window.partitionBy("event_id", "_refused").orderBy(*order)
        whole = event.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
        rows = rows.withColumn(DELIVERIES, F.sum("_within").over(whole))  # refused rows apart: none is a duplicate
        kept = (F.col("_delivery") == 1) | F.col("_refused")
    rows = rows.withColumn("_delivery", F.row_number().over(event))
    if within is not None or duplicates_within is not None:  # same window: no second shuffle or sort
        lost = F.when(F.col("_delivery") > 1, F.col("_within")).otherwise(F.lit(0))
        rows = rows.withColumn(DUPLICATES, F.sum(lost).over(whole).cast("bigint"))
    return rows.where(kept).drop("_delivery", "_within", "_refused", _CONTENT)


def refused() -> "Column":
    """Whether a tagged row (`tag_rows`) breaks a rule."""
    from pyspark.sql import functions as F

    return F.size(_TAGS) > 0


def read_counts(tagged: "DataFrame") -> "DataFrame":
    """One row: `read`, the rows read, and `bad`, how many are quarantined."""
    from pyspark.sql import functions as F

    return tagged.agg(F.count(F.lit(1)).alias("read"), F.count_if(F.size(_TAGS) > 0).alias("bad"))
