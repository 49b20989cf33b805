"""One stage on Spark: arrivals grouped by key, each key's history run in an executor by
`runners.keyed.run_key` on Arrow batches, against a schedule computed once on the driver.

The input DataFrame has the stage's key columns and `value`, `event_ms`, `retraction`,
`seq` (array<bigint>, the step the element arrives at) and `at_ms` (that step's processing
time), and may have `counted` (`COUNTED`). The output has one row per pane (`kind = 'pane'`, the pane codec's fields), per hold
span (`'hold'`) and per key (`'stats'`: its elements, and the elements and element-window pairs it dropped, and
of its elements and dropped elements those that are retractions), so a single pass
gives the panes, the downstream watermark's inputs and the ledger; a resumable stage also
gives each key's new state (`'state'`).

Where the strategy allows it, Spark SQL first reduces the arrivals to one row per key,
window and step (combiner lifting, `execute.lifting`), and executors feed the model those
pre-combined bundles: the same panes, counts and state, for far fewer Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence

from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.pane_codec import pane_to_row, window_bounds
from dataflow_core.model.state_codec import STATE_VERSION, state_from_text, state_text
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.runners.keyed import Arrival, run_key
from dataflow_core.runners.schedule import HoldSpan, Schedule
from dataflow_core.spark.execute.by_key import map_keys
from dataflow_core.spark.execute.lifting import can_lift, combined_by_seq, is_lifted, lift_arrivals

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

ARRIVAL_COLUMNS = ("value", "event_ms", "retraction", "seq", "at_ms")
COUNTED = "counted"
"""An optional arrival column, array<struct<start: bigint, end: bigint>>: the spans of window
starts whose windows already hold the element (`Element.counted`; `sinks.seen_ids`)."""

OUTPUT_FIELDS = (
    "kind string, ordinal int, sub array<bigint>, window_start bigint, window_end bigint, "
    "value {value_type}, ts bigint, timing string, pane_index int, on_time_index int, "
    "is_first boolean, is_last boolean, is_retraction boolean, emitted_at bigint, "
    "replaces array<struct<window_start: bigint, window_end: bigint>>, "
    "hold bigint, hold_end array<bigint>, hold_time bigint, hold_end_time bigint, "
    "elements bigint, dropped_elements bigint, dropped_pairs bigint, retractions bigint, dropped_retractions bigint, "
    "state string, state_version int, wake_timer bigint, wake_watermark bigint, windows array<struct<"
    "window_start: bigint, window_end: bigint, pending: int, next_index: int, "
    "next_timer: bigint, closed: boolean>>"
)
STATE_COLUMNS = ("state",)
"""A resumable stage's state rows: the key columns and `state` (the key's
`KeyedWindowSet.to_state` as JSON text)."""


@dataclass(frozen=True)
class KeyCodec:
    """How a stage's key columns become the model's key (a value, or a tuple of values)
    and how pane values are written back; the identity for typed pipeline columns."""

    columns: tuple[str, ...]
    decode_value: Callable[[Any], Any] | None = None
    encode_value: Callable[[Any], Any] | None = None

    def key(self, row_key: Sequence[Any]) -> Hashable:
        return row_key[0] if len(self.columns) == 1 else tuple(row_key)


def output_schema(key_types: str, value_type: str) -> str:
    """The Spark schema of a stage's output rows, after the key columns' fields."""
    return f"{key_types}, {OUTPUT_FIELDS.format(value_type=value_type)}"


def key_fields(df: "DataFrame", columns: Sequence[str]) -> str:
    return ", ".join(f"`{c}` {df.schema[c].dataType.simpleString()}" for c in columns)


def run_stage(
    arrivals: "DataFrame",
    strategy: WindowingStrategy,
    schedule: Schedule,
    codec: KeyCodec,
    value_type: str,
    states: "DataFrame | None" = None,
    lift: bool | None = None,
    track_holds: bool = True,
) -> "DataFrame":
    """The stage's output rows (see the module docstring); lazily, as a DataFrame.

    With `states` (key columns and `state`), keys resume from their stored state and the
    output also has a `'state'` row per key: its new state (null when it holds no window),
    its next wake-ups and a readable list of its windows (micro-batches).

    `lift` None lifts combiners where `execute.lifting.can_lift` allows (False never, True
    insists); `track_holds=False` leaves out the hold rows (no stage is downstream)."""
    schema = output_schema(key_fields(arrivals, codec.columns), value_type)
    possible = can_lift(arrivals, strategy, decodes=codec.decode_value is not None)
    if lift and not possible:
        raise ValueError(f"stage cannot be lifted: {strategy.combiner.name} over {strategy.window_fn.describe()}, "
                         f"trigger {strategy.trigger.describe()}, value {arrivals.schema['value'].dataType.simpleString()}")
    if possible and lift is not False:
        arrivals = lift_arrivals(arrivals, strategy, codec.columns)
    resumable = states is not None

    def one_key(row_key: list, table: "pa.Table", stored: "pa.Table | None") -> list[dict]:
        text = stored.column("state")[0].as_py() if stored is not None and stored.num_rows else None
        return _run_one_key(row_key, table, strategy, schedule, codec, text, resumable=resumable,
                            track_holds=track_holds)

    side = None if states is None else states.select(*codec.columns, *STATE_COLUMNS)
    return map_keys(arrivals, codec.columns, one_key, schema, side=side)


def load_state(key: Hashable, strategy: WindowingStrategy, text: str | None) -> KeyedWindowSet:
    """A key's window set from its stored state (JSON text; None: a new key)."""
    return KeyedWindowSet.from_state(key, strategy, state_from_text(text))


