"""Backfill plans made for approval, read through the fast reader (no JVM): what `dataflow
plan show` and the pane explorer's plan view print.

A plan made with `--plan-only` stores its preview beside its corrections (the rows
`kind = 'preview'` of `<stage>__corrections`, written by `spark.jobs.plan_diff` with the code
the apply runs), and its story is in `dataflow_runs` (planned, then applied or rejected), so
reading a plan computes nothing: these are the same rows `spark.jobs.plan_diff` reads with
Spark. A decided plan's rows are dropped with it: what is left to say is who decided and when.
"""

from __future__ import annotations

import json
from typing import Any

from dataflow_core.diagram.plan_table import StageDiff, WindowChange, not_stored, order
from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import get, layout
from dataflow_core.query import list_tables, literal, query, quote_ident

DECIDED = ("applied", "rejected", "finished")


def plans_of(pipeline: str, warehouse: str | None) -> list[dict[str, Any]]:
    """The pipeline's plans, newest first: run id, pipeline, range, status (`planned` until
    decided), the preview's ledger, who decided and when."""
    return _plans(f"pipeline = {literal(pipeline)}", warehouse)


def stored_plan(run_id: str, pipeline: str | None, warehouse: str | None) -> tuple[dict[str, Any], list[StageDiff]]:
    """Plan `run_id` (as `plans_of` lists it) and its stored preview per stage; one line
    (DataflowError) for an unknown run, a plan of another pipeline, or a decided plan."""
    found = _plans(f"run_id = {literal(run_id)}", warehouse)
    plan = found[0] if found else None
    refused = not_stored(run_id, plan, pipeline)
    if refused:
        raise DataflowError(refused)
    return plan, plan_stages(get(plan["pipeline"]), run_id, warehouse)


def _plans(where: str, warehouse: str | None) -> list[dict[str, Any]]:
    if layout.RUNS not in list_tables(warehouse):
        return []
    rows = query(f"SELECT * FROM {layout.RUNS} WHERE {where}"
                 " AND status IN ('planned', 'applied', 'rejected', 'finished')", warehouse).table.to_pylist()
    planned = {r["run_id"]: r for r in rows if r["status"] == "planned"}
    decided = {r["run_id"]: r for r in sorted(rows, key=lambda r: DECIDED.index(r["status"]) if r["status"] in DECIDED
                                               else 9, reverse=True) if r["status"] in DECIDED}
    out = []
    for run_id, p in planned.items():
        args = json.loads(p["args"] or "{}")
        d = decided.get(run_id)
        out.append({"run_id": run_id, "pipeline": p["pipeline"], "start": args.get("start", "?"),
                    "end": args.get("end", "?"), "planned_at": p["recorded_at"],
                    "ledger": json.loads(p.get("ledger") or "{}"),
                    "status": "planned" if d is None else ("rejected" if d["status"] == "rejected" else "applied"),
                    "decided_by": d.get("decided_by") if d else None, "decided_at": d["recorded_at"] if d else None,
                    "reason": d.get("reason") if d else None})
    return sorted(out, key=lambda p: str(p["planned_at"]), reverse=True)


def plan_stages(spec: Any, run_id: str, warehouse: str | None) -> list[StageDiff]:
    """The stored preview of plan `run_id`, per stage of the pipeline `spec`."""
    tables = set(list_tables(warehouse))
    diffs = []
    for stage in spec.stages:
        diff = StageDiff(stage.output, tuple(stage.key_columns))
        table = layout.plan(stage)
        if table in tables and "old_value" in _columns(table, warehouse):
            keys = ", ".join(quote_ident(k) for k in stage.key_columns)
            rows = query(f"SELECT {keys}, window_start, window_end, old_value, new_value, preview_panes, "
                         f"preview_retractions FROM {table} WHERE run_id = {literal(run_id)} AND kind = 'preview'",
                         warehouse).table.to_pylist()
            changes = [WindowChange(tuple(r[k] for k in stage.key_columns), r["window_start"], r["window_end"],
                                    r["old_value"], r["new_value"], int(r["preview_panes"] or 0),
                                    int(r["preview_retractions"] or 0)) for r in rows]
            diff.changes = sorted(changes, key=lambda c: order(c.key, c.window_start, c.window_end))
        diffs.append(diff)
    return diffs


def _columns(table: str, warehouse: str | None) -> list[str]:
    return query(f"SELECT * FROM {table} LIMIT 0", warehouse).table.column_names
