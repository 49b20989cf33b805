"""The pane explorer's data: pipelines, stages and keys, one key's pane history, results and
pane log, all read through the fast reader (`dataflow_core.query`: delta-rs, no JVM), and the
diagram drawn by `dataflow_core.diagram` exactly as `dataflow diagram --pipeline --key` draws it.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

from dataflow_core.diagram.tables import WATERMARK_TABLE, history_from_frames, stage_of, key_label, parse_key
from dataflow_core.errors import DataflowError
from dataflow_core.model.input_rules import first_deliveries, input_of
from dataflow_core.model.time import format_instant, parse_instant
from dataflow_core.pipelines import layout
from dataflow_core.query import list_tables, literal, query, quote_ident
from dataflow_core.query.spark_dialect import differs_from_spark

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


KEY_CACHE_TABLES = 16  # pane-log versions whose key counts are kept (one per stage is enough)
KEY_CACHE_MAX_KEYS = 200_000  # a pane log with more keys is searched in SQL each time
_key_counts: dict[tuple[str, str, int], list[dict[str, Any]] | None] = {}
_key_counts_lock = threading.Lock()


def search_keys(spec: Any, stage: str | None, text: str = "", warehouse: str | None = None,
                limit: int = KEY_LIST_LIMIT) -> list[dict[str, Any]]:
    """Keys of the stage's pane log containing `text` (case-insensitive), busiest first.

    The page and every keystroke of the search box ask; the pane log's keys are counted
    (a GROUP BY over the whole table) once per table version and kept (`_key_counts`),
    unless it has more than KEY_CACHE_MAX_KEYS keys."""
    _, st = stage_of(spec, stage)
    table = layout.panes(st)
    if table not in list_tables(warehouse):
        return []
    label = _key_label(list(st.key_columns))
    counted = _counted_keys(table, label, warehouse)
    if counted is not None:
        needle = text.lower()
        return [r for r in counted if not needle or (r["key"] is not None and needle in r["key"].lower())][:limit]
    where = f"WHERE lower({label}) LIKE {literal('%' + text.lower() + '%')}" if text else ""
    return _count_keys(table, label, where, limit, warehouse)


def _key_label(columns: list[str]) -> str:
    """DataFusion SQL: the key as the explorer writes it (`a=1, b=x` for several columns)."""
    if len(columns) > 1:
        return " || ', ' || ".join(f"{literal(c + '=')} || CAST({quote_ident(c)} AS VARCHAR)" for c in columns)
    return f"CAST({quote_ident(columns[0])} AS VARCHAR)"


def _count_keys(table: str, label: str, where: str, limit: int, warehouse: str | None) -> list[dict[str, Any]]:
    return query(f"SELECT {label} AS key, count(*) AS panes, sum(CASE WHEN is_retraction THEN 1 ELSE 0 END) AS "
                 f"retractions FROM {table} {where} GROUP BY 1 ORDER BY panes DESC, key LIMIT {int(limit)}",
                 warehouse).table.to_pylist()


def _counted_keys(table: str, label: str, warehouse: str | None) -> list[dict[str, Any]] | None:
    """Every key of this version of the pane log with its counts, busiest first (counted once
    per version); None when there are too many to keep."""
    from dataflow_core.query import open_table, resolve_warehouse

    entry = (resolve_warehouse(warehouse), f"{table}:{label}", open_table(table, warehouse).version())
    with _key_counts_lock:
        if entry in _key_counts:
            return _key_counts[entry]
    rows = _count_keys(table, label, "", KEY_CACHE_MAX_KEYS + 1, warehouse)
    kept = rows if len(rows) <= KEY_CACHE_MAX_KEYS else None  # None kept too: not counted again
    with _key_counts_lock:
        while len(_key_counts) >= KEY_CACHE_TABLES:
            _key_counts.pop(next(iter(_key_counts)))
        _key_counts[entry] = kept
    return kept


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
    note: str = ""  # why the input's elements are not drawn (`unlike_spark`), else empty

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
    pane_table = layout.panes(st)
    if pane_table not in tables:
        raise DataflowError(f"table {pane_table!r} does not exist yet (has pipeline {pipeline!r} run?)")
    unlike = unlike_spark(spec, tables, warehouse) if index == 0 else None
    if index == 0:
        source, time_col = spec.input_table, input_of(spec).event_time.expression
        source_filter = None if unlike else input_key_filter(spec, key)
    else:
        source, time_col = layout.panes(spec.stages[index - 1]), "timestamp"
        source_filter = _key_filter(key)
    lo, hi = _event_range(key, event_from, event_to, pane_table, source, time_col, source_filter, tables, warehouse)

    cols = ", ".join(quote_ident(c) for c in key)
    in_range = f"(window_end IS NULL OR (window_end > {_ts(lo)} AND window_start < {_ts(hi)}))"
    panes = query(
        f"SELECT {cols}, window_start, window_end, value, timestamp, timing, pane_index, on_time_index, is_first, "
        f"is_last, is_retraction, emitted_at, run_id FROM {pane_table} WHERE {_key_filter(key)} AND {in_range} "
        "ORDER BY emitted_at, window_start, pane_index, is_retraction", warehouse).table.to_pandas()
    if index == 0:
        elements = input_elements(spec, tables if unlike is None else set(), key, lo, hi, warehouse)
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
    marks = watermark_steps(pipeline, stages, st.output, index, tables, warehouse)
    history = history_from_frames(
        elements=elements, panes=panes, watermarks=marks, key=key, event_from=lo, event_to=hi,
        title=f"{pipeline}: {pane_table}",
        subtitle=f"key {key_label(key)}, event time {format_instant(lo)} to {format_instant(hi)}",
        **element_args,
    )
    svg = render(history, "svg", event_range=(lo, hi)).decode()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: the SVG goes inline
    results: list[dict[str, Any]] = []
    if layout.results(st) in tables and getattr(st, "keeps_results", True):
        results = query(f"SELECT * FROM {layout.results(st)} WHERE {_key_filter(key)} AND {in_range} "
                        "ORDER BY window_start", warehouse).table.to_pylist()
    rows = [{c: r[c] for c in PANE_LOG_COLUMNS} for r in panes.to_dict("records")]
    note = "" if unlike is None else (
        f"The input's elements are not drawn: the explorer reads with DataFusion, which may not evaluate the "
        f"pipeline's {unlike}. `dataflow diagram --pipeline {pipeline} --key '{key_label(key)}' --from "
        f"{format_instant(lo)} --to {format_instant(hi)}` draws them with Spark, as the runs computed them.")
    return KeyView(pipeline, st.output, str(key_label(key)), lo, hi, svg, rows, results, len(history.elements),
                   _counts(history, elements), note)


def _event_range(key: dict, event_from: str | None, event_to: str | None, pane_table: str, source: str,
                 time_col: str, source_filter: str | None, tables: set[str], warehouse: str | None) -> tuple[int, int]:
    """The event-time range [lo, hi) to show: as given, else the key's windows (or, for global
    windows, its elements' event times, unless `source_filter` is None: they cannot be
    found), at most DEFAULT_SPAN_MS long."""
    lo, hi = _instant(event_from, "from"), _instant(event_to, "to")
    if lo is None or hi is None:
        span = query(f"SELECT count(*) AS n, min(window_start) AS lo, max(window_end) AS hi FROM {pane_table} "
                     f"WHERE {_key_filter(key)}", warehouse).table.to_pylist()[0]
        if not span["n"]:
            raise DataflowError(f"unknown key {key_label(key)!r}: no panes for it in {pane_table}")
        if span["lo"] is None and source in tables and source_filter:  # global windows: the elements' event times
            span = query(f"SELECT min({time_col}) AS lo, max({time_col}) AS hi FROM {source} "
                         f"WHERE {source_filter}", warehouse).table.to_pylist()[0]
        if span["lo"] is None:
            raise DataflowError("give the event-time range (from, to): the key's windows have no bounds")
        first = int(span["lo"].timestamp() * 1000)
        last = int(span["hi"].timestamp() * 1000) + 1 if span["hi"] is not None else first + DEFAULT_SPAN_MS
        lo = lo if lo is not None else first
        hi = hi if hi is not None else min(max(last, lo + 1), lo + DEFAULT_SPAN_MS)
    if hi <= lo:
        raise DataflowError(f"empty event-time range: to {format_instant(hi)} is not after from {format_instant(lo)}")
    return lo, hi


def _counts(history: Any, elements: Any) -> dict[str, int]:
    """The figures beside the diagram: every row read, also one the diagram cannot place (no
    ingest time: quarantined), told apart by what became of it."""
    kinds = list(elements["element_kind"]) if "element_kind" in elements else [e.kind for e in history.elements]
    return {
        "panes": sum(not p.retraction for p in history.panes),
        "retractions": sum(p.retraction for p in history.panes),
        "elements": len(history.elements),
        "read": len(kinds),
        "accepted": kinds.count("accepted"),
        "duplicates": kinds.count("duplicate"),
        "quarantined": kinds.count("quarantined"),
        "watermark_steps": len(history.watermarks),
    }


def unlike_spark(spec: Any, tables: set[str], warehouse: str | None) -> str | None:
    """What of the pipeline's input description DataFusion may evaluate otherwise than Spark
    (`query.spark_dialect`): the first key, time or id expression (named, with why); None
    when the explorer finds a key's input rows as the runners did."""
    inexact: list[str] = []
    if spec.input_table in tables:
        import pyarrow.types as pt

        schema = query(f"SELECT * FROM {spec.input_table} LIMIT 0", warehouse).table.schema
        inexact = [f.name for f in schema if pt.is_timestamp(f.type) or pt.is_floating(f.type)]
    desc = input_of(spec)
    for f in (*desc.key, desc.event_time, desc.ingest_time, desc.event_id):
        why = differs_from_spark(f.expression, inexact)
        if why is not None:
            return f"{f.label} as Spark does ({why})"
    return None