def _run_one_key(
    row_key: list,
    table: Any,
    strategy: WindowingStrategy,
    schedule: Schedule,
    codec: KeyCodec,
    state_text: str | None = None,
    resumable: bool = False,
    track_holds: bool = True,
) -> list[dict]:
    key = codec.key(row_key)
    if table.num_rows and is_lifted(table):
        arrivals = [Arrival(seq, at, (), tuple(parts)) for seq, (at, parts) in sorted(combined_by_seq(table, strategy).items())]
    else:
        arrivals = _element_arrivals(table, codec)
    state = load_state(key, strategy, state_text) if resumable else None
    result = run_key(key, strategy, schedule, arrivals, state=state, track_holds=track_holds)
    return _rows(row_key, result, schedule, codec, resumable)


def _element_arrivals(table: Any, codec: KeyCodec) -> list[Arrival]:
    """A key's element rows (an Arrow table) as its bundles, in step order."""
    cols = {name: table.column(name).to_pylist() for name in ARRIVAL_COLUMNS} if table.num_rows else None
    decode = codec.decode_value or (lambda v: v)
    by_seq: dict[tuple, tuple[int, list[Element]]] = {}
    if cols is not None:
        counted = (table.column(COUNTED).to_pylist() if COUNTED in table.column_names
                   else [None] * table.num_rows)
        for value, ts, retraction, seq, at, spans in zip(*(cols[c] for c in ARRIVAL_COLUMNS), counted):
            slot = by_seq.setdefault(tuple(seq), (at, []))
            slot[1].append(Element(decode(value), ts, bool(retraction),
                                   tuple((s["start"], s["end"]) for s in spans) if spans else ()))
    return [
        Arrival(seq, at, tuple(sorted(els, key=lambda e: (e.timestamp, e.retraction))))
        for seq, (at, els) in sorted(by_seq.items())
    ]


HOLD_FIELDS = ("sub", "hold", "hold_end", "hold_time", "hold_end_time")
"""The columns of a `'hold'` output row (`_rows` writes them, `hold_span` reads them back)."""


def hold_span(row: Any) -> HoldSpan:
    """The HoldSpan of a `'hold'` output row (a Row or a struct with HOLD_FIELDS)."""
    end = row["hold_end"]
    return HoldSpan(tuple(row["sub"]), row["hold_time"], None if end is None else tuple(end),
                    row["hold_end_time"], row["hold"])


def _rows(row_key: list, result: Any, schedule: Schedule, codec: KeyCodec, resumable: bool) -> list[dict]:
    keyed = dict(zip(codec.columns, row_key))
    rows: list[dict] = []
    for ordinal, (sub, pane) in enumerate(result.panes):
        rows.append({**keyed, "kind": "pane", "ordinal": ordinal, "sub": list(sub),
                     **pane_to_row(pane, codec.encode_value or (lambda v: v))})
    for span in result.holds:
        rows.append({**keyed, "kind": "hold", "sub": list(span.start), "hold": span.hold,
                     "hold_end": None if span.end is None else list(span.end),
                     "hold_time": span.start_time, "hold_end_time": span.end_time})
    rows.append({**keyed, "kind": "stats", "elements": result.elements,
                 "dropped_elements": result.dropped_elements, "dropped_pairs": result.dropped_pairs,
                 "retractions": result.retractions, "dropped_retractions": result.dropped_retractions})
    if resumable:
        wm = schedule.steps[-1].watermark if schedule.steps else schedule.start
        rows.append(state_row(keyed, result.state, wm))  # type: ignore[arg-type]
    return rows


def state_row(keyed: dict, ks: KeyedWindowSet, watermark: int) -> dict:
    """A key's `'state'` output row: its state, next wake-ups, hold and readable windows."""
    return {
        **keyed, "kind": "state", "state": state_text(ks.to_state()),
        "state_version": STATE_VERSION, "hold": ks.output_hold(watermark),
        "wake_timer": ks.next_processing_timer(), "wake_watermark": ks.next_watermark_deadline(watermark),
        "windows": [
            {"window_start": window_bounds(w)[0], "window_end": window_bounds(w)[1],
             "pending": ws.pending, "next_index": ws.next_index,
             "next_timer": ws.processing_timer, "closed": ws.closed}
            for w, ws in sorted(ks.windows.items(), key=lambda item: (item[0].end, item[0].start))
        ],
    }
