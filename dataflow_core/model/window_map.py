"""A key's windows, indexed by end and by timer.

A key keeps every window open until its end plus the allowed lateness (an arrival-order
replay of hourly windows with a day's lateness holds ~25 per key), yet each visit of the
key touches one or two of them. `WindowMap` is the key's `dict` of windows that also
answers "the next window end after this watermark", "the earliest processing-time /
event-time timer" and "the windows whose processing timer is due" without looking at
every window, so a visit costs what it touches.

The index cannot go stale: window ends follow the dict's own mutators (whoever adds or
removes a window), and timers are pushed by `note_timers` whenever a window's cached
timers change (and on insertion). Timer heaps are cleaned lazily: an entry counts only
while the window it names is present and still has that timer. The earliest live entry
is remembered until the map or a timer changes (a runner asks several times per visit);
`version` counts changes of the ends and event-time timers (not of processing-time timers,
which change on most visits), so that an owner may remember answers derived from them.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from typing import Any, Iterable, Self

from dataflow_core.model.time import END_OF_TIME, Duration, Instant
from dataflow_core.model.window_state import WindowState
from dataflow_core.model.windows import Window

_MISSING: Any = object()
_UNKNOWN: Any = object()

# heap entries: (time, tie-breaker, window); windows of different kinds need not compare
_Entry = tuple[Instant, int, Window]


class WindowMap(dict):  # dict[Window, WindowState]
    """`dict[Window, WindowState]` plus a sorted multiset of window ends and lazily cleaned
    heaps of the windows' processing-time and event-time timers."""

    def __init__(self, items: Iterable[tuple[Window, WindowState]] = ()):
        super().__init__()
        self.ends: list[Instant] = []  # every window's end, sorted (with repeats)
        self._processing: list[_Entry] = []
        self._event: list[_Entry] = []
        self._tie = itertools.count()
        self._next_processing: Instant | None = _UNKNOWN  # remembered earliest live timers
        self._next_event: Instant | None = _UNKNOWN
        self.version = 0  # grows whenever the ends or event-time timers may have changed
        for w, ws in items:
            self[w] = ws

    # --- membership: every mutator keeps `ends` -------------------------------------

    def __setitem__(self, w: Window, ws: WindowState) -> None:
        if w not in self:
            bisect.insort(self.ends, w.end)
        dict.__setitem__(self, w, ws)
        self.note_timers(ws)  # and forgets the remembered timers: `ws` may replace a window

    def __delitem__(self, w: Window) -> None:
        dict.__delitem__(self, w)
        self._forget_end(w.end)

    def pop(self, w: Window, default: Any = _MISSING) -> Any:
        if w in self:
            ws = dict.pop(self, w)
            self._forget_end(w.end)
            return ws
        if default is _MISSING:
            raise KeyError(w)
        return default

    def popitem(self) -> tuple[Window, WindowState]:
        w, ws = dict.popitem(self)
        self._forget_end(w.end)
        return w, ws

    def setdefault(self, w: Window, default: Any = None) -> Any:
        if w not in self:
            self[w] = default
        return dict.__getitem__(self, w)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for w, ws in dict(*args, **kwargs).items():
            self[w] = ws

    def __ior__(self, other: Any) -> Self:  # type: ignore[misc]  # in place, as dict's; `|` stays dict's
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self.ends.clear()
        self._processing.clear()
        self._event.clear()
        self._changed()

    def copy(self) -> "WindowMap":
        return WindowMap(self.items())

    def __reduce__(self) -> tuple:
        """Pickled and copied as its items: the index is rebuilt, never half-restored."""
        return WindowMap, (list(self.items()),)

    def _forget_end(self, end: Instant) -> None:
        """A window left: its end leaves `ends`, and its timers no longer count."""
        del self.ends[bisect.bisect_left(self.ends, end)]
        self._changed()

    # --- ends -------------------------------------------------------------------------

    def least_end(self) -> Instant | None:
        return self.ends[0] if self.ends else None

    def next_end_after(self, t: Instant) -> Instant | None:
        """The least window end strictly after `t` (None when no window ends after it)."""
        i = bisect.bisect_right(self.ends, t)
        return self.ends[i] if i < len(self.ends) else None

    # --- timers -----------------------------------------------------------------------

    def note_timers(self, ws: WindowState, event_changed: bool = True) -> None:
        """Index the window's cached timers (called whenever they change); `event_changed`
        False says its event-time timer is the one already indexed (only the processing-time
        timer changed), which leaves `version` alone."""
        self._next_processing = _UNKNOWN
        if ws.processing_timer is not None:
            heapq.heappush(self._processing, (ws.processing_timer, next(self._tie), ws.window))
        if event_changed:
            self._changed()
            if ws.event_timer is not None:
                heapq.heappush(self._event, (ws.event_timer, next(self._tie), ws.window))

    def next_processing_timer(self) -> Instant | None:
        if self._next_processing is _UNKNOWN:
            self._next_processing = self._least(self._processing, "processing_timer")
        return self._next_processing

    def next_event_timer(self) -> Instant | None:
        if self._next_event is _UNKNOWN:
            self._next_event = self._least(self._event, "event_timer")
        return self._next_event

    def due_processing_timers(self, now: Instant) -> list[Window]:
        """The windows whose processing timer is at or before `now` (each once), taken off
        the index: the caller delivers them, and whatever timers they set next are indexed
        anew by `note_timers`, which the caller must call for each of them."""
        self._next_processing = _UNKNOWN  # event-time timers and ends stay as they are
        heap = self._processing
        due: dict[Window, None] = {}
        while heap and heap[0][0] <= now:
            t, _, w = heapq.heappop(heap)
            ws = dict.get(self, w)
            if ws is not None and ws.processing_timer == t:
                due[w] = None
        return list(due)

    def due_at_watermark(self, old: Instant, new: Instant, allowed_lateness: Duration) -> list[Window]:
        """The windows that have something to do when the watermark moves from `old` to
        `new`: an end to pass, an event-time timer due, or a garbage collection."""
        if new >= END_OF_TIME:
            return list(self)
        gc_below = new - allowed_lateness  # `WindowingStrategy.gc_time(w) <= new`: w.end <= gc_below
        return [
            w for w, ws in self.items()
            if (w.end <= new and (old < w.end or w.end <= gc_below))
            or (ws.event_timer is not None and ws.event_timer <= new)
        ]

    def _changed(self) -> None:
        self._next_processing = self._next_event = _UNKNOWN
        self.version += 1

    def _least(self, heap: list[_Entry], attr: str) -> Instant | None:
        while heap:
            t, _, w = heap[0]
            ws = dict.get(self, w)
            if ws is not None and getattr(ws, attr) == t:
                return t
            heapq.heappop(heap)
        return None