def input_key_filter(spec: Any, key: dict[str, str]) -> str:
    """DataFusion SQL: the input rows of `key`, by the pipeline's key expressions."""
    exprs = {f.column: f.expression for f in input_of(spec).key}
    return " AND ".join(f"CAST(({exprs[c]}) AS VARCHAR) = {literal(v)}" for c, v in key.items())


def input_rows_sql(spec: Any, table: str, key: dict[str, str], lo: int, hi: int) -> str:
    """DataFusion SQL for the key's input rows of event time [lo, hi) in `table` (the input,
    or its quarantine, which keeps the input's columns): the pipeline's own expressions
    (`model.input_rules.input_of`) give the key columns, `event_time`, `ingest_time` and
    `event_id` (with the times as text too, to match rows across tables)."""
    desc = input_of(spec)
    event, ingest = f"({desc.event_time.expression})", f"({desc.ingest_time.expression})"
    keys = ", ".join(f"({f.expression}) AS {quote_ident(f.column)}" for f in desc.key)
    return (f"SELECT {keys}, {event} AS event_time, {ingest} AS ingest_time, "
            f"CAST(({desc.event_id.expression}) AS VARCHAR) AS event_id, CAST({event} AS VARCHAR) AS event_text, "
            f"CAST({ingest} AS VARCHAR) AS ingest_text FROM {table} "
            f"WHERE {input_key_filter(spec, key)} AND {event} >= {_ts(lo)} AND {event} < {_ts(hi)}")


