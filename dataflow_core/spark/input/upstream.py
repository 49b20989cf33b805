"""A later stage's elements: the upstream stage's panes (pane-log rows or results rows)
turned into (key, value) elements by the stage's `from_upstream`, in executors.

Each element carries the pane's timestamp as its event time and the pane's retraction
flag; `passthrough` columns (a replay's sub-step and emission time) ride along."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.windows import GLOBAL_WINDOW, IntervalWindow
from dataflow_core.pipelines.spec import StageSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PANE_FIELDS = ("window_start", "window_end", "value", "ts", "timing", "pane_index", "on_time_index",
               "is_retraction", "emitted_at")
"""What the mapper's Pane is built from (times in ms; `ts` null for the end of time)."""


def elements_from_panes(
    panes: "DataFrame", upstream: StageSpec, stage: StageSpec, passthrough: Sequence[str] = ()
) -> "DataFrame":
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    up_keys = upstream.key_columns
    mapper = stage.from_upstream
    assert mapper is not None
    key_types = {c: (panes.schema[c].dataType.simpleString() if c in panes.columns else "string")
                 for c in stage.key_columns}
    out_cols = [f"`{c}` {t}" for c, t in key_types.items()]
    out_cols += [f"value {stage.input_type}", "event_ms bigint", "retraction boolean"]
    out_cols += [f"`{c}` {panes.schema[c].dataType.simpleString()}" for c in passthrough]
    schema = ", ".join(out_cols)
    arrow_schema = to_arrow_schema(_parse_datatype_string(schema))
    names = [*stage.key_columns, "value", "event_ms", "retraction", *passthrough]
    columns = [*up_keys, *PANE_FIELDS, *passthrough]

    def mapped(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        for batch in batches:
            data = {c: batch.column(c).to_pylist() for c in columns}
            rows = []
            for i in range(batch.num_rows):
                pane = pane_from_row(tuple(data[c][i] for c in up_keys), {f: data[f][i] for f in PANE_FIELDS})
                extra = [data[c][i] for c in passthrough]
                for key, value in mapper(pane):
                    key_cols = list(key) if len(stage.key_columns) > 1 else [key]
                    rows.append(dict(zip(names, [*key_cols, value, pane.timestamp, pane.retraction, *extra])))
            yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema)

    return panes.select(*columns).mapInArrow(mapped, schema)


def pane_from_row(key: tuple, f: dict) -> Pane:
    """The model's Pane of a row's `PANE_FIELDS` (key: the key columns' values)."""
    window = GLOBAL_WINDOW if f["window_start"] is None else IntervalWindow(f["window_start"], f["window_end"])
    return Pane(
        key=key[0] if len(key) == 1 else key,
        window=window,
        value=f["value"],
        timestamp=END_OF_TIME - 1 if f["ts"] is None else f["ts"],
        timing=PaneTiming(f["timing"]),
        index=f["pane_index"],
        on_time_index=f["on_time_index"],
        first=f["pane_index"] == 0,
        last=False,
        emitted_at=f["emitted_at"],
        retraction=bool(f["is_retraction"]),
    )


def results_as_panes(results: "DataFrame", stage: StageSpec) -> "DataFrame":
    """A results table's rows in the pane shape `elements_from_panes` reads."""
    from pyspark.sql import functions as F

    return results.select(
        *stage.key_columns,
        F.unix_millis("window_start").alias("window_start"),
        F.unix_millis("window_end").alias("window_end"),
        "value",
        F.unix_millis("timestamp").alias("ts"),
        "timing",
        "pane_index",
        "on_time_index",
        F.lit(False).alias("is_retraction"),
        F.unix_millis("updated_at").alias("emitted_at"),
    )
