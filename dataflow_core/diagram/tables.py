"""A diagram's history from the Delta tables of a real run.

Three tables describe a run of one pipeline stage:

- its input: the pipeline's input table (stage 0), read through the pipeline's own key,
  time and id expressions (`model.input_rules`), or the upstream stage's pane log (later stages: a pane's `timestamp` is the
  element's event time and its `emitted_at` the arrival);
- its pane log `<output>_panes`: key columns, `window_start`, `window_end` (null for the
  global window), `value`, `timestamp`, `timing`, `pane_index`, `on_time_index`,
  `is_first`, `is_last`, `is_retraction`, `emitted_at`, `run_id`, `pane_id`;
- the watermark record `dataflow_watermarks`: `pipeline`, `stage`, `run_id`, `step`,
  `processing_time`, `watermark`.

`history_from_frames` turns pandas frames of these (already narrowed or not) into a
`History` and is pure; `read_history` reads the frames with Spark (imported there, not at
module level) for one key and event-time range.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any, Hashable, Sequence

from dataflow_core.diagram.history import ElementRecord, History, monotone_steps
from dataflow_core.errors import DataflowError
from dataflow_core.model.pane_codec import pane_from_row
from dataflow_core.model.panes import Pane
from dataflow_core.model.time import END_OF_TIME, Instant, format_instant
from dataflow_core.pipelines import layout

WATERMARK_TABLE = layout.WATERMARKS
PANE_COLUMNS = (
    "window_start", "window_end", "value", "timestamp", "timing", "pane_index", "on_time_index",
    "is_first", "is_last", "is_retraction", "emitted_at",
)


def parse_key(text: str, key_columns: Sequence[str]) -> dict[str, str]:
    """`--key` text -> {column: value as text}.

    One key column: the value itself (`--key ad_7`). Several: `col=value,col=value` or the
    values in key-column order separated by commas (`--key u1,ad_7`).
    """
    columns = list(key_columns)
    if not columns:
        raise DataflowError("this stage has no key columns, so --key cannot choose one")
    if len(columns) == 1:
        name = columns[0]
        prefix = f"{name}="
        return {name: text[len(prefix):] if text.startswith(prefix) else text}
    parts = [p.strip() for p in text.split(",")]
    if all("=" in p for p in parts):
        pairs = dict(p.split("=", 1) for p in parts)
        unknown = set(pairs) - set(columns)
        if unknown or set(pairs) != set(columns):
            raise DataflowError(
                f"--key {text!r}: give every key column ({', '.join(columns)}) as column=value, comma-separated"
            )
        return {c: pairs[c] for c in columns}
    if len(parts) != len(columns) or any("=" in p for p in parts):
        raise DataflowError(
            f"--key {text!r}: this stage is keyed by {len(columns)} columns ({', '.join(columns)}); "
            f"give {', '.join(c + '=...' for c in columns)}"
        )
    return dict(zip(columns, parts))


def key_label(key: dict[str, str]) -> Hashable:
    return next(iter(key.values())) if len(key) == 1 else ", ".join(f"{c}={v}" for c, v in key.items())


def to_ms(value: Any) -> Instant | None:
    """A timestamp cell (pandas Timestamp, datetime, numpy datetime64 or ms integer) -> ms.

    Naive timestamps are taken as UTC. Null, NaN and NaT give None.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise DataflowError(f"not a timestamp: {value!r}")
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return int(value)
    if isinstance(value, int):
        return value
    try:
        import pandas as pd

        if value is pd.NaT or (not isinstance(value, (str, bytes)) and pd.isna(value)):
            return None
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError):
        raise DataflowError(f"not a timestamp: {value!r}") from None
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return int(stamp.value // 1_000_000)


def _matches(row: Any, key: dict[str, str]) -> bool:
    return all(_text(row[c]) == v for c, v in key.items())


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _null(v: Any) -> bool:
    if v is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(v)) if not isinstance(v, (list, tuple, dict)) else False
    except (TypeError, ValueError):
        return False


