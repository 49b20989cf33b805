"""What comes out: a pane is one firing of one key's window (the paper's PaneInfo).

`describe_next_pane` is the one rule for a pane's metadata (timing, index, on-time index,
first, last). The model's `_emit` and a backfill's corrections both ask it, so a window's
history stays one history whoever adds to it (after Beam's `PaneInfoTracker.describePane`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Hashable

from dataflow_core.model.time import Instant
from dataflow_core.model.windows import Window


_new = object.__new__


def _frozen(cls: type, **fields: Any) -> Any:
    """An instance of frozen dataclass `cls` from all of its fields, set directly: its
    `__init__` sets each through `object.__setattr__`, several times slower, and a replay
    describes every pane. The same object in every respect (fields, equality, hash)."""
    obj: Any = _new(cls)
    obj.__dict__.update(fields)
    return obj


class PaneTiming(enum.Enum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


class OnTime(enum.Enum):
    """Where a window stands with respect to its on-time pane (rule 8 of FORMAT.md)."""

    BEFORE = "before"  # the watermark has not passed the window's end
    OWED = "owed"  # it passed, no pane fired then, and data was waiting: next pane is ON_TIME
    DONE = "done"  # no ON_TIME pane is (any longer) due


@dataclass(frozen=True)
class Pane:
    key: Hashable
    window: Window
    value: Any
    timestamp: Instant
    timing: PaneTiming
    index: int
    on_time_index: int | None
    first: bool
    last: bool
    emitted_at: Instant
    retraction: bool = False
    replaces: tuple[Window, ...] = field(default=(), compare=False)
    """The windows merged into this pane's window since it last emitted, each of which had
    emitted panes of its own (merging windows only): they no longer exist, so the current
    results drop them, in every accumulation mode (retracting mode also retracts their panes).
    A declaration about other windows, not part of what the pane says: left out of equality."""

    @classmethod
    def build(
        cls, key: Hashable, window: Window, value: Any, timestamp: Instant, timing: PaneTiming, index: int,
        on_time_index: int | None, first: bool, last: bool, emitted_at: Instant, replaces: tuple[Window, ...] = (),
    ) -> "Pane":
        """`Pane(...)` with its fields filled directly: a frozen dataclass's `__init__` sets
        each field through `object.__setattr__`, five times slower, and a replay makes a
        pane per firing. The same object in every respect (fields, equality, hash, pickle)."""
        return _frozen(
            cls, key=key, window=window, value=value, timestamp=timestamp, timing=timing, index=index,
            on_time_index=on_time_index, first=first, last=last, emitted_at=emitted_at, retraction=False,
            replaces=replaces,
        )

    def retracted_at(self, emitted_at: Instant) -> "Pane":
        """The retraction of this pane: the same pane, marked, at a later moment."""
        return replace(self, retraction=True, emitted_at=emitted_at)


@dataclass(frozen=True)
class PaneHistory:
    """What a window has said so far, as far as the next pane's metadata depends on it."""

    next_index: int = 0
    next_on_time_index: int = 0
    on_time: OnTime = OnTime.BEFORE
    ended: bool = False  # a pane marked last was emitted

    @staticmethod
    def after(standing: "Pane | None", window_end: Instant, watermark: Instant) -> "PaneHistory":
        """The history that follows a window's standing pane, known only from that pane
        (a results row): its on-time pane is done once a pane carried an on-time index."""
        if standing is None:
            return PaneHistory(on_time=OnTime.BEFORE if watermark < window_end else OnTime.OWED)
        if standing.on_time_index is not None:
            on_time = OnTime.DONE
        else:
            on_time = OnTime.BEFORE if watermark < window_end else OnTime.OWED
        return PaneHistory(
            next_index=standing.index + 1,
            next_on_time_index=0 if standing.on_time_index is None else standing.on_time_index + 1,
            on_time=on_time,
        )


@dataclass(frozen=True)
class PaneInfo:
    timing: PaneTiming
    index: int
    on_time_index: int | None
    first: bool
    last: bool


class PaneOrderError(ValueError):
    """A pane that would break a window's history (after its last pane)."""


