"""Quality gates: Great Expectations suites run on every stage of a pipeline run.

- **input** (`expectations/dataflow_input.json` + the pipeline's own input suite): the input
  rows of an event-time range, before a backfill or micro-batch uses them.
- **panes** (`expectations/dataflow_panes.json`): every pane of the windows a run touched.
- **results** (`expectations/dataflow_results.json`): the results table of those windows
  against what the pane log nets to.

Each gate derives the columns its suite checks, validates them through GE (a file-backed
project whose Data Docs HTML site is updated after every gate, once for all the stages
`gate_outputs` checks; see `quality.docs`), copies
the rows that break a row-level rule into a quarantine table with the reasons, and returns a
`GateOutcome`; `GateOutcome.raise_if_failed()` raises `GateFailed` whose one-line message says
which expectations failed on how many rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.quality.docs import data_docs_root
from dataflow_core.quality.rules import Rule, RuleSet, load_rules
from dataflow_core.quality.validate import ValidationReport, validate_dataframe

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from dataflow_core.pipelines import PipelineSpec, StageSpec

INPUT_SUITE = "dataflow_input"
PANES_SUITE = "dataflow_panes"
RESULTS_SUITE = "dataflow_results"
MAX_BAD_SHARE_ENV = "DATAFLOW_GATE_MAX_BAD_SHARE"
MAX_DUPLICATE_SHARE_ENV = "DATAFLOW_GATE_MAX_DUPLICATE_SHARE"
DEFAULT_MAX_BAD_SHARE = 0.02  # a rule broken by more than 2 % of the range's rows fails the gate
DEFAULT_MAX_DUPLICATE_SHARE = 0.05
REASON = "quarantine_reason"
_log = logging.getLogger("dataflow")


class GateFailed(DataflowError):
    """A gate's suite failed; the message is the readable summary."""

    def __init__(self, outcome: "GateOutcome") -> None:
        self.outcome = outcome
        super().__init__(outcome.summary())


@dataclass(frozen=True)
class GateOutcome:
    gate: str  # input, panes, results
    table: str  # what was checked
    report: ValidationReport
    rows: int  # rows validated
    quarantined: int  # rows copied to the quarantine table by this gate
    quarantine_table: str | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    problem: str | None = None  # a failure beyond the suite's (e.g. nothing checked)

    @property
    def success(self) -> bool:
        return self.report.success and self.problem is None

    def summary(self) -> str:
        verdict = "passed" if self.success else "FAILED"
        text = f"{self.gate} gate on {self.table} {verdict}: {self.rows:,} rows; "
        if self.problem:
            text += self.problem + "; "
        text += self.report.summary()
        if self.quarantined:
            text += f"; {self.quarantined:,} rows quarantined in {self.quarantine_table}"
        return text

    def lines(self) -> list[str]:
        out = [f"{self.gate} gate on {self.table}: {self.rows:,} rows checked"]
        if self.problem:
            out.append(f"  FAILED: {self.problem}")
        out += ["  " + line for line in self.report.lines()]
        out += ["  " + note for note in self.notes]
        if self.quarantine_table:
            out.append(f"  {self.quarantined:,} rows quarantined in table {self.quarantine_table}")
        if self.report.docs_index:
            out.append(f"  Data Docs: {self.report.docs_index}")
        return out

    def raise_if_failed(self) -> None:
        if not self.success:
            raise GateFailed(self)


def _docs_dir(spark: "SparkSession", docs_dir: str | os.PathLike[str] | None) -> str:
    if docs_dir is not None:
        return os.fspath(docs_dir)
    from dataflow_core.spark.platform.session import warehouse_root

    return str(data_docs_root(warehouse_root(spark)))


