"""A backfill plan's diff as tables: the windows it changes (old and new value, panes,
retractions) and the sum of the changes per key. Pure: `dataflow plan show`, the approval
task's Markdown and the pane explorer's plan view all render these rows."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from numbers import Number
from typing import Any, Mapping, Sequence

from dataflow_core.pipelines import layout


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


def headline(plan: Mapping[str, Any], diffs: Sequence[StageDiff]) -> str:
    """The plan in one line: its status, range and counts (windows that change, of them
    those the results already hold, panes and retractions it will append). `plan` as
    `query.plans.plans_of` gives it (run id, pipeline, status, start, end, the preview's ledger)."""
    changes = [c for d in diffs for c in d.changes]
    standing = sum(1 for c in changes if c.old is not None)
    ledger = plan.get("ledger") or {}
    return (f"plan {plan['run_id']} of pipeline {plan['pipeline']}: {plan['status']}; range {plan['start']} to "
            f"{plan['end']}; {len(changes):,} windows change ({standing:,} of them standing results, "
            f"{len(changes) - standing:,} new); {ledger.get('panes', 0):,} panes, "
            f"{ledger.get('retractions', 0):,} retractions")


def not_stored(run_id: str, plan: Mapping[str, Any] | None, pipeline: str | None = None) -> str | None:
    """Why plan `run_id` (`plan`: as `headline` takes it, None when no run planned it) has no
    diff to show, in one line: none, another pipeline's, or decided (its plan dropped). None
    when it is stored."""
    if plan is None:
        return (f"no planned backfill run {run_id!r} in {layout.RUNS} (make one with "
                "`dataflow backfill --pipeline P --start ... --end ... --plan-only`)")
    if pipeline is not None and plan["pipeline"] != pipeline:
        return f"run {run_id} is a plan of pipeline {plan['pipeline']!r}, not {pipeline!r}"
    if plan["status"] != "planned":
        by = f" by {plan['decided_by']}" if plan.get("decided_by") else ""
        at = plan.get("decided_at")
        when = f" at {at:%Y-%m-%d %H:%M:%S} UTC" if isinstance(at, dt.datetime) else ""
        return (f"run {run_id} was {plan['status']}{by}{when}; its plan is no longer stored "
                "(the tables and dataflow_runs hold what happened)")
    return None


BAR_WIDTH = 160.0
"""The widest bar of the plan view, in pixels: the stage's largest value."""


def bar_widths(diff: StageDiff, full: float = BAR_WIDTH) -> list[tuple[float, float]]:
    """Per changed window, the widths of its old and new bars, scaled to the stage's largest
    value (`magnitude`): money is Decimal, counts int, means float, and all must draw."""
    sizes = [(magnitude(c.old), magnitude(c.new)) for c in diff.changes]
    top = max((s for pair in sizes for s in pair), default=0.0) or 1.0
    return [(old / top * full, new / top * full) for old, new in sizes]


def magnitude(value: Any) -> float:
    """The size of a value as a bar draws it: |value| for any real number (int, float,
    Decimal), 0 for anything else (a missing side, a list, NaN)."""
    if not isinstance(value, Number) or isinstance(value, (bool, complex)):
        return 0.0
    size = abs(float(value))
    return size if math.isfinite(size) else 0.0


def window_text(start: int | None, end: int | None) -> str:
    """A window for people: `2024-05-01 10:00-11:00`, the end's date only when it differs."""
    if start is None or end is None:
        return "global"
    a, b = (dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc) for t in (start, end))
    same_day = a.date() == b.date() or (b - a <= dt.timedelta(days=1) and b.time() == dt.time(0))
    return f"{a:%Y-%m-%d %H:%M}-{b:%H:%M}" if same_day else f"{a:%Y-%m-%d %H:%M}-{b:%Y-%m-%d %H:%M}"


def order(key: tuple, start: int | None, end: int | None) -> tuple:
    """Windows by key, then time (None-safe)."""
    return tuple("" if k is None else str(k) for k in key), start or 0, end or 0


def stage_rows(diff: StageDiff, limit: int | None = None) -> tuple[list[str], list[list[Any]]]:
    """The stage's changed windows as a table (columns, rows), the first `limit` of them."""
    columns = [*diff.key_columns, "window", "old", "new", "change", "panes", "retractions"]
    rows = [[*c.key, window_text(c.window_start, c.window_end), "(none)" if c.old is None else c.old,
             "(deleted)" if c.new is None else c.new, signed(c.change), c.panes, c.retractions]
            for c in diff.changes[:limit]]
    return columns, rows


def key_rows(diff: StageDiff) -> tuple[list[str], list[list[Any]]]:
    """The sum of the stage's changes per key, as a table."""
    sums = sorted(diff.per_key().items(), key=lambda kv: order(kv[0], None, None))
    return [*diff.key_columns, "sum of changes"], [[*k, signed(v)] for k, v in sums]


def signed(value: Any) -> str:
    if value is None:
        return ""
    return f"+{value:,}" if value > 0 else f"{value:,}"
