"""Which windows a run changed in a stage's results table, as the `extra` of an Airflow asset
event (`airflow.assets`): what a downstream DAG needs to redo exactly that work (re-issue the
invoices of the changed hours, re-export those days) without polling or being told.

Read from the results table's change data feed (`sinks.results.CHANGE_FEED`: per window the
row before and after each commit), restricted to the commits the run made, so a run's
summary costs a read of its own commits' changes, not of the table. Pure: rows in, a JSON-able
dict out (Delta, Spark and Airflow stay at the caller), so the rules are tested without them.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Iterable, Mapping, Sequence

from dataflow_core.diagram.plan_table import WindowChange, magnitude

BACKFILL, INPUT_CORRECTION, LATE_DATA = "backfill", "input correction", "late data"
"""Why a run changed windows: a backfill computed windows the results did not hold yet; a
backfill (or an applied plan) changed windows the results held, so their input changed;
a micro-batch's late panes changed windows already past the watermark."""
TOP = 5
"""The largest changes (by |new - old|) an event lists; the count and the spans cover all."""
MAX_SPANS = 200
"""The distinct window spans an event lists at most (hourly windows: 8 days); beyond that the
event says `spans_complete: false` and a consumer goes by `range`."""
_BEFORE, _AFTER = ("update_preimage", "delete"), ("insert", "update_postimage")


def run_commits(rows: Iterable[Mapping[str, Any]], run_ids: Iterable[str]) -> list[Mapping[str, Any]]:
    """The change-feed rows of the commits a run made: the commits in which a row the run
    wrote appears (its `run_id`), each with all its rows (a row's pre-image names the run that
    wrote it before). Other runs' commits in the same versions are left out."""
    ids, rows = set(run_ids), list(rows)
    versions = {r["_commit_version"] for r in rows if r["_change_type"] in _AFTER and r.get("run_id") in ids}
    return [r for r in rows if r["_commit_version"] in versions]


def window_changes(rows: Iterable[Mapping[str, Any]], key_columns: Sequence[str],
                   late_only: bool = False) -> list[WindowChange]:
    """Per window the change-feed `rows` touch, its value before the first of their commits
    and after the last (None: no row), windows that ended as they began left out. `late_only`
    (a micro-batch): only windows whose last row a late pane wrote (timing LATE): a window's
    first panes are news, not corrections. Times in ms, as `WindowChange` has them."""
    first: dict[tuple, Mapping[str, Any]] = {}
    last: dict[tuple, Mapping[str, Any]] = {}
    order = {**{t: 0 for t in _BEFORE}, **{t: 1 for t in _AFTER}}
    for row in sorted(rows, key=lambda r: (r["_commit_version"], order.get(r["_change_type"], 2))):
        if row["_change_type"] not in order:
            continue
        wid = (tuple(row.get(k) for k in key_columns), _ms(row.get("window_start")), _ms(row.get("window_end")))
        first.setdefault(wid, row)
        last[wid] = row
    out = []
    for wid, row in first.items():
        old = row["value"] if row["_change_type"] in _BEFORE else None
        end = last[wid]
        new = end["value"] if end["_change_type"] in _AFTER else None
        if old == new and (row["_change_type"] in _BEFORE) == (end["_change_type"] in _AFTER):
            continue
        if late_only and not (end["_change_type"] in _AFTER and end.get("timing") == "LATE"):
            continue
        out.append(WindowChange(wid[0], wid[1], wid[2], old, new, 0, 0))
    return sorted(out, key=lambda c: (c.window_start or 0, c.window_end or 0, tuple(map(str, c.key))))


def change_summary(changes: Sequence[WindowChange], *, pipeline: str, table: str, key_columns: Sequence[str],
                   run_id: str, late_data: bool = False, top: int = TOP) -> dict[str, Any] | None:
    """An asset event's `extra` for a run's changed windows of one table (None: nothing
    changed, so no event): how many and why (`BACKFILL`, `INPUT_CORRECTION`, `LATE_DATA`), the
    range they span, their distinct spans (the hours to redo), the largest changes, the run."""
    if not changes:
        return None
    corrected = sum(1 for c in changes if c.old is not None)
    reason = LATE_DATA if late_data else (INPUT_CORRECTION if corrected else BACKFILL)
    spans = sorted({(c.window_start, c.window_end) for c in changes}, key=lambda s: (s[0] or 0, s[1] or 0))
    starts = [c.window_start for c in changes if c.window_start is not None]
    ends = [c.window_end for c in changes if c.window_end is not None]
    largest = sorted(changes, key=lambda c: -magnitude(c.change if c.change is not None else c.new))[:top]
    return {
        "pipeline": pipeline, "table": table, "run_id": run_id, "reason": reason,
        "count": len(changes), "corrected": corrected, "new": sum(1 for c in changes if c.old is None),
        "deleted": sum(1 for c in changes if c.new is None),
        "range": {"start": _iso(min(starts)) if starts else None, "end": _iso(max(ends)) if ends else None},
        "spans": [[_iso(a), _iso(b)] for a, b in spans[:MAX_SPANS]], "spans_complete": len(spans) <= MAX_SPANS,
        "largest": [_change(c, key_columns) for c in largest],
    }


def _change(c: WindowChange, key_columns: Sequence[str]) -> dict[str, Any]:
    return {"key": {k: _json(v) for k, v in zip(key_columns, c.key)}, "window_start": _iso(c.window_start),
            "window_end": _iso(c.window_end), "old": _json(c.old), "new": _json(c.new), "change": _json(c.change)}


def _ms(value: Any) -> int | None:
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return int(aware.timestamp() * 1000)
    return None if value is None else int(value)


def _iso(ms: int | None) -> str | None:
    from dataflow_core.model.time import format_instant

    return None if ms is None else format_instant(ms)


def _json(value: Any) -> Any:
    """A value as JSON keeps it: Decimal (money) as its exact text, times as ISO text."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def changed_spans(extras: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The distinct window spans (ISO start, end) that asset events' `extra`s name, for a
    consumer that redoes its work per span (an invoice per hour). An event whose spans were
    cut (`spans_complete` false) stands for its whole `range`."""
    spans: set[tuple[str, str]] = set()
    for extra in extras:
        if extra.get("spans_complete", True):
            spans.update((a, b) for a, b in extra.get("spans") or [] if a and b)
        elif (extra.get("range") or {}).get("start"):
            spans.add((extra["range"]["start"], extra["range"]["end"]))
    return sorted(spans)