def _instant_ms(value: str | dt.datetime | dt.date, what: str) -> int:
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            moment = dt.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise DataflowError(f"{what}: {value!r} is not an ISO date or time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def _share(env: str, default: float) -> float:
    raw = os.environ.get(env)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise DataflowError(f"${env}={raw!r}: not a number (a share between 0 and 1)") from None
    if not 0 <= value < 1:
        raise DataflowError(f"${env}={raw!r}: must be a share in [0, 1)")
    return value


def _append(spark: "SparkSession", rows: "DataFrame", table: str) -> int:
    """Append `rows` to `table` (created on first use); returns how many."""
    from dataflow_core.spark.platform.tables import write_table

    rows = rows.persist()
    try:
        n = rows.count()
        if n:
            write_table(spark, rows, table, mode="append")
        return n
    finally:
        rows.unpersist()


# --- input ------------------------------------------------------------------------------


def input_rules(spec: "PipelineSpec", max_bad_share: float | None = None,
                max_duplicate_share: float | None = None) -> RuleSet:
    """The input gate's suite for `spec`: the generic rules with the pipeline's settings,
    then the pipeline's own input suite, every row rule tolerating `max_bad_share`."""
    bad = _share(MAX_BAD_SHARE_ENV, DEFAULT_MAX_BAD_SHARE) if max_bad_share is None else max_bad_share
    dup = (_share(MAX_DUPLICATE_SHARE_ENV, DEFAULT_MAX_DUPLICATE_SHARE)
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

    span = EventRange(_instant_ms(start, "start"), _instant_ms(end, "end"))
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

    spec = _spec(pipeline)
    rules = input_rules(spec)
    frame = input_frame(spark, spec, start, end).persist()
    try:
        n = frame.count()
        report = validate_dataframe(frame, rules, docs_dir=_docs_dir(spark, docs_dir),
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
    return dt.datetime.fromtimestamp(_instant_ms(value, "time") / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _spec(pipeline: "str | PipelineSpec") -> "PipelineSpec":
    from dataflow_core.pipelines import get

    return get(pipeline) if isinstance(pipeline, str) else pipeline


# --- panes ------------------------------------------------------------------------------


def _window_cols(stage: "StageSpec") -> list[str]:
    return [*stage.key_columns, "window_start", "window_end"]


def _null_safe_join(left: "DataFrame", right: "DataFrame", cols: Sequence[str], how: str) -> "DataFrame":
    """Join on `cols` with nulls equal (global windows have no end). The right side's columns
    are renamed first, so frames derived from the same table do not confuse Spark."""
    from pyspark.sql import functions as F

    renamed = right.select(*[F.col(c).alias(f"_j_{c}") for c in right.columns])
    condition = None
    for c in cols:
        term = left[c].eqNullSafe(renamed[f"_j_{c}"])
        condition = term if condition is None else condition & term
    return left.join(renamed, condition, how)


def touched_panes(spark: "SparkSession", stage: "StageSpec", run_ids: Iterable[str] | None) -> "DataFrame":
    """Every pane (of any run) of the windows that the runs `run_ids` wrote panes for;
    all panes when `run_ids` is None."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import read_table

    panes = read_table(spark, f"{stage.output}_panes")
    if run_ids is None:
        return panes
    ids = sorted(set(run_ids))
    windows = panes.where(F.col("run_id").isin(ids)).select(*_window_cols(stage)).distinct()
    return _null_safe_join(panes, windows, _window_cols(stage), "left_semi")


def pane_checks(panes: "DataFrame", stage: "StageSpec") -> "DataFrame":
    """`panes` plus the pane suite's derived `gate_*` columns (null where not applicable)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    win = _window_cols(stage)
    retraction = F.col("is_retraction")
    pane = ~retraction
    seq = Window.partitionBy(*win).orderBy("emitted_at", "pane_index", "is_retraction")
    before = seq.rowsBetween(Window.unboundedPreceding, -1)
    same_kind = Window.partitionBy(*win, "is_retraction").orderBy("emitted_at", "pane_index")
    whole = Window.partitionBy(*win)
    on_time = pane & (F.col("timing") == "ON_TIME")

    df = panes.withColumn("_seq", F.row_number().over(seq)).withColumn(
        "_after_on_time", F.max(F.when(pane & (F.col("timing") != "EARLY"), True)).over(before))
    df = df.withColumn(
        "_prev_pane",
        F.last(F.when(pane, F.struct(F.col("pane_index").alias("i"), F.col("value").alias("v"),
                                     F.col("_seq").alias("s"))), ignorenulls=True).over(before),
    ).withColumn("_prev_retraction", F.last(F.when(retraction, F.col("_seq")), ignorenulls=True).over(before))
    standing = (
        F.col("_prev_pane").isNotNull()
        & (F.col("_prev_pane.i") == F.col("pane_index"))
        & F.col("_prev_pane.v").eqNullSafe(F.col("value"))
        & (F.col("_prev_retraction").isNull() | (F.col("_prev_retraction") < F.col("_prev_pane.s")))
    )
    combiner = stage.strategy.combiner.name
    if combiner in ("count", "distinct_count"):
        possible: "Column" = F.when(pane & F.col("value").isNotNull(), F.col("value") >= 0)
    else:
        possible = F.lit(None).cast("boolean")
    return (
        df.withColumn("gate_index_consecutive",
                      F.when(pane, (F.row_number().over(same_kind) - 1) == F.col("pane_index")))
        .withColumn("gate_retraction_standing", F.when(retraction, F.coalesce(standing, F.lit(False))))
        .withColumn("gate_on_time_once",
                    F.when(on_time, F.sum(F.when(on_time, 1).otherwise(0)).over(whole) <= 1))
        .withColumn("gate_no_early_after_on_time",
                    F.when(pane & (F.col("timing") == "EARLY"), F.col("_after_on_time").isNull()))
        .withColumn("gate_on_time_index_ok",
                    F.when(pane, (F.col("timing") == "EARLY") == F.col("on_time_index").isNull()))
        .withColumn("gate_is_first_ok", F.when(pane, F.col("is_first") == (F.col("pane_index") == 0)))
        .withColumn("gate_value_possible", possible)
        .drop("_seq", "_prev_pane", "_prev_retraction", "_after_on_time")
    )


def gate_panes(
    spark: "SparkSession",
    stage: "StageSpec",
    run_ids: Iterable[str] | None,
    run_id: str,
    pipeline: str = "",
    docs_dir: str | os.PathLike[str] | None = None,
    build_docs: bool = True,
) -> GateOutcome:
    """Validate the pane log of the windows `run_ids` touched; failing panes are copied to
    `<output>_panes_quarantine` with the reasons."""
    from pyspark.sql import functions as F

    from dataflow_core.quality.split import failed_rules

    rules = load_rules(PANES_SUITE)
    rules = RuleSet(f"{stage.output}_panes", rules.rules, rules.source, rules.meta)
    checked = pane_checks(touched_panes(spark, stage, run_ids), stage).persist()
    try:
        n = checked.count()
        report = validate_dataframe(checked, rules, docs_dir=_docs_dir(spark, docs_dir),
                                    run_name=f"{run_id}:panes:{stage.output}", build_docs=build_docs)
        pane_cols = [c for c in checked.columns if not c.startswith("gate_")]
        bad = (
            checked.withColumn("_failed", failed_rules(rules)).where(F.size("_failed") > 0)
            .select(*pane_cols, F.array_join("_failed", "; ").alias(REASON),
                    F.lit(pipeline).alias("pipeline"), F.lit(run_id).alias("gate_run_id"),
                    F.current_timestamp().alias("quarantined_at"))
        )
        table = f"{stage.output}_panes_quarantine"
        quarantined = _append(spark, bad, table)
    finally:
        checked.unpersist()
    scope = "all windows" if run_ids is None else f"windows touched by run(s) {', '.join(sorted(set(run_ids))) or '-'}"
    return GateOutcome("panes", f"{stage.output}_panes", report, n, quarantined, table, (scope,))


# --- results ----------------------------------------------------------------------------


def netted(panes: "DataFrame", stage: "StageSpec") -> "DataFrame":
    """What the pane log nets to, per key and window: (key..., window_start, window_end,
    net_value). Non-discarding stages: the last pane by (emitted_at, pane_index,
    is_retraction), none if it is a retraction. Discarding stages merge their panes."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from dataflow_core.model.accumulation import AccumulationMode

    win = _window_cols(stage)
    if stage.strategy.accumulation is AccumulationMode.DISCARDING and stage.strategy.combiner.output_merge:
        merge = {"sum": F.sum, "min": F.min, "max": F.max}[stage.strategy.combiner.output_merge]
        return (panes.where(~F.col("is_retraction")).groupBy(*win)
                .agg(merge("value").cast(panes.schema["value"].dataType).alias("net_value")))
    last = Window.partitionBy(*win).orderBy(
        F.col("emitted_at").desc(), F.col("pane_index").desc(), F.col("is_retraction").desc()
    )
    return (
        panes.withColumn("_r", F.row_number().over(last)).where("_r = 1")
        .where(~F.col("is_retraction")).select(*win, F.col("value").alias("net_value"))
    )


def results_checks(spark: "SparkSession", stage: "StageSpec", run_ids: Iterable[str] | None) -> "DataFrame":
    """One row per key and window found in the results table or the pane log (of the windows
    `run_ids` touched): its key, window, `value` (results), `net_value` (panes) and the
    results suite's derived `gate_*` columns."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import read_table

    win = _window_cols(stage)
    panes = touched_panes(spark, stage, run_ids)
    net = netted(panes, stage).withColumn("_in_panes", F.lit(True))
    results = read_table(spark, stage.output)
    if run_ids is not None:
        windows = panes.select(*win).distinct()
        results = _null_safe_join(results, windows, win, "left_semi")
    results = results.select(*win, "value", F.lit(True).alias("_in_results"))
    joined = _null_safe_join(results, net, win, "full_outer")
    in_results = F.coalesce(F.col("_in_results"), F.lit(False))
    in_panes = F.coalesce(F.col("_j__in_panes"), F.lit(False))
    return joined.select(
        *[F.coalesce(F.col(c), F.col(f"_j_{c}")).alias(c) for c in win],
        F.col("value"),
        F.col("_j_net_value").alias("net_value"),
        F.when(in_results, in_panes).alias("gate_backed_by_panes"),
        F.when(in_panes, in_results).alias("gate_present"),
        F.when(in_results & in_panes, F.col("value").eqNullSafe(F.col("_j_net_value"))).alias("gate_value_matches"),
    )


def gate_results(
    spark: "SparkSession",
    stage: "StageSpec",
    run_ids: Iterable[str] | None,
    run_id: str,
    pipeline: str = "",
    docs_dir: str | os.PathLike[str] | None = None,
    build_docs: bool = True,
) -> GateOutcome:
    """Check that the results table equals what the pane log nets to (windows `run_ids`
    touched); mismatching rows are copied to `<output>_results_quarantine`."""
    from pyspark.sql import functions as F

    from dataflow_core.quality.split import failed_rules

    rules = load_rules(RESULTS_SUITE)
    rules = RuleSet(f"{stage.output}_results", rules.rules, rules.source, rules.meta)
    checked = results_checks(spark, stage, run_ids).persist()
    try:
        n = checked.count()
        report = validate_dataframe(checked, rules, docs_dir=_docs_dir(spark, docs_dir),
                                    run_name=f"{run_id}:results:{stage.output}", build_docs=build_docs)
        cols = [c for c in checked.columns if not c.startswith("gate_")]
        bad = (
            checked.withColumn("_failed", failed_rules(rules)).where(F.size("_failed") > 0)
            .select(*cols, F.array_join("_failed", "; ").alias(REASON),
                    F.lit(pipeline).alias("pipeline"), F.lit(run_id).alias("gate_run_id"),
                    F.current_timestamp().alias("quarantined_at"))
        )
        table = f"{stage.output}_results_quarantine"
        quarantined = _append(spark, bad, table)
    finally:
        checked.unpersist()
    return GateOutcome("results", stage.output, report, n, quarantined, table)


def gate_outputs(
    spark: "SparkSession",
    pipeline: "str | PipelineSpec",
    run_ids: Iterable[str] | None,
    run_id: str,
    docs_dir: str | os.PathLike[str] | None = None,
    say=None,
    written: "Mapping[str, int] | None" = None,
) -> list[GateOutcome]:
    """The pane gate of every stage, and the results gate of every stage with a results
    table, for the windows the runs `run_ids` touched. Stages without a pane log yet (the
    runs emitted nothing there) are reported and skipped.

    `written`: how many panes and retractions the runs wrote per stage output. A stage that
    the runs wrote to but whose gate checked no pane fails (a gate over nothing is no gate:
    the run ids do not match the pane log's, or the panes are not where they should be).

    The Data Docs site is updated once, after the last validation (`build_data_docs`)."""
    from dataflow_core.quality.validate import build_data_docs
    from dataflow_core.spark.platform.tables import table_exists

    say = say or _log.info
    spec = _spec(pipeline)
    ids = None if run_ids is None else list(run_ids)
    wrote = dict(written or {})
    outcomes: list[GateOutcome] = []
    for stage in spec.stages:
        expected = int(wrote.get(stage.output, 0) or 0)
        if not table_exists(spark, f"{stage.output}_panes"):
            if expected:
                outcomes.append(_nothing_checked(stage, ids, expected, "its pane log does not exist"))
                say(outcomes[-1].summary())
                continue
            say(f"stage {stage.output}: no pane log ({stage.output}_panes) yet, nothing to check")
            continue
        outcome = gate_panes(spark, stage, ids, run_id, spec.name, docs_dir, build_docs=False)
        if expected and outcome.rows == 0:
            outcome = replace(outcome, problem=(
                f"0 panes checked although run(s) {', '.join(sorted(set(ids or []))) or '-'} wrote {expected:,} "
                f"panes and retractions to {stage.output}_panes: the gate's run ids do not match the pane log's"))
        outcomes.append(outcome)
        for line in outcomes[-1].lines():
            say(line)
        if stage.keeps_results and table_exists(spark, stage.output):
            outcomes.append(gate_results(spark, stage, ids, run_id, spec.name, docs_dir, build_docs=False))
            for line in outcomes[-1].lines():
                say(line)
    reports = build_data_docs(_docs_dir(spark, docs_dir), [o.report for o in outcomes])
    outcomes = [replace(o, report=r) for o, r in zip(outcomes, reports)]
    index = next((r.docs_index for r in reports if r.docs_index), None)
    if index:
        say(f"Data Docs: {index}")
    return outcomes


def _nothing_checked(stage: "StageSpec", ids, expected: int, why: str) -> GateOutcome:
    from dataflow_core.quality.validate import ValidationReport

    empty = ValidationReport(suite=f"{stage.output}_panes", success=True, outcomes=())
    return GateOutcome("panes", f"{stage.output}_panes", empty, 0, 0, None,
                       problem=f"0 panes checked although run(s) {', '.join(sorted(set(ids or []))) or '-'} "
                               f"wrote {expected:,} panes and retractions: {why}")
