"""A pipeline's expressions evaluated guarded: each of its fields (`model.input_rules`) once
per row, so that a row an expression fails on (an ANSI overflow, a malformed cast, an index
out of bounds) gives null there instead of failing the job, and the rules then quarantine
it as `value_invalid` naming the expression (`explained` adds Spark's own error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.model.input_rules import Field, input_of
from dataflow_core.pipelines.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

REASON = "quarantine_reason"
_FIELD = "_dataflow_field_"  # a field's guarded value (`with_fields`)
FAILS = " fails on this row"
"""What a quarantine reason says after an expression that failed on the row."""


def guarded(spark: "SparkSession", expression: "Column") -> "Column":
    """`expression` evaluated so that an error on a row (an ANSI overflow, a malformed cast,
    a division by zero...) gives null instead of failing the job: a struct whose `v` is the
    value, itself null only where evaluating it failed (a null value gives a struct holding
    null). It is Spark's own `TryEval` (what its `try_*` functions are built on) over the
    whole expression: SQL offers no `try` of an arbitrary expression, `try_cast` rewriting
    would miss arithmetic and functions, and turning ANSI off would make errors wrong values
    (an overflow that wraps) instead of nulls."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise DataflowError("the input rules evaluate each row under Spark's TryEval, which needs a classic Spark "
                            "session (not Spark Connect): unset SPARK_REMOTE")
    utils = jvm.org.apache.spark.sql.classic.ExpressionUtils
    attempt = jvm.org.apache.spark.sql.catalyst.expressions.TryEval(utils.expression(F.struct(expression.alias("v"))._jc))
    return Column(utils.column(attempt))


def field_column(f: Field) -> str:
    return f"{_FIELD}{f.role}_{f.column}"


def _field_expression(f: Field) -> "Column":
    """The field as the element holds it: times as ms since the epoch, the id as text."""
    from pyspark.sql import functions as F

    if f.role in ("event_time", "ingest_time"):
        return F.unix_millis(F.expr(f.expression))
    if f.role == "event_id":
        return F.expr(f.expression).cast("string")
    return F.expr(f.expression)


def with_fields(spec: PipelineSpec, rows: "DataFrame") -> "DataFrame":
    """`rows` plus, per expression of the input (`model.input_rules`: the fields and
    `where`), its guarded value (a struct, null where the expression fails on the row):
    every later rule and element column reads these, so no expression of the pipeline is
    evaluated unguarded. A no-op on rows that have them."""
    desc = input_of(spec)
    missing = [f for f in desc.evaluated if field_column(f) not in rows.columns]
    if not missing:
        return rows
    from pyspark.errors import AnalysisException

    try:
        return rows.withColumns({field_column(f): guarded(rows.sparkSession, _field_expression(f)) for f in missing})
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0]
        raise DataflowError(f"pipeline {spec.name!r}: its settings do not fit input table {spec.input_table}: "
                            f"{first}") from None


def selected(spec: PipelineSpec, rows: "DataFrame") -> "DataFrame":
    """The rows that are the pipeline's input (its `where`), with their fields
    (`with_fields`). A row `where` fails on is kept: it is quarantined (`value_invalid`),
    neither dropped unseen nor fatal."""
    from pyspark.sql import functions as F

    rows = with_fields(spec, rows)
    where = next((f for f in input_of(spec).evaluated if f.role == "where"), None)
    if where is None:
        return rows
    return rows.where(failed(where) | F.coalesce(field_value(where), F.lit(False)))


def field_value(f: Field) -> "Column":
    """A field's value (null where it is null or its expression failed), from `with_fields`."""
    from pyspark.sql import functions as F

    return F.col(field_column(f)).getField("v")


def failed(f: Field) -> "Column":
    from pyspark.sql import functions as F

    return F.col(field_column(f)).isNull()


EXPLAINED = 20
"""At most this many rows of a write of bad rows get Spark's own error beside `value_invalid`."""
FAILS = " fails on this row"


def explained(spec: PipelineSpec, bad: "DataFrame") -> "DataFrame":
    """Bad rows (`quarantined`'s columns) with Spark's own error added to the reason of each
    of the first `EXPLAINED` rows an expression fails on (`value_invalid: value (...) fails
    on this row ([NUMERIC_VALUE_OUT_OF_RANGE...] ...)`): the guarded evaluation only knows that
    it failed, so the expression is evaluated again, unguarded, on that one row, on the
    driver. Costs a job only when some row's expression failed."""
    from pyspark.sql import functions as F

    inputs = [c for c in bad.columns if c != REASON]
    content = F.to_json(F.struct(*[F.col(f"`{c}`") for c in inputs]))
    failing = bad.where(F.col(REASON).contains(FAILS)).select(content.alias("j"), REASON).limit(EXPLAINED).collect()
    if not failing:
        return bad
    schema = bad.select(*[F.col(f"`{c}`") for c in inputs]).schema
    reason = F.col(REASON)
    for row in failing:
        text = _with_errors(bad.sparkSession, spec, schema, row["j"], row[REASON])
        if text != row[REASON]:
            reason = F.when(content == F.lit(row["j"]), F.lit(text)).otherwise(reason)
    return bad.withColumn(REASON, reason)


def _with_errors(spark: "SparkSession", spec: PipelineSpec, schema, content: str, reason: str) -> str:
    """`reason` with, after each expression that fails on the row (`content`, its input
    columns as JSON), the first line of Spark's error evaluating it."""
    from pyspark.sql import functions as F

    # One row of literals: the optimizer folds the expression on the driver, so its error
    # comes without a failed task (and its stack trace in the log).
    one = spark.sql("SELECT 1 AS one").select(F.from_json(F.lit(content), schema).alias("r")).select("r.*")
    for f in input_of(spec).evaluated:
        said = f"{f.label}{FAILS}"
        if said not in reason:
            continue
        try:
            one.select(F.to_json(F.struct(_field_expression(f).alias("v")))).collect()
        except Exception as exc:  # noqa: BLE001 - the row's error is what is wanted
            text = " ".join(str(exc).split()) or type(exc).__name__
            error = text.split(". ")[0].rstrip(".")[:300]
            reason = reason.replace(said, f"{said} ({error})", 1)
    return reason
