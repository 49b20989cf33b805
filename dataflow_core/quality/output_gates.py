"""The output gates of a stage: its pane log (`expectations/dataflow_panes.json`), every pane
of the windows a run touched, checked against the model's rules of a pane history
(`model.panes.pane_breaks`, run per window in executors); and its results table
(`expectations/dataflow_results.json`) against what the pane log nets to
(`WindowingStrategy.net_panes`, in SQL `window_totals`)."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from dataflow_core.model.combiners import value_present
from dataflow_core.model.pane_codec import pane_from_row
from dataflow_core.model.panes import HISTORY_RULES, PANE_RULES, RETRACTION_RULES, emission_key, pane_breaks
from dataflow_core.pipelines import layout
from dataflow_core.quality.outcome import REASON, GateOutcome, append_rows_to, docs_dir_of
from dataflow_core.spark.input.expectations import RuleSet, load_rules
from dataflow_core.quality.validate import validate_dataframe
from dataflow_core.spark.execute.output_merge import touched_windows, window_totals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from dataflow_core.pipelines import StageSpec

PANES_SUITE = "dataflow_panes"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
RESULTS_SUITE = "dataflow_results"


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

    panes = read_table(spark, layout.panes(stage))
    if run_ids is None:
        return panes
    ids = sorted(set(run_ids))
    windows = touched_windows(panes.where(F.col("run_id").isin(ids)), _window_cols(stage))
    return _null_safe_join(panes, windows, _window_cols(stage), "left_semi")


GATE_COLUMNS = {rule: f"gate_{rule}" for rule in (*HISTORY_RULES, "value_present", "value_possible")}
"""The pane suite's derived column of each rule of a pane history (null where a rule does
not apply: retractions are checked by `retraction_standing` only, panes by the others) and
of each rule of a pane's value (`combiners.value_present`: a null value only where the
combiner's empty pane is null; `CombineFn.output_possible`)."""


def pane_checks(panes: "DataFrame", stage: "StageSpec") -> "DataFrame":
    """`panes` plus the pane suite's `GATE_COLUMNS`: per window in executors, its panes in
    emission order through `model.panes.pane_breaks`, each pane's value through
    `combiners.value_present` and the combiner's `output_possible`."""
    from dataflow_core.spark.execute.by_key import map_keys

    columns = list(panes.columns)
    combiner = stage.strategy.combiner
    schema = ", ".join([f"`{f.name}` {f.dataType.simpleString()}" for f in panes.schema.fields]
                       + [f"`{c}` boolean" for c in GATE_COLUMNS.values()])

    def window(_key: list, table: Any, _side: Any) -> list[dict]:
        return _checked_window(table.select(columns).to_pylist(), combiner)

    return map_keys(panes, _window_cols(stage), window, schema)


def _checked_window(rows: list[dict], combiner: Any) -> list[dict]:
    """One window's pane-log rows with their `GATE_COLUMNS` (rows that are no pane, with an
    unknown timing or no index, are left to the suite's column rules)."""
    decoded = []
    for row in rows:
        for column in GATE_COLUMNS.values():
            row[column] = None
        row[GATE_COLUMNS["value_present"]] = value_present(combiner, row["value"])
        try:
            decoded.append((pane_from_row(None, _codec_fields(row)), row))
        except (TypeError, ValueError):
            continue
        if not row["is_retraction"] and row["value"] is not None:
            row[GATE_COLUMNS["value_possible"]] = bool(combiner.output_possible(row["value"]))
    decoded.sort(key=lambda pair: emission_key(pair[0]))
    in_order = [pane for pane, _ in decoded]
    for (pane, row), broken in zip(decoded, pane_breaks(in_order)):
        failed = {rule for rule, _ in broken}
        for rule in RETRACTION_RULES if pane.retraction else PANE_RULES:
            row[GATE_COLUMNS[rule]] = rule not in failed
    return rows