def _plain(v: Any) -> Any:
    """numpy scalars -> Python values, so labels and comparisons behave as for scenarios."""
    if hasattr(v, "item") and not isinstance(v, (list, tuple, dict, str, bytes)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            return v
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _pane_of(label: Hashable, row: dict) -> Pane:
    """A pane-log row (cells as pandas gives them) as its pane, through the pane codec."""
    start, end = to_ms(row["window_start"]), to_ms(row["window_end"])
    if end is not None and (start is None or end <= start):
        raise DataflowError(f"the pane log has a window with a bad start: {row['window_start']!r}")
    emitted = to_ms(row["emitted_at"])
    if emitted is None:
        raise DataflowError("the pane log has a pane without emitted_at")
    value, on_time = _plain(row["value"]), row["on_time_index"]
    fields = {**row, "window_start": None if end is None else start, "window_end": end,
              "value": None if _null(value) else value, "ts": to_ms(row["timestamp"]), "emitted_at": emitted,
              "on_time_index": None if _null(on_time) else on_time, "timing": str(row["timing"])}
    try:
        return pane_from_row(label, fields)
    except ValueError:
        raise DataflowError(f"the pane log has an unknown timing {row['timing']!r} (EARLY, ON_TIME or LATE)") from None


def _panes_of(panes: Any, key: dict[str, str], label: Hashable, event_from: Instant, event_to: Instant,
              run_id: str | None) -> list[Pane]:
    """The key's panes (of run `run_id`) whose windows overlap [event_from, event_to), in the
    order a diagram draws them."""
    out = []
    for row in panes.to_dict("records"):
        if not _matches(row, key) or (run_id is not None and row.get("run_id") != run_id):
            continue
        pane = _pane_of(label, row)
        if pane.window.end < END_OF_TIME and (pane.window.end <= event_from or pane.window.start >= event_to):
            continue
        out.append(pane)
    out.sort(key=lambda p: (p.emitted_at, not p.retraction, p.window.end, p.index))
    return out


def _check_columns(frame: Any, needed: Sequence[str], what: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DataflowError(f"{what} has no column(s) {', '.join(missing)} (it has: {', '.join(map(str, frame.columns))})")


def history_from_frames(
    *,
    elements: Any,
    panes: Any,
    watermarks: Any,
    key: dict[str, str],
    event_from: Instant,
    event_to: Instant,
    element_time: str = "event_time",
    element_arrival: str = "ingest_time",
    element_value: str | None = None,
    run_id: str | None = None,
    title: str = "",
    subtitle: str = "",
) -> History:
    """Pandas frames of a run's tables -> the `History` of one key over [event_from, event_to).

    `elements`: rows with the key columns, `element_time` and `element_arrival` (and
    `element_value` if given); `panes`: the pane log; `watermarks`: the watermark steps of
    the stage (`processing_time`, `watermark`; other columns ignored). Elements are kept if
    their event time is in the range; panes if their window overlaps it (the global window
    always does). With `run_id`, only that run's panes and watermark steps are kept.
    """
    if event_to <= event_from:
        raise DataflowError(
            f"empty event-time range: --to {format_instant(event_to)} is not after --from {format_instant(event_from)}"
        )
    label = key_label(key)
    _check_columns(elements, [*key, element_time, element_arrival] + ([element_value] if element_value else []), "the input")
    _check_columns(panes, [*key, *PANE_COLUMNS], "the pane log")
    _check_columns(watermarks, ["processing_time", "watermark"], "the watermark record")

    records = []
    for row in elements.to_dict("records"):
        if not _matches(row, key):
            continue
        t, arrival = to_ms(row[element_time]), to_ms(row[element_arrival])
        if t is None or arrival is None or not event_from <= t < event_to:
            continue
        value = _plain(row[element_value]) if element_value else None
        kind = str(row.get("element_kind") or "accepted")
        records.append(ElementRecord(label, None if _null(value) else value, t, arrival, kind))
    records.sort(key=lambda e: (e.arrival, e.event_time))

    out = _panes_of(panes, key, label, event_from, event_to, run_id)
    points = []
    for row in watermarks.to_dict("records"):
        if run_id is not None and "run_id" in row and row["run_id"] != run_id:
            continue
        t, wm = to_ms(row["processing_time"]), to_ms(row["watermark"])
        if t is not None and wm is not None:
            points.append((t, wm))
    if not records and not out:
        raise DataflowError(
            f"unknown key {label!r}: no input rows and no panes for it between "
            f"{format_instant(event_from)} and {format_instant(event_to)}"
        )
    return History(records, monotone_steps(points), out, title, subtitle)


# --- reading the tables with Spark -----------------------------------------------------------


def stage_of(spec: Any, stage: str | None) -> tuple[int, Any]:
    stages = list(getattr(spec, "stages", []))
    if not stages:
        raise DataflowError(f"pipeline {getattr(spec, 'name', '?')!r} has no stages")
    if stage is None:
        return 0, stages[0]
    for i, s in enumerate(stages):
        if stage in (str(i), getattr(s, "name", None), getattr(s, "output", None)):
            return i, s
    names = [str(getattr(s, "name", None) or getattr(s, "output", i)) for i, s in enumerate(stages)]
    raise DataflowError(f"unknown stage {stage!r} (stages: {', '.join(names)}, or their numbers from 0)")


def read_history(
    spark: Any,
    spec: Any,
    pipeline: str,
    key_text: str,
    event_from: Instant,
    event_to: Instant,
    stage: str | None = None,
    run_id: str | None = None,
) -> History:
    """Reads one key's slice of a real run's tables with Spark and builds its history."""
    from pyspark.sql import functions as F

    index, st = stage_of(spec, stage)
    key = parse_key(key_text, list(getattr(st, "key_columns", [])))
    lo = dt.datetime.fromtimestamp(event_from / 1000, dt.timezone.utc).replace(tzinfo=None)
    hi = dt.datetime.fromtimestamp(event_to / 1000, dt.timezone.utc).replace(tzinfo=None)
    elements, element_args = _element_rows(spark, spec, pipeline, index, key, lo, hi)
    pane_table = layout.panes(st)
    panes = _keyed(_table(spark, pane_table, pipeline), key)
    panes = panes.filter(
        F.col("window_end").isNull() | ((F.col("window_end") > F.lit(lo)) & (F.col("window_start") < F.lit(hi)))
    )
    panes = panes.select(
        *key, _ms("window_start"), _ms("window_end"), "value", _ms("timestamp"), "timing", "pane_index",
        "on_time_index", "is_first", "is_last", "is_retraction", _ms("emitted_at"), "run_id",
    )
    stage_names = {str(index), str(getattr(st, "name", "") or ""), str(st.output)} - {""}
    return history_from_frames(
        elements=elements,
        panes=panes.toPandas(),
        watermarks=_watermark_steps(spark, pipeline, stage_names),
        key=key,
        event_from=event_from,
        event_to=event_to,
        run_id=run_id,
        title=f"{pipeline}: {pane_table}",
        subtitle=f"key {key_label(key)}, event time {format_instant(event_from)} to {format_instant(event_to)}",
        **element_args,
    )


def _watermark_steps(spark: Any, pipeline: str, stage_names: set[str]) -> Any:
    """The stage's recorded watermark steps; none while no replay has recorded any (a
    pipeline run only by batch backfills and micro-batches has no such table)."""
    import pandas as pd
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import table_exists

    if not table_exists(spark, WATERMARK_TABLE):
        return pd.DataFrame({"run_id": [], "step": [], "processing_time": [], "watermark": []})
    marks = _table(spark, WATERMARK_TABLE, pipeline)
    marks = marks.filter((F.col("pipeline") == pipeline) & F.col("stage").isin(sorted(stage_names)))
    return marks.select("run_id", "step", _ms("processing_time"), _ms("watermark")).toPandas()


def _element_rows(spark: Any, spec: Any, pipeline: str, index: int, key: dict[str, str], lo: Any,
                  hi: Any) -> tuple[Any, dict[str, Any]]:
    """The key's elements in [lo, hi) of stage `index`: input rows (first stage) or the
    upstream stage's panes; and how `history_from_frames` reads them."""
    from pyspark.sql import functions as F

    if index == 0:
        return _input_rows(spark, spec, pipeline, key, lo, hi), {}
    upstream = layout.panes(spec.stages[index - 1])
    source = _table(spark, upstream, pipeline)
    _check_columns(source, [*key, "timestamp", "emitted_at", "value", "is_retraction"], f"pane log {upstream!r}")
    elements = _keyed(source, key).filter(~F.col("is_retraction"))
    elements = elements.filter((F.col("timestamp") >= F.lit(lo)) & (F.col("timestamp") < F.lit(hi)))
    elements = elements.select(*key, _ms("timestamp"), _ms("emitted_at"), "value").toPandas()
    return elements, {"element_time": "timestamp", "element_arrival": "emitted_at", "element_value": "value"}


def _input_rows(spark: Any, spec: Any, pipeline: str, key: dict[str, str], lo: Any, hi: Any) -> Any:
    """The key's input rows of event time [lo, hi) as the runners see them: the pipeline's
    own key, time and id expressions and rules (`spark.input.rows`), each row with what
    became of it (`element_kind`: accepted, duplicate or quarantined, as the explorer and
    the model's `first_deliveries` tell them)."""
    from pyspark.sql import functions as F

    from dataflow_core.model.input_rules import first_deliveries, input_of
    from dataflow_core.spark.input.rows import refused, tag_rows
    from dataflow_core.spark.input.fields import field_value, selected

    desc = input_of(spec)
    tagged = tag_rows(spark, spec, selected(spec, _table(spark, spec.input_table, pipeline)))
    event, ingest = field_value(desc.event_time), field_value(desc.ingest_time)
    lo_ms, hi_ms = (int(t.replace(tzinfo=dt.timezone.utc).timestamp() * 1000) for t in (lo, hi))
    for f in desc.key:
        tagged = tagged.filter(field_value(f).cast("string") == F.lit(key[f.column]))
    frame = tagged.filter((event >= F.lit(lo_ms)) & (event < F.lit(hi_ms))).select(
        *[field_value(f).alias(f.column) for f in desc.key], event.alias("event_time"), ingest.alias("ingest_time"),
        field_value(desc.event_id).alias("event_id"), refused().alias("refused")).toPandas()
    records = frame.to_dict("records")
    frame["element_kind"] = first_deliveries(records, lambda r: r["event_id"], lambda r: _plain(r["ingest_time"]),
                                             lambda r: _plain(r["event_time"]), refused=lambda r: bool(r["refused"]))
    return frame


def _ms(column: str) -> Any:
    from pyspark.sql import functions as F

    return F.expr(f"unix_millis(`{column}`)").alias(column)


def _keyed(df: Any, key: dict[str, str]) -> Any:
    from pyspark.sql import functions as F

    for c, v in key.items():
        df = df.filter(F.col(c).cast("string") == v)
    return df


def _table(spark: Any, name: str, pipeline: str) -> Any:
    """The warehouse's table `name` (found under the warehouse root, as every command reads
    it: a fresh session's catalog knows none)."""
    from dataflow_core.spark.platform.tables import read_table, table_exists

    if not table_exists(spark, name):
        raise DataflowError(f"table {name!r} does not exist (has pipeline {pipeline!r} run yet?)")
    return read_table(spark, name)