def describe_next_pane(history: PaneHistory, window_end: Instant, watermark: Instant, last: bool) -> PaneInfo:
    """The metadata of the next pane of a window: EARLY before the watermark passes its end,
    ON_TIME once when the on-time pane is owed, LATE after; indexes count on. A window whose
    on-time pane is out never goes back to EARLY: the model only gets there once the
    watermark passed the end, but a history taken over from a batch backfill (whose
    watermark was perfect) can run ahead of a live watermark."""
    if history.ended:
        raise PaneOrderError(f"a pane after the window's last pane (index {history.next_index - 1})")
    if watermark < window_end and history.on_time is not OnTime.DONE:
        timing = PaneTiming.EARLY
    elif history.on_time is OnTime.OWED:
        timing = PaneTiming.ON_TIME
    else:
        timing = PaneTiming.LATE
    return _frozen(
        PaneInfo,
        timing=timing,
        index=history.next_index,
        on_time_index=None if timing is PaneTiming.EARLY else history.next_on_time_index,
        first=history.next_index == 0,
        last=last,
    )


def history_after(history: PaneHistory, info: PaneInfo) -> PaneHistory:
    """The window's history once the pane `info` describes is out."""
    return _frozen(
        PaneHistory,
        next_index=info.index + 1,
        next_on_time_index=history.next_on_time_index + (info.timing is not PaneTiming.EARLY),
        on_time=OnTime.DONE if info.timing is PaneTiming.ON_TIME else history.on_time,
        ended=info.last,
    )


PANE_RULES = (
    "not_after_last", "index_consecutive", "on_time_once", "no_early_after_on_time",
    "on_time_index_ok", "is_first_ok",
)
RETRACTION_RULES = ("retraction_standing",)
HISTORY_RULES = PANE_RULES + RETRACTION_RULES
"""The rules of one window's pane history, by name (`pane_breaks` says which a pane
breaks): a pane is held to `PANE_RULES`, a retraction to `RETRACTION_RULES`."""


def emission_key(pane: Pane) -> tuple[int, int, bool]:
    """Where a pane stands in its window's emission order: by emission time, then index, a
    pane before its own retraction (`pane_codec.EMISSION_ORDER` names the same fields)."""
    return (pane.emitted_at, pane.index, pane.retraction)


def pane_breaks(panes: "list[Pane]") -> "list[list[tuple[str, str]]]":
    """Per pane of one window, in emission order, the `HISTORY_RULES` it breaks as (rule,
    message): one ON_TIME pane at most, no EARLY pane after a non-early one, indexes
    counting from 0, on-time indexes counting from 0 over non-early panes, no pane after a
    last pane, and every retraction repeating the pane standing before it."""
    out: list[list[tuple[str, str]]] = []
    history = PaneHistory(on_time=OnTime.OWED)
    standing: Pane | None = None
    for p in panes:
        broken: list[tuple[str, str]] = []
        out.append(broken)
        if p.retraction:
            if standing is None or replace(p, retraction=False, emitted_at=standing.emitted_at) != standing:
                broken.append(("retraction_standing", f"retraction of index {p.index} does not repeat the standing pane"))
            standing = None
            continue
        broken += _pane_breaks(p, history)
        history = history_after(history, PaneInfo(p.timing, p.index, p.on_time_index, p.first, p.last))
        standing = p
    return out


def _pane_breaks(p: Pane, history: PaneHistory) -> list[tuple[str, str]]:
    broken: list[tuple[str, str]] = []
    if history.ended:
        broken.append(("not_after_last", f"pane {p.index} after the last pane"))
    if p.index != history.next_index:
        broken.append(("index_consecutive", f"pane index {p.index} where {history.next_index} was next"))
    if p.timing is PaneTiming.ON_TIME and history.on_time is OnTime.DONE:
        broken.append(("on_time_once", f"a second ON_TIME pane (index {p.index})"))
    if p.timing is PaneTiming.EARLY and history.next_on_time_index > 0:
        broken.append(("no_early_after_on_time", f"an EARLY pane (index {p.index}) after the on-time pane"))
    expected_on_time = None if p.timing is PaneTiming.EARLY else history.next_on_time_index
    if p.on_time_index != expected_on_time:
        broken.append(("on_time_index_ok", f"pane {p.index} has on-time index {p.on_time_index}, expected {expected_on_time}"))
    if p.first != (p.index == 0):
        broken.append(("is_first_ok", f"pane {p.index} is_first={p.first}"))
    return broken


def history_breaks(panes: "list[Pane]") -> list[str]:
    """What in one window's panes, in emission order, breaks the rules of a pane history
    (`pane_breaks`, as messages); the pane gate flags the same panes over the pane log."""
    return [message for broken in pane_breaks(panes) for _, message in broken]
