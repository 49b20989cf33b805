"""The input gate: the input rows of an event-time range, checked before a backfill or
micro-batch uses them by the model's input rules (`model.input_rules`, rendered in Spark by
`spark.input.rows` exactly as the runners tag rows, so the gate and a backfill agree on
every row), the table-level rules of `expectations/dataflow_input.json` and the pipeline's
own suite."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Callable

from dataflow_core.quality.outcome import GateOutcome, docs_dir_of, instant_ms, share, spec_of
from dataflow_core.spark.input.expectations import Rule, RuleSet, load_rules
from dataflow_core.quality.validate import validate_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dataflow_core.model.input_rules import ProcessingTime
    from dataflow_core.pipelines import PipelineSpec

INPUT_SUITE = "dataflow_input"
MAX_BAD_SHARE_ENV = "DATAFLOW_GATE_MAX_BAD_SHARE"
DEFAULT_MAX_BAD_SHARE = 0.02  # a rule broken by more than 2 % of the range's rows fails the gate
GATE = "gate"
"""The command the gate has the pipeline locked as while it writes the quarantine (`jobs.locked_writes`)."""
GATE_WAIT_S = 300.0
"""How long the gate waits, its rows validated, for a working run that has the pipeline locked
(a micro-batch is done well within it) before it is busy."""


def input_rules(spec: "PipelineSpec", max_bad_share: float | None = None,
                max_duplicate_share: float | None = None, at: "ProcessingTime | None" = None) -> RuleSet:
    """The input gate's suite for `spec`: the table-level rules of the generic suite (the
    schema, the duplicate share), one expectation per input rule of the model
    (`model.input_rules`: the same names and checks as the runners' quarantine, each on its
    `dataflow_passes_<rule>` column of `input_frame`), then the pipeline's own input suite,
    every row rule tolerating `max_bad_share`. The duplicate share is the pipeline's own
    (`max_duplicate_share`, the rule micro-batches check too) unless given."""
    from dataflow_core.model.input_rules import DuplicateShare, input_of

    bad = share(MAX_BAD_SHARE_ENV, DEFAULT_MAX_BAD_SHARE) if max_bad_share is None else max_bad_share
    dup = input_of(spec).duplicate_share if max_duplicate_share is None else DuplicateShare(max_duplicate_share)
    mostly = round(1.0 - bad, 6)
    generic = load_rules(INPUT_SUITE, params={"min_unique_share": dup.min_unique_share})
    tolerance = {"mostly": mostly} if mostly < 1 else {}
    generated = tuple(
        Rule(rule.name, "expect_column_values_to_not_be_null", {"column": passes_column(rule.name), **tolerance},
             rule.description[:1].upper() + rule.description[1:] + ".")
        for rule in input_of(spec).rules(at)
    )
    rules = RuleSet(f"{spec.name}_input", generic.rules, generic.source, generic.meta).plus(generated)
    if spec.quality_suite:  # a rule named like one of the model's is part of it (`rows.row_rules`)
        own = [r for r in load_rules(spec.quality_suite).rules if r.name not in {g.name for g in generated}]
        rules = rules.plus(tuple(Rule(r.name, r.expectation_type, {**r.kwargs, **tolerance}, r.description)
                                 for r in own))
    return rules


def passes_column(rule: str) -> str:
    """The gate's column for an input rule: true where a row passes it, null where not."""
    return f"dataflow_passes_{rule}"


