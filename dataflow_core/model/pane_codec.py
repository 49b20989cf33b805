"""One way between a model `Pane` and a flat row (what tables, Arrow batches and JSON hold).

Every path that stores or ships panes (Spark stages, the pane log, upstream stages' input,
corrections, live state, scenario replays) uses these two functions, so a pane read back is
the pane that was written, metadata included. Times are epoch milliseconds; `ts` is None
for the end of time (the global window's timestamp) and the window bounds are None for the
global window.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping

from dataflow_core.model.panes import Pane, PaneInfo, PaneTiming
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.windows import GLOBAL_WINDOW, GlobalWindow, IntervalWindow, Window

PANE_FIELDS = (
    "window_start", "window_end", "value", "ts", "timing", "pane_index", "on_time_index",
    "is_first", "is_last", "is_retraction", "emitted_at",
)
"""A pane's row, after its key."""

REPLACES = "replaces"
"""A pane row's optional field: the bounds (`window_start`, `window_end`) of the windows the
pane's window absorbed (`Pane.replaces`), absent or null when none."""

EMISSION_ORDER = ("emitted_at", "pane_index", "is_retraction")
"""The fields that order a window's pane rows as they were emitted (`panes.emission_order`):
by emission time, then index, a pane before its own retraction."""

Codec = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def window_bounds(window: Window) -> tuple[int | None, int | None]:
    return (None, None) if isinstance(window, GlobalWindow) else (window.start, window.end)


def window_of(start: int | None, end: int | None) -> Window:
    return GLOBAL_WINDOW if start is None else IntervalWindow(start, end)  # type: ignore[arg-type]


def standing_flags(pane_index: Any) -> tuple[Any, bool]:
    """`is_first` and `is_last` of a window's standing pane known from a row that does not
    store them (a results row): first when its index is 0, not last. On ints and Spark
    columns alike."""
    return pane_index == 0, False


def pane_to_row(pane: Pane, encode_value: Codec = _same) -> dict[str, Any]:
    start, end = window_bounds(pane.window)
    row = {
        "window_start": start,
        "window_end": end,
        "value": encode_value(pane.value),
        "ts": None if pane.timestamp >= END_OF_TIME - 1 else pane.timestamp,
    }
    row.update(_metadata(pane.timing, pane.index, pane.on_time_index, pane.first, pane.last, pane.retraction,
                         pane.emitted_at))
    if pane.replaces:
        row[REPLACES] = [dict(zip(("window_start", "window_end"), window_bounds(w))) for w in pane.replaces]
    return row


def pane_metadata_row(info: PaneInfo, emitted_at: Instant) -> dict[str, Any]:
    """The fields of a pane's row that `info` and its emission time decide (all but its
    window, value and timestamp): what a runner copies onto many windows' rows at once."""
    return _metadata(info.timing, info.index, info.on_time_index, info.first, info.last, False, emitted_at)


def _metadata(
    timing: PaneTiming, index: int, on_time_index: int | None, first: bool, last: bool, retraction: bool,
    emitted_at: Instant,
) -> dict[str, Any]:
    return {
        "timing": timing.value,
        "pane_index": index,
        "on_time_index": on_time_index,
        "is_first": first,
        "is_last": last,
        "is_retraction": retraction,
        "emitted_at": emitted_at,
    }


def pane_from_row(key: Hashable, row: Mapping[str, Any], decode_value: Codec = _same) -> Pane:
    """The pane of a row with `PANE_FIELDS` (a row without `is_first`/`is_last`, such as a
    results row, is its window's standing pane: first when its index is 0, not last)."""
    first, last = row.get("is_first"), row.get("is_last")
    if first is None:
        first, last = standing_flags(row["pane_index"])
    return Pane(
        key=key,
        window=window_of(row["window_start"], row["window_end"]),
        value=decode_value(row["value"]),
        timestamp=END_OF_TIME - 1 if row["ts"] is None else int(row["ts"]),
        timing=PaneTiming(row["timing"]),
        index=int(row["pane_index"]),
        on_time_index=None if row["on_time_index"] is None else int(row["on_time_index"]),
        first=bool(first),
        last=bool(last or False),
        emitted_at=int(row["emitted_at"]),
        retraction=bool(row.get("is_retraction") or False),
        replaces=tuple(window_of(w["window_start"], w["window_end"]) for w in row.get(REPLACES) or ()),
    )
