"""One stage on Spark: arrivals grouped by key, each key's history run in an executor by
`runners.keyed.run_key` on Arrow batches, against a schedule computed once on the driver.

The input DataFrame has the stage's key columns and `value`, `event_ms`, `retraction`,
`seq` (array<bigint>, the step the element arrives at) and `at_ms` (that step's processing
time). The output has one row per pane (`kind = 'pane'`), per hold span (`'hold'`) and per
key (`'stats'`: elements and dropped counts), so a single pass gives the panes, the
downstream watermark's inputs and the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence

from dataflow_core.model.group_by_window import Element
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.windows import GlobalWindow
from dataflow_core.runners.keyed import Arrival, Schedule, run_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ARRIVAL_COLUMNS = ("value", "event_ms", "retraction", "seq", "at_ms")

OUTPUT_FIELDS = (
    "kind string, ordinal int, sub array<bigint>, window_start bigint, window_end bigint, "
    "value {value_type}, ts bigint, timing string, pane_index int, on_time_index int, "
    "is_first boolean, is_last boolean, is_retraction boolean, emitted_at bigint, "
    "hold bigint, hold_end array<bigint>, hold_time bigint, hold_end_time bigint, "
    "elements bigint, dropped bigint, dropped_windows bigint"
)


@dataclass(frozen=True)
class KeyCodec:
    """How a stage's key columns become the model's key (a value, or a tuple of values)
    and how pane values are written back; the identity for typed pipeline columns."""

    columns: tuple[str, ...]
    decode_value: Callable[[Any], Any] | None = None
    encode_value: Callable[[Any], Any] | None = None

    def key(self, row_key: Sequence[Any]) -> Hashable:
        return row_key[0] if len(self.columns) == 1 else tuple(row_key)

    def columns_of(self, key: Hashable) -> tuple:
        return (key,) if len(self.columns) == 1 else tuple(key)  # type: ignore[arg-type]


def run_stage(
    arrivals: "DataFrame",
    strategy: WindowingStrategy,
    schedule: Schedule,
    codec: KeyCodec,
    value_type: str,
) -> "DataFrame":
    """The stage's output rows (see the module docstring); lazily, as a DataFrame."""
    import pyarrow as pa

    key_fields = ", ".join(f"`{c}` {arrivals.schema[c].dataType.simpleString()}" for c in codec.columns)
    schema = f"{key_fields}, {OUTPUT_FIELDS.format(value_type=value_type)}"
    names = list(codec.columns) + [f.split()[0] for f in OUTPUT_FIELDS.split(", ")]

    def per_key(key_scalars: tuple, table: "pa.Table") -> "pa.Table":
        row_key = [k.as_py() for k in key_scalars]
        key = codec.key(row_key)
        rows = _run_one_key(key, row_key, table, strategy, schedule, codec)
        return pa.Table.from_pylist([dict(zip(names, r)) for r in rows], schema=arrow_schema)

    # The Arrow schema of the output, resolved once on the driver and shipped to executors.
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    arrow_schema = to_arrow_schema(_parse_datatype_string(schema))
    return arrivals.groupBy(*codec.columns).applyInArrow(per_key, schema)


def _run_one_key(
    key: Hashable,
    row_key: list,
    table: Any,
    strategy: WindowingStrategy,
    schedule: Schedule,
    codec: KeyCodec,
) -> list[tuple]:
    cols = {name: table.column(name).to_pylist() for name in ARRIVAL_COLUMNS}
    decode = codec.decode_value or (lambda v: v)
    encode = codec.encode_value or (lambda v: v)
    by_seq: dict[tuple, tuple[int, list[Element]]] = {}
    for value, ts, retraction, seq, at in zip(*(cols[c] for c in ARRIVAL_COLUMNS)):
        slot = by_seq.setdefault(tuple(seq), (at, []))
        slot[1].append(Element(decode(value), ts, bool(retraction)))
    arrivals = [
        Arrival(seq, at, tuple(sorted(els, key=lambda e: (e.timestamp, e.retraction))))
        for seq, (at, els) in sorted(by_seq.items())
    ]
    result = run_key(key, strategy, schedule, arrivals)
    key_cols = tuple(row_key)
    rows: list[tuple] = []
    for ordinal, (sub, pane) in enumerate(result.panes):
        rows.append(key_cols + ("pane", ordinal, list(sub)) + _pane_fields(pane, encode) + (None,) * 7)
    for span in result.holds:
        rows.append(
            key_cols + ("hold", None, list(span.start)) + (None,) * 11
            + (span.hold, None if span.end is None else list(span.end), span.start_time, span.end_time, None, None, None)
        )
    rows.append(key_cols + ("stats", None, None) + (None,) * 15 + (result.elements, result.dropped, result.dropped_windows))
    return rows


def _pane_fields(p: Pane, encode: Callable[[Any], Any]) -> tuple:
    glob = isinstance(p.window, GlobalWindow)
    return (
        None if glob else p.window.start,
        None if glob else p.window.end,
        encode(p.value),
        None if p.timestamp >= END_OF_TIME - 1 else p.timestamp,
        p.timing.value,
        p.index,
        p.on_time_index,
        p.first,
        p.last,
        p.retraction,
        p.emitted_at,
    )