def input_frame(spark: "SparkSession", spec: "PipelineSpec", start, end, at: "ProcessingTime | None" = None) -> "DataFrame":
    """The input rows of event-time range [start, end) (as the backfill selects them, tagged
    as the backfill tags them: `spark.input.rows`) plus the gate's derived `dataflow_*`
    columns: the pipeline's event and ingest times and event id, and per input rule whether
    the row passes it, from the one rendering of the rules the runners use."""
    from pyspark.sql import functions as F

    from dataflow_core.model.input_rules import input_of
    from dataflow_core.spark.input.rows import EventRange, read_rows, row_rules, tag_rows
    from dataflow_core.spark.input.fields import guarded

    desc = input_of(spec)
    model = set(desc.reason_names(at))
    span = EventRange(instant_ms(start, "start"), instant_ms(end, "end"))
    rows = tag_rows(spark, spec, read_rows(spark, spec, span), at)

    def raw(expression: str):
        return guarded(spark, F.expr(expression)).getField("v")

    return rows.select(
        "*",
        raw(desc.event_time.expression).alias("dataflow_event_time"),
        raw(desc.ingest_time.expression).alias("dataflow_ingest_time"),
        raw(desc.event_id.expression).cast("string").alias("dataflow_event_id"),
        *[F.when(ok, F.lit(True)).alias(passes_column(name)) for name, ok, _ in row_rules(spec, rows, at)
          if name in model],
    )


def gate_input(
    spark: "SparkSession",
    pipeline: "str | PipelineSpec",
    start,
    end,
    run_id: str,
    docs_dir: str | os.PathLike[str] | None = None,
    now: int | None = None,
    wait_s: float | None = GATE_WAIT_S,
    say: Callable[[str], None] = lambda _m: None,
) -> GateOutcome:
    """Validate the input rows of [start, end); quarantine rows breaking a row rule into
    `<pipeline>__quarantine` with the reasons the backfill gives them (same row ids, so a
    row is there once). Rows stamped after `now` (ms; default the clock) plus the
    pipeline's `max_skew` are future-dated. The quarantine is the pipeline's, which its
    backfills and micro-batches write too: the gate writes it locking the pipeline
    (`jobs.locked_writes`), after waiting at most `wait_s` seconds (None: not at all) for a working
    run that holds it (PipelineBusy then; PipelineStuck at once when that run is gone or
    failed), so that its MERGE never races theirs."""
    import time

    from dataflow_core.model.input_rules import ProcessingTime
    from dataflow_core.spark.input.rows import input_columns, quarantined
    from dataflow_core.spark.input.fields import explained
    from dataflow_core.cli.waiting import until_free
    from dataflow_core.spark.sinks.quarantine import quarantine_table

    spec = spec_of(pipeline)
    at = ProcessingTime(int(time.time() * 1000) if now is None else now)
    rules = input_rules(spec, at=at)
    frame = input_frame(spark, spec, start, end, at).persist()
    try:
        n = frame.count()
        derived = [c for c in frame.columns if c.startswith("dataflow_")]
        report = validate_dataframe(frame.select(*input_columns(frame), *derived), rules,
                                    docs_dir=docs_dir_of(spark, docs_dir), run_name=f"{run_id}:input:{spec.name}")
        bad = explained(spec, quarantined(frame.drop(*derived))).persist()  # the input's columns: the backfill's row ids
        quarantined_rows = bad.count()
        if quarantined_rows:
            until_free(lambda: _quarantine_held(spark, spec, bad, run_id, say), wait_s, say)
        bad.unpersist()
    finally:
        frame.unpersist()
    notes = (f"range [{_iso(start)}, {_iso(end)}) of table {spec.input_table}",)
    return GateOutcome("input", spec.input_table, report, n, quarantined_rows, quarantine_table(spec), notes)


def _quarantine_held(spark: "SparkSession", spec: "PipelineSpec", bad: "DataFrame", run_id: str, say) -> None:
    """The refused rows MERGEd into the pipeline's quarantine while the gate has the pipeline locked."""
    from dataflow_core.spark.jobs.locked_writes import locked_writes
    from dataflow_core.spark.sinks.quarantine import write_quarantine

    with locked_writes(spark, spec, GATE, say):
        write_quarantine(spark, spec, bad, run_id)


def _iso(value) -> str:
    return dt.datetime.fromtimestamp(instant_ms(value, "time") / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
