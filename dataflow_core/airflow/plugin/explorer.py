"""The pane explorer's data: pipelines, stages and keys, one key's pane history, results and
pane log, all read through the fast reader (`dataflow_core.query`: delta-rs, no JVM), and the
diagram drawn by `dataflow_core.diagram` exactly as `dataflow diagram --pipeline --key` draws it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from dataflow_core.diagram.tables import WATERMARK_TABLE, history_from_frames, stage_of, key_label, parse_key
from dataflow_core.errors import DataflowError
from dataflow_core.model.time import format_instant, parse_instant
from dataflow_core.query import list_tables, literal, query, quote_ident

DEFAULT_SPAN_MS = 12 * 3600 * 1000  # without --to: at most 12 hours from the first window
KEY_LIST_LIMIT = 50
PANE_LOG_COLUMNS = ("window_start", "window_end", "value", "timing", "pane_index", "on_time_index",
                    "is_retraction", "emitted_at", "run_id")


def pipelines() -> dict[str, Any]:
    from dataflow_core.pipelines import all_pipelines

    return all_pipelines()


def stage_names(spec: Any) -> list[str]:
    return [s.output for s in spec.stages]


def _ts(ms: int) -> str:
    return "TIMESTAMP " + literal(dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat())


def _key_filter(key: dict[str, str]) -> str:
    return " AND ".join(f"CAST({quote_ident(c)} AS VARCHAR) = {literal(v)}" for c, v in key.items())


def search_keys(spec: Any, stage: str | None, text: str = "", warehouse: str | None = None,
                limit: int = KEY_LIST_LIMIT) -> list[dict[str, Any]]:
    """Keys of the stage's pane log containing `text` (case-insensitive), busiest first."""
    _, st = stage_of(spec, stage)
    table = f"{st.output}_panes"
    if table not in list_tables(warehouse):
        return []
    columns = list(st.key_columns)
    label = " || ', ' || ".join(f"CAST({quote_ident(c)} AS VARCHAR)" for c in columns) if len(columns) > 1 else \
        f"CAST({quote_ident(columns[0])} AS VARCHAR)"
    if len(columns) > 1:
        label = " || ', ' || ".join(f"{literal(c + '=')} || CAST({quote_ident(c)} AS VARCHAR)" for c in columns)
    where = f"WHERE lower({label}) LIKE {literal('%' + text.lower() + '%')}" if text else ""
    rows = query(f"SELECT {label} AS key, count(*) AS panes, sum(CASE WHEN is_retraction THEN 1 ELSE 0 END) AS "
                 f"retractions FROM {table} {where} GROUP BY 1 ORDER BY panes DESC, key LIMIT {int(limit)}",
                 warehouse).table.to_pylist()
    return rows


@dataclass
class KeyView:
    pipeline: str
    stage: str
    key: str
    event_from: int
    event_to: int
    svg: str
    panes: list[dict[str, Any]]
    results: list[dict[str, Any]]
    elements: int
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def range_text(self) -> tuple[str, str]:
        return format_instant(self.event_from), format_instant(self.event_to)


def _instant(text: str | None, what: str) -> int | None:
    if not text:
        return None
    try:
        return parse_instant(text.strip())
    except ValueError as exc:
        raise DataflowError(f"{what} {text!r}: {exc}") from None


