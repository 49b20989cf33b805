"""The input gate: the input rows of an event-time range, checked by the generic input suite
(`expectations/dataflow_input.json`) with the pipeline's settings plus the pipeline's own
suite, before a backfill or micro-batch uses them."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.quality.outcome import REASON, GateOutcome, docs_dir_of, instant_ms, share, spec_of
from dataflow_core.spark.input.expectations import Rule, RuleSet, load_rules
from dataflow_core.quality.validate import validate_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dataflow_core.pipelines import PipelineSpec

INPUT_SUITE = "dataflow_input"
MAX_BAD_SHARE_ENV = "DATAFLOW_GATE_MAX_BAD_SHARE"
MAX_DUPLICATE_SHARE_ENV = "DATAFLOW_GATE_MAX_DUPLICATE_SHARE"
DEFAULT_MAX_BAD_SHARE = 0.02  # a rule broken by more than 2 % of the range's rows fails the gate
DEFAULT_MAX_DUPLICATE_SHARE = 0.05


def input_rules(spec: "PipelineSpec", max_bad_share: float | None = None,
                max_duplicate_share: float | None = None) -> RuleSet:
    """The input gate's suite for `spec`: the generic rules with the pipeline's settings,
    then the pipeline's own input suite, every row rule tolerating `max_bad_share`."""
    bad = share(MAX_BAD_SHARE_ENV, DEFAULT_MAX_BAD_SHARE) if max_bad_share is None else max_bad_share
    dup = (share(MAX_DUPLICATE_SHARE_ENV, DEFAULT_MAX_DUPLICATE_SHARE)
           if max_duplicate_share is None else max_duplicate_share)
    mostly = round(1.0 - bad, 6)
    rules = load_rules(INPUT_SUITE, params={
        "mostly": mostly,
        "max_skew_seconds": spec.max_skew / 1000,
        "min_unique_share": round(1.0 - dup, 6),
    })
    if spec.quality_suite:
        own = load_rules(spec.quality_suite)
        tolerant = tuple(
            Rule(r.name, r.expectation_type, {**r.kwargs, "mostly": mostly} if mostly < 1 else r.kwargs,
                 r.description)
            for r in own.rules
        )
        rules = rules.plus(tolerant, name=f"{spec.name}_input")
    else:
        rules = RuleSet(f"{spec.name}_input", rules.rules, rules.source, rules.meta)
    return rules


def input_frame(spark: "SparkSession", spec: "PipelineSpec", start, end) -> "DataFrame":
    """The input rows of event-time range [start, end) (as the backfill selects them)
    plus the gate's derived `dataflow_*` columns."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from dataflow_core.spark.input.rows import EventRange, read_rows

    span = EventRange(instant_ms(start, "start"), instant_ms(end, "end"))
    rows = read_rows(spark, spec, span)
    complete = F.lit(True)
    for expression in spec.key.values():
        complete = complete & F.expr(expression).isNotNull()
    key = F.when(complete, F.to_json(F.struct(*[F.expr(e).alias(c) for c, e in spec.key.items()])))
    event, ingest = F.expr(spec.event_time), F.expr(spec.ingest_time)
    try:
        return rows.select(
            *rows.columns,
            key.alias("dataflow_key"),
            event.alias("dataflow_event_time"),
            ingest.alias("dataflow_ingest_time"),
            F.expr(spec.event_id).cast("string").alias("dataflow_event_id"),
            F.expr(spec.value).alias("dataflow_value"),
            ((F.unix_micros(event.cast("timestamp")) - F.unix_micros(ingest.cast("timestamp"))) / 1e6)
            .alias("dataflow_skew_seconds"),
        )
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0]
        raise DataflowError(
            f"pipeline {spec.name!r}: its settings do not fit input table {spec.input_table}: {first}"
        ) from None


def gate_input(
    spark: "SparkSession",
    pipeline: "str | PipelineSpec",
    start,
    end,
    run_id: str,
    docs_dir: str | os.PathLike[str] | None = None,
) -> GateOutcome:
    """Validate the input rows of [start, end); quarantine rows breaking a row rule into
    `<pipeline>__quarantine` (same row ids as the backfill's, so a row is there once)."""
    from pyspark.sql import functions as F

    from dataflow_core.quality.split import failed_rules
    from dataflow_core.spark.sinks.quarantine import quarantine_table, write_quarantine

    spec = spec_of(pipeline)
    rules = input_rules(spec)
    frame = input_frame(spark, spec, start, end).persist()
    try:
        n = frame.count()
        report = validate_dataframe(frame, rules, docs_dir=docs_dir_of(spark, docs_dir),
                                    run_name=f"{run_id}:input:{spec.name}")
        input_cols = [c for c in frame.columns if not c.startswith("dataflow_")]
        tagged = frame.withColumn("_failed", failed_rules(rules))
        bad = tagged.where(F.size("_failed") > 0).select(
            *input_cols, F.array_join("_failed", "; ").alias(REASON),
        ).persist()
        quarantined = bad.count()
        if quarantined:
            write_quarantine(spark, spec, bad, run_id)
        bad.unpersist()
    finally:
        frame.unpersist()
    notes = (f"range [{_iso(start)}, {_iso(end)}) of table {spec.input_table}",)
    return GateOutcome("input", spec.input_table, report, n, quarantined, quarantine_table(spec), notes)


def _iso(value) -> str:
    return dt.datetime.fromtimestamp(instant_ms(value, "time") / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