def input_elements(spec: Any, tables: set[str], key: dict[str, str], lo: int, hi: int,
                   warehouse: str | None) -> Any:
    """The key's input rows in [lo, hi), each with what became of it (`element_kind`):
    quarantined (its row is in `<pipeline>__quarantine`), a duplicate (a later delivery of an
    event id already delivered), or accepted, as the runs' ledgers count them, so that the
    explorer's counts tell them apart instead of counting every row read as an element.
    The pipeline's own columns and key expressions, read with DataFusion."""
    import pandas as pd

    source = spec.input_table
    if source not in tables:
        return pd.DataFrame({**{c: [] for c in key}, "event_time": [], "ingest_time": [], "element_kind": []})
    select = input_rows_sql(spec, source, key, lo, hi)
    where = f" AND ({spec.where})" if getattr(spec, "where", None) else ""
    try:
        frame = query(select + where, warehouse).table.to_pandas()
    except DataflowError as exc:  # a `where` in Spark SQL that DataFusion does not take: every row of the key
        if not where:
            raise DataflowError(f"pipeline {spec.name!r}: the explorer reads its input with DataFusion, which "
                                f"cannot evaluate the pipeline's expressions: {exc}") from None
        frame = query(select, warehouse).table.to_pandas()
    refused: set[tuple[str, str, str]] = set()
    quarantine = layout.quarantine(spec)
    if quarantine in tables:
        bad = query(input_rows_sql(spec, quarantine, key, lo, hi), warehouse).table.to_pylist()
        refused = {(str(r["event_id"]), str(r["event_text"]), str(r["ingest_text"])) for r in bad}
    rows = [(str(e), str(t), str(i)) for e, t, i in zip(frame["event_id"], frame["event_text"], frame["ingest_text"])]
    frame["element_kind"] = element_kinds(rows, list(frame["ingest_text"]), list(frame["event_text"]), refused)
    return frame


