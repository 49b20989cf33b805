"""GroupByKeyAndWindow for one key: assign, merge, accumulate, trigger, emit panes.

This is the whole of the model's processing rules for a key, independent of how input
arrives. A runner owns one `KeyedWindowSet` per key and tells it, in processing-time
order, about bundles of elements, processing-time timers that are due and watermark
moves; every call returns the panes (and retractions) emitted at that moment.

A key's state is versioned JSON data (`to_state`/`from_state`, see `state_codec`), and a
backfill's corrections and take-over (`model.corrections`) change a key's windows only
through `remove_window`, `restore_window` and `publish`, so they obey the same rules.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Sequence, TypeVar

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.elements import Element
from dataflow_core.model.panes import (
    OnTime, Pane, PaneHistory, PaneInfo, PaneTiming, describe_next_pane, history_after,
)
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.state_codec import decode_key_state, encode_key_state
from dataflow_core.model.trigger_machine import (
    TriggerContext, deliver_event_timers, deliver_processing_timers, next_timers,
)
from dataflow_core.model.window_map import WindowMap
from dataflow_core.model.window_state import WindowState
from dataflow_core.model.windows import AssignContext, Window

if TYPE_CHECKING:
    from dataflow_core.model.lifting import Combined

__all__ = ["Element", "KeyedWindowSet", "OnTime", "WindowState", "in_end_order"]


_F = TypeVar("_F", bound=Callable[..., Any])


def _changes_windows(method: _F) -> _F:
    """Marks a method that changes the key's windows: what `output_hold` cached is
    forgotten (a runner asks it several times between two changes). Window ends and timers
    need no such care: `WindowMap` indexes them as they change."""

    @functools.wraps(method)
    def changing(self: "KeyedWindowSet", *args: Any, **kwargs: Any) -> Any:
        if self._cached:
            self._cached = {}
        try:
            return method(self, *args, **kwargs)
        finally:
            if self._cached:  # read while changing: stale now
                self._cached = {}

    return changing  # type: ignore[return-value]


class KeyedWindowSet:
    """All windows of one key under one `WindowingStrategy`.

    Every method that changes `windows` is marked `_changes_windows`; code outside this
    class reads `windows` and changes it only through `remove_window` and `restore_window`."""

    def __init__(self, key: Hashable, strategy: WindowingStrategy):
        self.key = key
        self.strategy = strategy
        self.windows: dict[Window, WindowState] = WindowMap()  # indexed by end and timer
        self.dropped_pairs = 0  # element-window pairs dropped as late or for a closed window (FORMAT's `dropped`)
        self.dropped_elements = 0  # elements none of whose windows took them (a run's ledger)
        # of those, retractions (an input retraction past allowed lateness, or for a closed
        # window: a correction left for a backfill); counted per run, not kept in the state
        self.dropped_retractions = 0
        self._cached: dict[Any, Any] = {}  # reads since the last change (see _changes_windows)
        # (windows' version, watermarks [from, to) it holds for, deadline): see next_watermark_deadline
        self._deadline: tuple[int, Instant, Instant | None, Instant | None] | None = None

    # --- input ------------------------------------------------------------------

    @_changes_windows
    def add_bundle(self, elements: Iterable[Element], at: Instant, watermark: Instant) -> list[Pane]:
        """Elements that arrived together at processing time `at` (rule 3)."""
        s = self.strategy
        touched: set[Window] = set()
        for el in elements:
            taken = False
            for w in s.window_fn.assign(AssignContext(self.key, el.value, el.timestamp)):
                if el.counted and el.counted_in(w):
                    taken = True  # counted there already: neither added again nor dropped
                    continue
                if s.is_late(w, watermark):
                    self.dropped_pairs += 1
                    continue
                ws = self._place(w, at, watermark, touched)
                if ws.closed:
                    self.dropped_pairs += 1
                    continue
                taken = True
                if el.retraction:
                    ws.acc = s.combiner.retract_input(ws.acc, el.value)
                else:
                    ws.acc = s.combiner.add_input(ws.acc, el.value)
                ws.pending += 1
                ws.ts_min = el.timestamp if ws.ts_min is None else min(ws.ts_min, el.timestamp)
                ws.ts_max = el.timestamp if ws.ts_max is None else max(ws.ts_max, el.timestamp)
                s.trigger.on_element(ws.trigger, TriggerContext(ws.window, at, watermark), el.value, el.timestamp)
                touched.add(ws.window)
            self.dropped_elements += not taken
            self.dropped_retractions += el.retraction and not taken
        return self._evaluate(touched, at, watermark)

    @_changes_windows
    def add_combined(self, parts: Iterable["Combined"], at: Instant, watermark: Instant) -> list[Pane]:
        """A bundle pre-combined per window before merging (`model.lifting`): the same panes,
        state and drop counts as `add_bundle` of its elements, for a strategy that `lifts`
        (one window per element, not merging; a summarizable trigger)."""
        s = self.strategy
        combiner, trigger, windows = s.combiner, s.trigger, self.windows
        late_below = watermark - s.allowed_lateness  # `s.is_late(w, watermark)`: gc time at or below it
        late_all = END_OF_TIME <= watermark  # (gc times are capped at the end of time)
        touched: dict[Window, tuple[WindowState, TriggerContext]] = {}  # with each window's context
        for part in parts:
            w = part.window
            ws = windows.get(w)
            if late_all or w.end <= late_below or (ws is not None and ws.closed):
                self.dropped_pairs += part.count  # one window per element: the element is dropped
                self.dropped_elements += part.count
                self.dropped_retractions += part.count if part.retraction else 0
                continue
            if ws is None:  # one window per element, none merging (`lifts`): nothing to place
                ws = windows[w] = self._new_window(w, watermark)
            if part.retraction:
                ws.acc = combiner.retract_accumulator(ws.acc, part.acc)
            else:
                ws.acc = combiner.merge_accumulators([ws.acc, part.acc])
            ws.pending += part.count
            if ws.ts_min is None or part.earliest < ws.ts_min:
                ws.ts_min = part.earliest
            if ws.ts_max is None or part.latest > ws.ts_max:
                ws.ts_max = part.latest
            seen = touched.get(w)
            if seen is None:
                ctx = TriggerContext(w, at, watermark)
                touched[w] = (ws, ctx)
            else:
                ctx = seen[1]
            trigger.on_elements(ws.trigger, ctx, part.count, part.earliest, part.latest)
        if not touched:
            return []
        if len(touched) == 1:
            (ws, ctx), = touched.values()
            return self._evaluate_one(ws, ctx)
        panes: list[Pane] = []
        for w in in_end_order(touched):
            panes += self._evaluate_one(*touched[w])
        return panes

    def _evaluate_one(self, ws: WindowState, ctx: TriggerContext) -> list[Pane]:
        """`_evaluate` of one window whose state and context are at hand (no merging happened
        since they were taken)."""
        if ws.trigger.finished:
            return []
        panes = self._fire(ws, ctx, last=False) if self.strategy.trigger.should_fire(ws.trigger, ctx) else []
        self._refresh_timers(ws)
        return panes

    def _evaluate(
        self, touched: set[Window] | dict[Window, TriggerContext], at: Instant, watermark: Instant
    ) -> list[Pane]:
        """Rule 3: data-driven triggers of the windows a bundle touched, once for the bundle
        (`touched` may map each window to its context of this moment, to reuse it)."""
        s = self.strategy
        panes: list[Pane] = []
        contexts = touched if isinstance(touched, dict) else {}
        for w in (touched if len(touched) == 1 else in_end_order(touched)):
            ws = self.windows.get(w)
            if ws is not None and not ws.closed:
                ctx = contexts.get(w) or TriggerContext(w, at, watermark)
                if s.trigger.should_fire(ws.trigger, ctx):
                    panes += self._fire(ws, ctx, last=False)
                self._refresh_timers(ws)
        return panes

    def _refresh_timers(self, ws: WindowState, reindex: bool = False) -> None:
        """Caches the window's earliest timers so that runners need not walk trigger trees,
        and indexes them when they change (`WindowMap.note_timers`); `reindex` after
        `WindowMap.due_processing_timers` took the window's timer off the index."""
        pt, et = (None, None) if ws.closed else next_timers(ws.trigger)
        event_changed = et != ws.event_timer
        if reindex or event_changed or pt != ws.processing_timer:
            ws.processing_timer, ws.event_timer = pt, et
            self.windows.note_timers(ws, event_changed)  # type: ignore[attr-defined]

    def _place(self, w: Window, at: Instant, watermark: Instant, touched: set[Window]) -> WindowState:
        """The state of the window an element assigned to `w` belongs to, after merging."""
        ws = self.windows.get(w)
        if ws is None:
            ws = self.windows[w] = self._new_window(w, watermark)
        if not self.strategy.window_fn.is_merging:
            return ws
        target = w
        for result, parts in self.strategy.window_fn.merge(list(self.windows)):
            self._merge(result, parts, at, watermark)
            if touched.intersection(parts):
                touched.difference_update(parts)
                touched.add(result)
            if w in parts:
                target = result
        return self.windows[target]

    def _new_window(self, w: Window, watermark: Instant) -> WindowState:
        s = self.strategy
        return WindowState(
            window=w,
            trigger=s.trigger.new_state(),
            acc=s.combiner.create_accumulator(),
            on_time=OnTime.BEFORE if watermark < w.end else OnTime.DONE,
        )

    def _merge(self, result: Window, parts: Sequence[Window], at: Instant, watermark: Instant) -> None:
        s = self.strategy
        states = [self.windows.pop(p) for p in parts]
        trigger = s.trigger.on_merge([st.trigger for st in states], TriggerContext(result, at, watermark))
        merged = WindowState.merged(result, states, trigger, s.combiner.merge_accumulators([st.acc for st in states]),
                                    watermark)
        self._refresh_timers(merged)
        self.windows[result] = merged

    # --- time -------------------------------------------------------------------

    def next_processing_timer(self) -> Instant | None:
        return self.windows.next_processing_timer()  # type: ignore[attr-defined]

    def next_watermark_deadline(self, watermark: Instant) -> Instant | None:
        """The least watermark at which `advance_watermark` has something to do for this key:
        a window end to pass, an event-time timer, or a garbage collection."""
        windows: WindowMap = self.windows  # type: ignore[assignment]
        # It depends on the ends and event timers (their version) and, through the next end
        # after the watermark, on the watermark only up to that end: the answer for `w` holds
        # for every watermark in [w, next end after w) (no end lies in between).
        memo = self._deadline
        if (memo is not None and memo[0] == windows.version and memo[1] <= watermark
                and (memo[2] is None or watermark < memo[2])):
            return memo[3]
        least = windows.least_end()
        deadline = None if least is None else self.strategy.gc_time_of_end(least)  # gc time grows with the end
        end = windows.next_end_after(watermark)  # closed windows too: they may owe an on-time pane
        if deadline is not None:
            if end is not None and end < deadline:
                deadline = end
            timer = windows.next_event_timer()
            if timer is not None and timer < deadline:
                deadline = timer
        self._deadline = (windows.version, watermark, end, deadline)
        return deadline

    @_changes_windows
    def fire_processing_timers(self, now: Instant, watermark: Instant) -> list[Pane]:
        """Deliver processing-time timers due at or before `now` and fire what is ready."""
        trig, windows = self.strategy.trigger, self.windows
        panes: list[Pane] = []
        due = windows.due_processing_timers(now)  # type: ignore[attr-defined]
        for w in due if len(due) == 1 else in_end_order(due):
            ws = windows[w]
            if ws.trigger.finished or ws.processing_timer is None or ws.processing_timer > now:
                continue
            ctx = TriggerContext(w, now, watermark)
            deliver_processing_timers(trig, ws.trigger, ctx)
            if trig.should_fire(ws.trigger, ctx):
                panes += self._fire(ws, ctx, last=False)
            self._refresh_timers(ws, reindex=True)
        return panes

    @_changes_windows
    def advance_watermark(self, old: Instant, new: Instant, at: Instant) -> list[Pane]:
        """Rule 4: windows whose end the watermark passed come due; expired ones are collected."""
        s = self.strategy
        panes: list[Pane] = []
        collected: list[WindowState] = []
        windows: WindowMap = self.windows  # type: ignore[assignment]
        for w in in_end_order(windows.due_at_watermark(old, new, s.allowed_lateness)):
            ws = self.windows[w]
            gc_now = s.gc_time(w) <= new
            if gc_now:
                collected.append(ws)
            crossing = old < w.end <= new
            owes = crossing and ws.on_time is not OnTime.DONE  # a taken-over window's is out already
            if ws.closed:
                if owes:  # no trigger fires, but data may be waiting for GC's pane
                    ws.on_time = OnTime.OWED if ws.pending else OnTime.DONE
                continue
            ctx = TriggerContext(w, at, new)
            if not crossing and (ws.event_timer is None or ws.event_timer > new):
                continue
            deliver_event_timers(s.trigger, ws.trigger, ctx)
            if s.trigger.should_fire(ws.trigger, ctx):
                if owes:  # fired as the watermark passed the end: the on-time pane
                    ws.on_time = OnTime.OWED
                panes += self._fire(ws, ctx, last=gc_now)
            elif owes:
                ws.on_time = OnTime.OWED if ws.pending else OnTime.DONE
            self._refresh_timers(ws)
        for ws in collected:
            if ws.pending:  # rule 7: a final pane only for data no pane has included
                panes += self._emit(ws, TriggerContext(ws.window, at, new), last=True)
            del self.windows[ws.window]
        return panes

    def output_hold(self, input_watermark: Instant) -> Instant:
        """The least timestamp a future on-time or early pane of this key may carry, so that
        a downstream stage's watermark waits for it (end of time when nothing is pending)."""
        if ("hold", input_watermark) not in self._cached:
            self._cached["hold", input_watermark] = self._output_hold(input_watermark)
        return self._cached["hold", input_watermark]

    def _output_hold(self, input_watermark: Instant) -> Instant:
        tc = self.strategy.timestamp_combiner
        return min((tc.least_pane_timestamp(ws.window, ws.ts_min) for ws in self.windows.values()
                    if not (ws.closed or (ws.on_time is OnTime.DONE and ws.window.end <= input_watermark))),
                   default=END_OF_TIME)

    # --- windows restored or restated from outside the stream ---------------------------

    @_changes_windows
    def remove_window(self, w: Window) -> WindowState:
        """Take window `w` out of this set (a correction restates it, and may put it back)."""
        return self.windows.pop(w)

    @_changes_windows
    def restore_window(self, ws: WindowState) -> None:
        """Put a window's state into this set, as stored state or a correction left it: its
        timers are indexed from its trigger state, so it fires as if it had never left."""
        self._refresh_timers(ws)
        self.windows[ws.window] = ws

    # --- state ------------------------------------------------------------------------

    def to_state(self) -> dict | None:
        """The key's state as JSON data (None when it holds no window); see `state_codec`."""
        return encode_key_state(self)

    @classmethod
    def from_state(cls, key: Hashable, strategy: WindowingStrategy, state: dict | None) -> "KeyedWindowSet":
        """A key's window set from `to_state`'s data (empty for None); an unknown version
        is refused (`state_codec.UnknownStateVersion`)."""
        return decode_key_state(cls(key, strategy), state)

    # --- output -----------------------------------------------------------------

    def _fire(self, ws: WindowState, ctx: TriggerContext, last: bool) -> list[Pane]:
        self.strategy.trigger.on_fire(ws.trigger, ctx)
        return self._emit(ws, ctx, last=last or ws.closed, fired=True)

    def _emit(self, ws: WindowState, ctx: TriggerContext, last: bool, fired: bool = False) -> list[Pane]:
        s = self.strategy
        history = ws.history
        info = describe_next_pane(history, ws.window.end, ctx.watermark, last)
        if not ws.pending and info.timing is not PaneTiming.ON_TIME:
            return []  # rule 6: nothing new, nothing to say
        out = self.publish(
            ws, info, s.combiner.extract_output(ws.acc), s.timestamp_combiner.pane_timestamp(ws.window, ws.ts_min, ws.ts_max), ctx.processing_time, history)
        ws.pending = 0
        if not s.accumulation.accumulates:
            ws.acc = s.combiner.create_accumulator()
            ws.ts_min = ws.ts_max = None
        return out

    def publish(
        self, ws: WindowState, info: PaneInfo, value: Any, timestamp: Instant, at: Instant,
        history: PaneHistory | None = None,
    ) -> list[Pane]:
        """The pane `info` describes, preceded (retracting mode) by the retractions of what
        it replaces; the window's history (`history`: `ws.history`, when at hand) moves on.
        In every mode the pane declares the windows merged into this one since its last pane
        (`Pane.replaces`): they ceased to exist when this pane took their data."""
        pane = Pane.build(self.key, ws.window, value, timestamp, info.timing, info.index, info.on_time_index,
                          info.first, info.last, at, tuple(ws.merged_away))
        ws.merged_away = []
        out: list[Pane] = []
        if self.strategy.accumulation is AccumulationMode.RETRACTING:
            out = ws.replaced_at(at)
            ws.absorbed = []
            ws.standing = pane
        out.append(pane)
        ws.history = history_after(ws.history if history is None else history, info)
        return out


def in_end_order(windows: Iterable[Window]) -> list[Window]:
    """Windows in the order a key handles them: by end, then start."""
    return sorted(windows, key=_end_start)


def _end_start(w: Window) -> tuple[Instant, Instant]:
    return w.end, w.start
