"""A key's window set as versioned JSON data: what live state stores between micro-batches.

The state is data, not pickled objects: reading it runs no code, and it survives renamed
classes. Windows, trigger state trees, pane histories and standing panes are written as
explicit fields; accumulators as their combiner declares (`CombineFn.encode_accumulator`);
pane values as JSON values. Cached timers are not stored (they are derived). A version
this build does not know is refused, never guessed at.

Version 2 leaves out what equals its default: a window's fields at `WindowState`'s defaults,
and a trigger node with no data, no timer and not finished is the array of its children
(most nodes are such). A warm micro-batch decodes and encodes every woken key's state, so
its size is per-key work, shuffled and MERGEd too; version 1 (every field written) is still
read.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Protocol, TypeVar

from dataflow_core.model.pane_codec import pane_from_row, pane_to_row, window_bounds, window_of
from dataflow_core.model.panes import OnTime
from dataflow_core.model.trigger_machine import TriggerState
from dataflow_core.model.window_state import WindowState


class KeyState(Protocol):
    """What is stored of a key (`group_by_window.KeyedWindowSet`), and how its windows are
    put back."""

    key: Any
    strategy: Any
    windows: dict
    dropped_pairs: int
    dropped_elements: int

    def restore_window(self, ws: WindowState) -> None: ...


K = TypeVar("K", bound=KeyState)
"""A key's window set of any runner: decoding fills the one it is given."""

STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Versions `decode_key_state` reads: what this build writes, and the earlier ones."""
_DECIMAL = "$decimal"  # JSON has no exact decimals: {"$decimal": "12.50"} stands for Decimal("12.50")


class UnknownStateVersion(ValueError):
    """Stored state written by a build whose format this one does not read."""


def state_text(state: dict | None) -> str | None:
    """The state as JSON text (exact decimals kept as tagged strings)."""
    return None if state is None else json.dumps(state, separators=(",", ":"), default=_encode_value)


def state_from_text(text: str | None) -> dict | None:
    return json.loads(text, object_hook=_decode_object) if text else None


def _encode_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return {_DECIMAL: str(value)}
    raise TypeError(f"a {type(value).__name__} in live state is not a JSON value (declare "
                    "CombineFn.encode_accumulator for the combiner that holds it)")


def _decode_object(obj: dict) -> Any:
    return Decimal(obj[_DECIMAL]) if len(obj) == 1 and _DECIMAL in obj else obj


def encode_key_state(ks: "KeyState") -> dict | None:
    if not ks.windows:
        return None
    combiner = ks.strategy.combiner
    return {
        "version": STATE_VERSION,
        "dropped": ks.dropped_pairs,  # the stored key of version 1: element-window pairs
        "dropped_elements": ks.dropped_elements,
        "windows": [_window(ws, combiner) for _, ws in sorted(ks.windows.items(), key=lambda i: (i[0].end, i[0].start))],
    }


_WINDOW_DEFAULTS: dict[str, Any] = {"pending": 0, "ts_min": None, "ts_max": None, "next_index": 0, "next_on_time_index": 0,
                    "standing": None, "absorbed": [], "ended": False, "merged_away": []}
"""A version 2 window's fields that are left out at these values (`WindowState`'s defaults)."""


def decode_key_state(ks: "K", data: dict | None) -> "K":
    if data is None:
        return ks
    version = data.get("version") if isinstance(data, dict) else None
    if version not in READABLE_VERSIONS:
        raise UnknownStateVersion(
            f"live state of key {ks.key!r} has format version {version!r}; this build reads version "
            f"{' or '.join(map(str, READABLE_VERSIONS))} only (state written by another version of dataflow_core: "
            "run that version, or reset the pipeline's live state)"
        )
    combiner = ks.strategy.combiner
    ks.dropped_pairs = int(data["dropped"])
    ks.dropped_elements = int(data["dropped_elements"])
    for stored in data["windows"]:
        w = stored if version == 1 else {**_WINDOW_DEFAULTS, **stored}
        window = window_of(w["start"], w["end"])
        ws = WindowState(
            window=window,
            trigger=_trigger_from(w["trigger"]),
            acc=combiner.decode_accumulator(w["acc"]),
            on_time=OnTime(w["on_time"]),
            pending=w["pending"],
            ts_min=w["ts_min"],
            ts_max=w["ts_max"],
            next_index=w["next_index"],
            next_on_time_index=w["next_on_time_index"],
            standing=None if w["standing"] is None else pane_from_row(ks.key, w["standing"]),
            absorbed=[pane_from_row(ks.key, p) for p in w["absorbed"]],
            ended=w["ended"],
            merged_away=[window_of(*bounds) for bounds in w.get("merged_away", ())],
        )
        ks.restore_window(ws)
    return ks


def _window(ws: "WindowState", combiner: Any) -> dict:
    start, end = window_bounds(ws.window)
    out = {"start": start, "end": end, "trigger": _trigger(ws.trigger), "acc": combiner.encode_accumulator(ws.acc),
           "on_time": ws.on_time.value}
    fields = {"pending": ws.pending, "ts_min": ws.ts_min, "ts_max": ws.ts_max, "next_index": ws.next_index,
              "next_on_time_index": ws.next_on_time_index,
              "standing": None if ws.standing is None else pane_to_row(ws.standing),
              "absorbed": [pane_to_row(p) for p in ws.absorbed], "ended": ws.ended,
              "merged_away": [list(window_bounds(w)) for w in ws.merged_away]}
    out.update((k, v) for k, v in fields.items() if v != _WINDOW_DEFAULTS[k] or type(v) is not type(_WINDOW_DEFAULTS[k]))
    return out


def _trigger(t: TriggerState) -> dict | list:
    """A trigger node (version 2): the array of its children's nodes when it has no data, no
    timer and is not finished; else an object of its fields that are not at their default."""
    children = [_trigger(c) for c in t.children]
    if not (t.finished or t.data or t.processing_timer is not None or t.event_timer is not None):
        return children
    node: dict = {"finished": t.finished} if t.finished else {}
    if t.data:
        node["data"] = t.data
    if t.processing_timer is not None:
        node["processing_timer"] = t.processing_timer
    if t.event_timer is not None:
        node["event_timer"] = t.event_timer
    if children:
        node["children"] = children
    return node


def _trigger_from(d: dict | list) -> TriggerState:
    """A trigger node of either version (version 1 writes every node as a full object)."""
    if isinstance(d, list):
        return TriggerState(children=[_trigger_from(c) for c in d])
    return TriggerState(
        finished=d.get("finished", False),
        data=dict(d.get("data", {})),
        processing_timer=d.get("processing_timer"),
        event_timer=d.get("event_timer"),
        children=[_trigger_from(c) for c in d.get("children", ())],
    )
