"""What a stored plan will change, per stage: `dataflow plan show`, the approval task's
summary and the explorer's plan view.

The diff is made from the plan by the code its apply runs (`jobs.corrections.
planned_corrections`), not from a description of it: each window's new value is the
results row the apply will write (or its deletion), its retractions and panes are the
pane-log rows it will append, and its old value is the results row as it stood at the
version the plan was made from. So the preview is what the apply does, by construction.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from numbers import Number
from typing import TYPE_CHECKING, Any

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import StageSpec, get
from dataflow_core.spark.jobs.corrections import planned_corrections
from dataflow_core.spark.platform.delta import read_as_of
from dataflow_core.spark.sinks.corrections_plan import read_plan
from dataflow_core.spark.sinks.results import standing_panes
from dataflow_core.spark.sinks.runs import PLANNED, PlanState, plan_state

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class WindowChange:
    """One window the plan changes: `old` None when the results have no row for it, `new`
    None when the apply deletes the row; times in ms (None: the global window)."""

    key: tuple
    window_start: int | None
    window_end: int | None
    old: Any
    new: Any
    panes: int
    retractions: int

    @property
    def change(self) -> Any:
        """new - old for numbers (a missing side counts 0), else None."""
        values = [v for v in (self.old, self.new) if v is not None]
        if not all(isinstance(v, Number) and not isinstance(v, bool) for v in values):
            return None
        return (self.new or 0) - (self.old or 0)


@dataclass
class StageDiff:
    stage: str
    key_columns: tuple[str, ...]
    changes: list[WindowChange] = field(default_factory=list)

    def per_key(self) -> dict[tuple, Any]:
        """The sum of the changes per key (numeric values only)."""
        sums: dict[tuple, Any] = {}
        for c in self.changes:
            if c.change is not None:
                sums[c.key] = sums.get(c.key, 0) + c.change
        return sums


def plan_diff(spark: "SparkSession", run_id: str, pipeline: str | None = None) -> tuple[PlanState, list[StageDiff]]:
    """The plan's state and its diff per stage. One line for an unknown run, a run of
    another pipeline, or a plan no longer stored (decided: applied or rejected)."""
    state = plan_state(spark, run_id)
    if state is None:
        raise DataflowError(f"no planned backfill run {run_id!r} in dataflow_runs (make one with "
                            "`dataflow backfill --pipeline P --start ... --end ... --plan-only`)")
    if pipeline is not None and state.run.pipeline != pipeline:
        raise DataflowError(f"run {run_id} is a plan of pipeline {state.run.pipeline!r}, not {pipeline!r}")
    if state.status != PLANNED:
        by = f" by {state.decided_by}" if state.decided_by else ""
        raise DataflowError(f"run {run_id} was {state.status}{by}; its plan is no longer stored "
                            "(the tables and dataflow_runs hold what happened)")
    spec = get(state.run.pipeline)
    return state, [_stage_diff(spark, stage, state) for stage in spec.stages]


def _stage_diff(spark: "SparkSession", stage: StageSpec, state: PlanState) -> StageDiff:
    from pyspark.sql import functions as F

    diff = StageDiff(stage.output, tuple(stage.key_columns))
    plan = read_plan(spark, stage, state.run.run_id)
    if plan is None:
        return diff
    if plan.input_version is not None:
        raise DataflowError(f"run {state.run.run_id}'s plan for {stage.output} recomputes every window from the "
                            "input; it lists no windows to preview")
    kept: list["DataFrame"] = []
    out = planned_corrections(stage, plan, None, None, state.run, kept)
    wid = [*stage.key_columns, "window_start", "window_end"]
    results = {_wid(r, stage): r for r in out.where("kind = 'result'").select(*wid, "value", "is_retraction").collect()}
    panes = {_wid(r, stage): r for r in out.where("kind = 'pane'").groupBy(*wid).agg(
        F.count_if(~F.col("is_retraction")).alias("panes"), F.count_if("is_retraction").alias("retractions")).collect()}
    for df in kept:
        df.unpersist()
    old = _old_values(spark, stage, state.versions.get(stage.output, -1), out.where("kind = 'result'"))
    for w in sorted(set(results) | set(panes), key=_order):
        r, p = results.get(w), panes.get(w)
        new = None if r is None or r["is_retraction"] else r["value"]  # no row: absorbed by a merge
        diff.changes.append(WindowChange(w[0], w[1], w[2], old.get(w), new,
                                         p["panes"] if p else 0, p["retractions"] if p else 0))
    return diff


def _old_values(spark: "SparkSession", stage: StageSpec, version: int, results: "DataFrame") -> dict[tuple, Any]:
    """The value each window of `results` had in the stage's results at `version`."""
    table = read_as_of(spark, stage.output, version)
    if table is None:
        return {}
    wid = [*stage.key_columns, "window_start", "window_end"]
    standing = standing_panes(table, stage).select(*wid, "value")
    touched = results.select(*[results[c].alias(f"_t_{c}") for c in wid])
    hit = standing.join(touched, [standing[c].eqNullSafe(touched[f"_t_{c}"]) for c in wid], "left_semi")
    return {_wid(r, stage): r["value"] for r in hit.collect()}


def _wid(row: Any, stage: StageSpec) -> tuple:
    return tuple(row[k] for k in stage.key_columns), row["window_start"], row["window_end"]


def _order(w: tuple) -> tuple:
    return tuple("" if k is None else str(k) for k in w[0]), w[1] or 0, w[2] or 0


# --- rendering ------------------------------------------------------------------------


def window_text(start: int | None, end: int | None) -> str:
    if start is None:
        return "global"
    a, b = (dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc) for t in (start, end))
    same_day = a.date() == b.date() or b - a <= dt.timedelta(days=1) and b.time() == dt.time(0)
    return f"{a:%Y-%m-%d %H:%M}-{b:%H:%M}" if same_day else f"{a:%Y-%m-%d %H:%M}-{b:%Y-%m-%d %H:%M}"


def headline(state: PlanState) -> str:
    args = json.loads(state.run.args)
    ledger = state.ledger
    return (f"plan {state.run.run_id} of pipeline {state.run.pipeline}: {state.status}; range {args['start']} to "
            f"{args['end']}; {ledger.get('corrected_windows', 0):,} windows to correct, "
            f"{ledger.get('panes', 0):,} panes, {ledger.get('retractions', 0):,} retractions")


def stage_rows(diff: StageDiff, limit: int | None = None) -> tuple[list[str], list[list[Any]]]:
    """The stage's changed windows as a table (columns, rows), the first `limit` of them."""
    columns = [*diff.key_columns, "window", "old", "new", "change", "panes", "retractions"]
    rows = [[*c.key, window_text(c.window_start, c.window_end), _shown(c.old), "(deleted)" if c.new is None else c.new,
             _signed(c.change), c.panes, c.retractions] for c in diff.changes[:limit]]
    return columns, rows


def key_rows(diff: StageDiff) -> tuple[list[str], list[list[Any]]]:
    sums = diff.per_key()
    return [*diff.key_columns, "sum of changes"], [[*k, _signed(v)] for k, v in sorted(sums.items(), key=lambda kv: _order((kv[0], 0, 0)))]


def _shown(value: Any) -> Any:
    return "(none)" if value is None else value


def _signed(value: Any) -> str:
    if value is None:
        return ""
    return f"+{value:,}" if value > 0 else f"{value:,}"