def element_kinds(rows: list[tuple[str, str, str]], ingest: list[Any], event: list[Any],
                  refused: set[tuple[str, str, str]]) -> list[str]:
    """Per row (event id, event time, ingest time as text): "quarantined" if refused, else
    "duplicate" when an earlier delivery of its event id was accepted, else "accepted": the
    input's own rule (`model.input_rules.first_deliveries`)."""
    index = list(range(len(rows)))
    return first_deliveries(index, lambda i: rows[i][0], lambda i: ingest[i], lambda i: event[i],
                            refused=lambda i: rows[i] in refused)


def watermark_steps(pipeline: str, stages: list[str], output: str, index: int, tables: set[str],
                    warehouse: str | None) -> Any:
    """Every recorded (processing time, watermark) of the stage, in ms: a replay's steps
    (`dataflow_watermarks`), each finished micro-batch's watermark (`dataflow_batches`) and
    each finished batch backfill's (its range's end at its processing time: a batch run
    sees all of its input, a perfect watermark)."""
    import json

    import pandas as pd

    from dataflow_core.model.time import END_OF_TIME
    from dataflow_core.spark.sinks.batch_records import LOG_COLUMNS, logged_batch

    points: list[tuple[int, int]] = []
    if WATERMARK_TABLE in tables:
        marks = query(f"SELECT processing_time, watermark FROM {WATERMARK_TABLE} WHERE pipeline = "
                      f"{literal(pipeline)} AND stage IN ({', '.join(literal(s) for s in stages)})",
                      warehouse).table.to_pylist()
        points += [(_ms(m["processing_time"]), _ms(m["watermark"])) for m in marks
                   if m["processing_time"] is not None and m["watermark"] is not None]
    if layout.BATCHES in tables:
        rows = query(f"SELECT {', '.join(LOG_COLUMNS)} FROM {layout.BATCHES} WHERE pipeline = {literal(pipeline)} "
                     "AND status = 'finished'", warehouse).table.to_pylist()
        for b in map(logged_batch, rows):
            wm = b.watermarks.get(output, b.watermarks.get("input") if index == 0 else None)
            if wm is not None and b.now_ms is not None:
                points.append((int(b.now_ms), int(wm)))
    if layout.RUNS in tables:
        runs = query(f"SELECT now, args FROM {layout.RUNS} WHERE pipeline = {literal(pipeline)} AND "
                     "command = 'backfill' AND status = 'finished'", warehouse).table.to_pylist()
        for r in runs:
            end = json.loads(r["args"] or "{}").get("end")
            if end and r["now"] is not None:
                points.append((_ms(r["now"]), parse_instant(end)))
    points = [(t, w) for t, w in points if -END_OF_TIME < w < END_OF_TIME - 1]
    return pd.DataFrame({"processing_time": [t for t, _ in points], "watermark": [w for _, w in points]},
                        dtype="int64")


def _ms(value: Any) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return int(value.timestamp() * 1000)