def _codec_fields(row: dict) -> dict:
    """A pane-log row (timestamps) as the pane codec's fields (epoch ms)."""
    def ms(t: Any) -> int | None:
        if t is None:
            return None
        return ((t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)) - _EPOCH) // dt.timedelta(milliseconds=1)

    return {**row, "window_start": ms(row["window_start"]), "window_end": ms(row["window_end"]),
            "ts": ms(row["timestamp"]), "emitted_at": ms(row["emitted_at"])}


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
    checked = pane_checks(touched_panes(spark, stage, run_ids), stage)
    n, report, quarantined, table = _validate(spark, checked, PANES_SUITE, layout.panes(stage),
                                              f"{run_id}:panes:{stage.output}", pipeline, run_id, docs_dir, build_docs)
    scope = "all windows" if run_ids is None else f"windows touched by run(s) {', '.join(sorted(set(run_ids))) or '-'}"
    return GateOutcome("panes", layout.panes(stage), report, n, quarantined, table, (scope,))


def _validate(
    spark: "SparkSession", checked: "DataFrame", suite: str, name: str, run_name: str, pipeline: str, run_id: str,
    docs_dir: str | os.PathLike[str] | None, build_docs: bool,
) -> tuple[int, Any, int, str]:
    """`checked` (rows with their derived `gate_*` columns) validated by `suite` as `name`;
    rows breaking a rule are appended to `<name>_quarantine` with the reasons. Returns
    (rows, report, rows quarantined, quarantine table)."""
    from pyspark.sql import functions as F

    from dataflow_core.quality.split import failed_rules

    base = load_rules(suite)
    rules = RuleSet(name, base.rules, base.source, base.meta)
    checked = checked.persist()
    try:
        n = checked.count()
        report = validate_dataframe(checked, rules, docs_dir=docs_dir_of(spark, docs_dir), run_name=run_name,
                                    build_docs=build_docs)
        cols = [c for c in checked.columns if not c.startswith("gate_")]
        bad = (
            checked.withColumn("_failed", failed_rules(rules)).where(F.size("_failed") > 0)
            .select(*cols, F.array_join("_failed", "; ").alias(REASON),
                    F.lit(pipeline).alias("pipeline"), F.lit(run_id).alias("gate_run_id"),
                    F.current_timestamp().alias("quarantined_at"))
        )
        table = layout.gate_quarantine(name)
        quarantined = append_rows_to(spark, bad, table)
    finally:
        checked.unpersist()
    return n, report, quarantined, table


def netted(panes: "DataFrame", stage: "StageSpec") -> "DataFrame":
    """What the pane log nets to, per key and window (`window_totals`, the rule of
    `WindowingStrategy.net_panes`): (key..., window_start, window_end, net_value); a window
    whose last pane is a retraction nets to nothing."""
    from pyspark.sql import functions as F

    win = _window_cols(stage)
    totals = window_totals(panes, stage.strategy, win, panes.schema["value"].dataType.simpleString(), ts="timestamp")
    return totals.where(~F.col("is_retraction")).select(*win, F.col("value").alias("net_value"))


def results_checks(spark: "SparkSession", stage: "StageSpec", run_ids: Iterable[str] | None) -> "DataFrame":
    """One row per key and window found in the results table or the pane log (of the windows
    `run_ids` touched): its key, window, `value` (results), `net_value` (panes) and the
    results suite's derived `gate_*` columns."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import read_table

    win = _window_cols(stage)
    panes = touched_panes(spark, stage, run_ids)
    net = netted(panes, stage).withColumn("_in_panes", F.lit(True))
    results = read_table(spark, layout.results(stage))
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
    n, report, quarantined, table = _validate(
        spark, results_checks(spark, stage, run_ids), RESULTS_SUITE, layout.results_check(stage),
        f"{run_id}:results:{stage.output}", pipeline, run_id, docs_dir, build_docs)
    return GateOutcome("results", stage.output, report, n, quarantined, table)
