"""GroupByKeyAndWindow for one key: assign, merge, accumulate, trigger, emit panes.

This is the whole of the model's processing rules for a key, independent of how input
arrives. A runner owns one `KeyedWindowSet` per key and tells it, in processing-time
order, about bundles of elements, processing-time timers that are due and watermark
moves; every call returns the panes (and retractions) emitted at that moment.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.triggers import (
    TriggerContext,
    TriggerState,
    deliver_event_timers,
    deliver_processing_timers,
    next_event_timer,
    next_processing_timer,
)
from dataflow_core.model.windows import AssignContext, Window


class OnTime(enum.Enum):
    """Where a window stands with respect to its on-time pane (rule 8 of FORMAT.md)."""

    BEFORE = "before"  # the watermark has not passed the window's end
    OWED = "owed"  # it passed, no pane fired then, and data was waiting: next pane is ON_TIME
    DONE = "done"  # no ON_TIME pane is (any longer) due


@dataclass
class WindowState:
    window: Window
    trigger: TriggerState
    acc: Any
    on_time: OnTime
    pending: int = 0  # elements no pane has included yet
    ts_min: Instant | None = None  # element times of the next pane's content
    ts_max: Instant | None = None
    next_index: int = 0
    next_on_time_index: int = 0
    standing: Pane | None = None  # last pane, not yet retracted (retracting mode)
    absorbed: list[Pane] = field(default_factory=list)  # standing panes of merged-away windows
    processing_timer: Instant | None = None  # cached from the trigger state tree
    event_timer: Instant | None = None

    @property
    def closed(self) -> bool:
        return self.trigger.finished


@dataclass(frozen=True)
class Element:
    """One input: a value at an event time, or (from an upstream retracting stage) the
    retraction of a value added earlier."""

    value: Any
    timestamp: Instant
    retraction: bool = False


class KeyedWindowSet:
    """All windows of one key under one `WindowingStrategy`."""

    def __init__(self, key: Hashable, strategy: WindowingStrategy):
        self.key = key
        self.strategy = strategy
        self.windows: dict[Window, WindowState] = {}
        self.dropped = 0  # element-window pairs dropped as late or for a closed window
        self.dropped_elements = 0  # elements none of whose windows took them (a run's ledger)

    # --- input ------------------------------------------------------------------

    def add_bundle(self, elements: Iterable[Element], at: Instant, watermark: Instant) -> list[Pane]:
        """Elements that arrived together at processing time `at` (rule 3)."""
        s = self.strategy
        touched: set[Window] = set()
        for el in elements:
            taken = False
            for w in s.window_fn.assign(AssignContext(self.key, el.value, el.timestamp)):
                if s.is_late(w, watermark):
                    self.dropped += 1
                    continue
                ws = self._place(w, at, watermark, touched)
                if ws.closed:
                    self.dropped += 1
                    continue
                taken = True
                if el.retraction:
                    ws.acc = s.combiner.retract_input(ws.acc, el.value)
                else:
                    ws.acc = s.combiner.add_input(ws.acc, el.value)
                ws.pending += 1
                ws.ts_min = el.timestamp if ws.ts_min is None else min(ws.ts_min, el.timestamp)
                ws.ts_max = el.timestamp if ws.ts_max is None else max(ws.ts_max, el.timestamp)
                s.trigger.on_element(ws.trigger, self._ctx(ws.window, at, watermark), el.value, el.timestamp)
                touched.add(ws.window)
            self.dropped_elements += not taken
        panes: list[Pane] = []
        for w in self._ordered(touched):
            ws = self.windows.get(w)
            if ws is not None and not ws.closed:
                ctx = self._ctx(w, at, watermark)
                if s.trigger.should_fire(ws.trigger, ctx):
                    panes += self._fire(ws, ctx, last=False)
                self._refresh_timers(ws)
        return panes

    def _refresh_timers(self, ws: WindowState) -> None:
        """Caches the window's earliest timers so that runners need not walk trigger trees."""
        trig = self.strategy.trigger
        ws.processing_timer = None if ws.closed else next_processing_timer(trig, ws.trigger)
        ws.event_timer = None if ws.closed else next_event_timer(trig, ws.trigger)

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
        survivor = next((st for st in states if st.window == result), None)
        merged = WindowState(
            window=result,
            trigger=s.trigger.on_merge([st.trigger for st in states], self._ctx(result, at, watermark)),
            acc=s.combiner.merge_accumulators([st.acc for st in states]),
            on_time=(
                OnTime.OWED
                if any(st.on_time is OnTime.OWED for st in states)
                else OnTime.BEFORE
                if watermark < result.end
                else OnTime.DONE
            ),
            pending=sum(st.pending for st in states),
            ts_min=_least(st.ts_min for st in states),
            ts_max=_greatest(st.ts_max for st in states),
        )
        for st in states:
            if st is survivor:  # same bounds: the same window, which keeps counting
                merged.next_index = st.next_index
                merged.next_on_time_index = st.next_on_time_index
                merged.standing = st.standing
                merged.absorbed += st.absorbed
            else:
                merged.absorbed += st.absorbed + ([st.standing] if st.standing else [])
        self._refresh_timers(merged)
        self.windows[result] = merged

    # --- time -------------------------------------------------------------------

    def next_processing_timer(self) -> Instant | None:
        return _least(ws.processing_timer for ws in self.windows.values())

    def next_watermark_deadline(self, watermark: Instant) -> Instant | None:
        """The least watermark at which `advance_watermark` has something to do for this key:
        a window end to pass, an event-time timer, or a garbage collection."""
        s = self.strategy
        times: list[Instant] = []
        for ws in self.windows.values():
            times.append(s.gc_time(ws.window))
            if ws.event_timer is not None:
                times.append(ws.event_timer)
            if ws.window.end > watermark:  # closed windows too: they may owe an on-time pane
                times.append(ws.window.end)
        return min(times, default=None)

    def fire_processing_timers(self, now: Instant, watermark: Instant) -> list[Pane]:
        """Deliver processing-time timers due at or before `now` and fire what is ready."""
        trig = self.strategy.trigger
        panes: list[Pane] = []
        for w in self._ordered(self.windows):
            ws = self.windows[w]
            if ws.closed or ws.processing_timer is None or ws.processing_timer > now:
                continue
            ctx = self._ctx(w, now, watermark)
            deliver_processing_timers(trig, ws.trigger, ctx)
            if trig.should_fire(ws.trigger, ctx):
                panes += self._fire(ws, ctx, last=False)
            self._refresh_timers(ws)
        return panes

    def advance_watermark(self, old: Instant, new: Instant, at: Instant) -> list[Pane]:
        """Rule 4: windows whose end the watermark passed come due; expired ones are collected."""
        s = self.strategy
        panes: list[Pane] = []
        collected: list[WindowState] = []
        for w in self._ordered(self.windows):
            ws = self.windows[w]
            gc_now = s.gc_time(w) <= new
            if gc_now:
                collected.append(ws)
            crossing = old < w.end <= new
            if ws.closed:
                if crossing:  # no trigger fires, but data may be waiting for GC's pane
                    ws.on_time = OnTime.OWED if ws.pending else OnTime.DONE
                continue
            ctx = self._ctx(w, at, new)
            if not crossing and (ws.event_timer is None or ws.event_timer > new):
                continue
            deliver_event_timers(s.trigger, ws.trigger, ctx)
            if s.trigger.should_fire(ws.trigger, ctx):
                if crossing:  # fired as the watermark passed the end: the on-time pane
                    ws.on_time = OnTime.OWED
                panes += self._fire(ws, ctx, last=gc_now)
            elif crossing:
                ws.on_time = OnTime.OWED if ws.pending else OnTime.DONE
            self._refresh_timers(ws)
        for ws in collected:
            if ws.pending:  # rule 7: a final pane only for data no pane has included
                panes += self._emit(ws, self._ctx(ws.window, at, new), last=True)
            del self.windows[ws.window]
        return panes

    def output_hold(self, input_watermark: Instant) -> Instant:
        """The least timestamp a future on-time or early pane of this key may carry, so that
        a downstream stage's watermark waits for it (end of time when nothing is pending)."""
        holds = []
        for ws in self.windows.values():
            if ws.closed or (ws.on_time is OnTime.DONE and ws.window.end <= input_watermark):
                continue
            if self.strategy.timestamp_combiner is TimestampCombiner.END_OF_WINDOW or ws.ts_min is None:
                holds.append(ws.window.max_timestamp)
            else:
                holds.append(ws.ts_min)
        return min(holds, default=END_OF_TIME)

    # --- corrections --------------------------------------------------------------

    def restate(
        self, corrections: Sequence[tuple[Window, Pane | None]], elements: Iterable[Element], watermark: Instant,
    ) -> None:
        """Adopt a batch backfill's corrections of this key's windows so that later input
        carries on from them, not from what the live run had.

        Each corrected window's accumulator is rebuilt from `elements` (all of the key's
        input the backfill read), the pane the backfill wrote becomes its last pane (the one
        a later pane retracts) and nothing is pending; its trigger state is the live
        window's (or its parts', merged). A correction to None removes that window (first).
        With a merging WindowFn a corrected window replaces the live windows it overlaps. Windows
        past garbage collection at `watermark` are not kept."""
        s = self.strategy
        accs = self._accumulate(elements) if s.accumulation.accumulates else {}
        for w, pane in corrections:
            if pane is None:
                self.windows.pop(w, None)
        for w, pane in corrections:
            if pane is None:
                continue
            replaced = [v for v in self.windows if v == w or (s.window_fn.is_merging and _overlap(v, w))]
            old = [self.windows.pop(v) for v in self._ordered(replaced)]
            if s.gc_time(w) <= watermark:
                continue
            same = next((st for st in old if st.window == w), None)
            if same is not None:
                trigger = same.trigger
            elif old:
                trigger = s.trigger.on_merge([st.trigger for st in old], self._ctx(w, pane.emitted_at, watermark))
            else:
                trigger = s.trigger.new_state()
            ws = WindowState(
                window=w, trigger=trigger, acc=accs.get(w, s.combiner.create_accumulator()),
                on_time=OnTime.BEFORE if watermark < w.end else OnTime.DONE,
                next_index=pane.index + 1,
                next_on_time_index=(
                    pane.on_time_index + 1 if pane.on_time_index is not None
                    else same.next_on_time_index if same is not None else 0
                ),
                standing=pane if s.accumulation is AccumulationMode.RETRACTING else None,
            )
            self._refresh_timers(ws)
            self.windows[w] = ws

    def _accumulate(self, elements: Iterable[Element]) -> dict[Window, Any]:
        """Every window of `elements` (merged, for a merging WindowFn) with its accumulator."""
        s = self.strategy
        accs: dict[Window, Any] = {}
        for el in elements:
            for w in s.window_fn.assign(AssignContext(self.key, el.value, el.timestamp)):
                acc = accs[w] if w in accs else s.combiner.create_accumulator()
                accs[w] = s.combiner.retract_input(acc, el.value) if el.retraction else s.combiner.add_input(acc, el.value)
        if s.window_fn.is_merging:
            for result, parts in s.window_fn.merge(list(accs)):
                accs[result] = s.combiner.merge_accumulators([accs.pop(p) for p in parts])
        return accs

    # --- output -----------------------------------------------------------------

    def _fire(self, ws: WindowState, ctx: TriggerContext, last: bool) -> list[Pane]:
        self.strategy.trigger.on_fire(ws.trigger, ctx)
        return self._emit(ws, ctx, last=last or ws.closed, fired=True)

    def _emit(self, ws: WindowState, ctx: TriggerContext, last: bool, fired: bool = False) -> list[Pane]:
        s = self.strategy
        if ctx.watermark < ws.window.end:
            timing = PaneTiming.EARLY
        elif ws.on_time is OnTime.OWED:
            timing = PaneTiming.ON_TIME
        else:
            timing = PaneTiming.LATE
        if not ws.pending and timing is not PaneTiming.ON_TIME:
            return []  # rule 6: nothing new, nothing to say
        pane = Pane(
            key=self.key,
            window=ws.window,
            value=s.combiner.extract_output(ws.acc),
            timestamp=self._timestamp(ws),
            timing=timing,
            index=ws.next_index,
            on_time_index=None if timing is PaneTiming.EARLY else ws.next_on_time_index,
            first=ws.next_index == 0,
            last=last,
            emitted_at=ctx.processing_time,
        )
        out: list[Pane] = []
        if s.accumulation is AccumulationMode.RETRACTING:
            out += [p.retracted_at(ctx.processing_time) for p in ws.absorbed]
            if ws.standing is not None:
                out.append(ws.standing.retracted_at(ctx.processing_time))
            ws.absorbed = []
            ws.standing = pane
        out.append(pane)
        ws.next_index += 1
        if timing is not PaneTiming.EARLY:
            ws.next_on_time_index += 1
        if timing is PaneTiming.ON_TIME:
            ws.on_time = OnTime.DONE
        ws.pending = 0
        if not s.accumulation.accumulates:
            ws.acc = s.combiner.create_accumulator()
            ws.ts_min = ws.ts_max = None
        return out

    def _timestamp(self, ws: WindowState) -> Instant:
        tc = self.strategy.timestamp_combiner
        if tc is TimestampCombiner.EARLIEST and ws.ts_min is not None:
            return ws.ts_min
        if tc is TimestampCombiner.LATEST and ws.ts_max is not None:
            return ws.ts_max
        return ws.window.max_timestamp

    @staticmethod
    def _ctx(w: Window, at: Instant, watermark: Instant) -> TriggerContext:
        return TriggerContext(window=w, processing_time=at, watermark=watermark)

    @staticmethod
    def _ordered(windows: Iterable[Window]) -> list[Window]:
        return sorted(windows, key=lambda w: (w.end, w.start))


def _least(values: Iterable[Instant | None]) -> Instant | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _greatest(values: Iterable[Instant | None]) -> Instant | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _overlap(a: Window, b: Window) -> bool:
    return a.start < b.end and b.start < a.end
