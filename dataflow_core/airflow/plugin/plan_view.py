"""The pane explorer's plan view: a backfill planned for approval, old against new per
window, read through the fast reader (no JVM) from what the plan stored.

A plan made with `--plan-only` stores its preview beside its corrections (the rows
`kind = 'preview'` of `<stage>__corrections`, written by `spark.jobs.plan_diff` with the code
the apply runs), so this view reads the same diff as `dataflow plan show` and the approval
task, without computing anything. A decided plan's rows are dropped with it: the view then
says who decided and when, and the tables hold what happened.
"""

from __future__ import annotations

import json
from typing import Any

from dataflow_core.diagram.plan_table import StageDiff, WindowChange, order
from dataflow_core.pipelines import layout
from dataflow_core.query import list_tables, literal, query, quote_ident

DECIDED = ("applied", "rejected", "finished")


def plans_of(pipeline: str, warehouse: str | None) -> list[dict[str, Any]]:
    """The pipeline's plans, newest first: run id, range, status (`planned` until decided),
    who decided and when."""
    if layout.RUNS not in list_tables(warehouse):
        return []
    rows = query(f"SELECT * FROM {layout.RUNS} WHERE pipeline = " + literal(pipeline) +
                 " AND status IN ('planned', 'applied', 'rejected', 'finished')", warehouse).table.to_pylist()
    planned = {r["run_id"]: r for r in rows if r["status"] == "planned"}
    decided = {r["run_id"]: r for r in sorted(rows, key=lambda r: DECIDED.index(r["status"]) if r["status"] in DECIDED
                                               else 9, reverse=True) if r["status"] in DECIDED}
    out = []
    for run_id, p in planned.items():
        args = json.loads(p["args"] or "{}")
        d = decided.get(run_id)
        out.append({"run_id": run_id, "start": args.get("start", "?"), "end": args.get("end", "?"),
                    "planned_at": p["recorded_at"], "ledger": json.loads(p.get("ledger") or "{}"),
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