def key_view(pipeline: str, stage: str | None, key_text: str, event_from: str | None = None,
             event_to: str | None = None, warehouse: str | None = None) -> KeyView:
    """Everything the explorer shows for one key: the diagram (SVG), the pane log rows and the
    results rows of its windows in [from, to)."""
    from dataflow_core.diagram.draw import render
    from dataflow_core.pipelines import get

    spec = get(pipeline)
    index, st = stage_of(spec, stage)
    key = parse_key(key_text, list(st.key_columns))
    tables = set(list_tables(warehouse))
    pane_table = f"{st.output}_panes"
    if pane_table not in tables:
        raise DataflowError(f"table {pane_table!r} does not exist yet (has pipeline {pipeline!r} run?)")
    lo, hi = _instant(event_from, "from"), _instant(event_to, "to")
    if index == 0:
        source, time_col = spec.input_table, "event_time"
    else:
        source, time_col = f"{spec.stages[index - 1].output}_panes", "timestamp"
    if lo is None or hi is None:
        span = query(f"SELECT count(*) AS n, min(window_start) AS lo, max(window_end) AS hi FROM {pane_table} "
                     f"WHERE {_key_filter(key)}", warehouse).table.to_pylist()[0]
        if not span["n"]:
            raise DataflowError(f"unknown key {key_label(key)!r}: no panes for it in {pane_table}")
        if span["lo"] is None and source in tables:  # global windows: the elements' event times
            span = query(f"SELECT min({time_col}) AS lo, max({time_col}) AS hi FROM {source} "
                         f"WHERE {_key_filter(key)}", warehouse).table.to_pylist()[0]
        if span["lo"] is None:
            raise DataflowError("give the event-time range (from, to): the key's windows have no bounds")
        first = int(span["lo"].timestamp() * 1000)
        last = int(span["hi"].timestamp() * 1000) + 1 if span["hi"] is not None else first + DEFAULT_SPAN_MS
        lo = lo if lo is not None else first
        hi = hi if hi is not None else min(max(last, lo + 1), lo + DEFAULT_SPAN_MS)
    if hi <= lo:
        raise DataflowError(f"empty event-time range: to {format_instant(hi)} is not after from {format_instant(lo)}")

    cols = ", ".join(quote_ident(c) for c in key)
    in_range = f"(window_end IS NULL OR (window_end > {_ts(lo)} AND window_start < {_ts(hi)}))"
    panes = query(
        f"SELECT {cols}, window_start, window_end, value, timestamp, timing, pane_index, on_time_index, is_first, "
        f"is_last, is_retraction, emitted_at, run_id FROM {pane_table} WHERE {_key_filter(key)} AND {in_range} "
        "ORDER BY emitted_at, is_retraction DESC, window_start, pane_index", warehouse).table.to_pandas()
    if index == 0:
        elements = query(
            f"SELECT {cols}, event_time, ingest_time FROM {source} WHERE {_key_filter(key)} AND "
            f"event_time >= {_ts(lo)} AND event_time < {_ts(hi)}", warehouse).table.to_pandas() \
            if source in tables else None
        element_args: dict[str, Any] = {}
    else:
        elements = query(
            f"SELECT {cols}, timestamp, emitted_at, value FROM {source} WHERE {_key_filter(key)} AND "
            f"NOT is_retraction AND timestamp >= {_ts(lo)} AND timestamp < {_ts(hi)}", warehouse).table.to_pandas()
        element_args = {"element_time": "timestamp", "element_arrival": "emitted_at", "element_value": "value"}
    if elements is None:
        import pandas as pd

        elements = pd.DataFrame({**{c: [] for c in key}, "event_time": [], "ingest_time": []})
    stages = sorted({str(index), str(getattr(st, "name", "") or ""), st.output} - {""})
    if WATERMARK_TABLE in tables:
        marks = query(f"SELECT run_id, step, processing_time, watermark FROM {WATERMARK_TABLE} WHERE pipeline = "
                      f"{literal(pipeline)} AND stage IN ({', '.join(literal(s) for s in stages)})",
                      warehouse).table.to_pandas()
    else:
        import pandas as pd

        marks = pd.DataFrame({"processing_time": [], "watermark": []})
    history = history_from_frames(
        elements=elements, panes=panes, watermarks=marks, key=key, event_from=lo, event_to=hi,
        title=f"{pipeline}: {pane_table}",
        subtitle=f"key {key_label(key)}, event time {format_instant(lo)} to {format_instant(hi)}",
        **element_args,
    )
    svg = render(history, "svg", event_range=(lo, hi)).decode()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: the SVG goes inline
    results: list[dict[str, Any]] = []
    if st.output in tables and getattr(st, "keeps_results", True):
        results = query(f"SELECT * FROM {st.output} WHERE {_key_filter(key)} AND {in_range} ORDER BY window_start",
                        warehouse).table.to_pylist()
    rows = [{c: r[c] for c in PANE_LOG_COLUMNS} for r in panes.to_dict("records")]
    counts = {
        "panes": sum(not p.retraction for p in history.panes),
        "retractions": sum(p.retraction for p in history.panes),
        "elements": len(history.elements),
    }
    return KeyView(pipeline, st.output, str(key_label(key)), lo, hi, svg, rows, results, len(history.elements), counts)
