"""GroupByKeyAndWindow for one key: assign, merge, accumulate, trigger, emit panes.

This is the whole of the model's processing rules for a key, independent of how input
arrives. A runner owns one `KeyedWindowSet` per key and tells it, in processing-time
order, about bundles of elements, processing-time timers that are due and watermark
moves; every call returns the panes (and retractions) emitted at that moment.

Two more entry points serve runners that persist state and correct the past:
`to_state`/`from_state` (the key's state as versioned JSON data, see `state_codec`) and
`correct` (a batch backfill's recomputed windows, emitted as panes that continue each
window's history) and `take_over` (a backfill's windows adopted by the first live run).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Sequence, TypeVar

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.panes import (
    OnTime, Pane, PaneHistory, PaneInfo, PaneTiming, describe_next_pane, history_after,
)
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.state_codec import decode_key_state, encode_key_state
from dataflow_core.model.triggers import (
    TriggerContext,
    deliver_event_timers,
    deliver_processing_timers,
    next_timers,
)
from dataflow_core.model.window_map import WindowMap
from dataflow_core.model.window_state import WindowState
from dataflow_core.model.windows import AssignContext, IntervalWindow, Window

if TYPE_CHECKING:
    from dataflow_core.model.lifting import Combined

__all__ = ["Correction", "Corrected", "Element", "FreshCorrection", "KeyedWindowSet", "OnTime", "WindowState",
           "fresh_correction"]


@dataclass(frozen=True)
class Element:
    """One input: a value at an event time, or (from an upstream retracting stage) the
    retraction of a value added earlier."""

    value: Any
    timestamp: Instant
    retraction: bool = False


@dataclass(frozen=True)
class Correction:
    """A batch backfill's recomputation of one window, beside what the results say of it."""

    window: Window
    standing: Pane | None  # the results' pane of the window (None: the results have no row)
    standing_total: Any = None  # the results' value: the window's total so far
    value: Any = None  # the recomputed output
    timestamp: Instant | None = None  # the recomputed pane timestamp (None: end of time)
    present: bool = True  # False: the window no longer exists (its input is gone)


@dataclass
class Corrected:
    """What corrections emit: the panes, and per window what its results row becomes
    (the pane whose metadata it takes and the window's total; None deletes the row)."""

    panes: list[Pane] = field(default_factory=list)
    results: list[tuple[Window, Pane | None, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class FreshCorrection:
    """How `KeyedWindowSet.correct` restates a window that no run has emitted (the results
    have no row for it) outside live state: one pane, which is also the window's results
    row, carrying the recomputed value and timestamp. Its other fields depend on the window
    only through whether the watermark has passed its end, so a runner can restate many
    such windows at once with these panes' metadata (their window, value and timestamp
    are placeholders)."""

    watermark: Instant
    passed: Pane  # for a window ending at or before the watermark
    early: Pane | None  # for one ending after it (None: the watermark is the end of time)


_PLACEHOLDER = object()


def fresh_correction(strategy: WindowingStrategy, at: Instant, watermark: Instant) -> FreshCorrection | None:
    """`FreshCorrection` for corrections at `at` under `watermark`, found by running
    `correct` itself on a window of each kind; None where it does more than emit the value
    as it is (a combiner whose `output_difference` changes a first total)."""

    def probe(end: Instant) -> Pane | None:
        window = IntervalWindow(end - 1, end)
        done = KeyedWindowSet(None, strategy).correct(
            [Correction(window, None, None, _PLACEHOLDER, end - 1, True)], at, watermark)
        if len(done.panes) != 1 or done.panes[0].value is not _PLACEHOLDER or len(done.results) != 1:
            return None
        _, pane, total = done.results[0]
        return pane if pane is done.panes[0] and total is _PLACEHOLDER else None

    passed = probe(watermark)
    early = probe(watermark + 1) if watermark < END_OF_TIME else None
    if passed is None or (early is None and watermark < END_OF_TIME):
        return None
    return FreshCorrection(watermark, passed, early)


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

    Every method that changes `windows` is marked `_changes_windows` (code outside this
    class only fills `windows` of a new set, before asking anything)."""

    def __init__(self, key: Hashable, strategy: WindowingStrategy):
        self.key = key
        self.strategy = strategy
        self.windows: dict[Window, WindowState] = WindowMap()  # indexed by end and timer
        self.dropped = 0  # element-window pairs dropped as late or for a closed window
        self.dropped_elements = 0  # elements none of whose windows took them (a run's ledger)
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
                self.dropped += part.count  # one window per element: the element is dropped
                self.dropped_elements += part.count
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
        for w in self._ordered(touched):
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
        for w in (touched if len(touched) == 1 else self._ordered(touched)):
            ws = self.windows.get(w)
            if ws is not None and not ws.closed:
                ctx = contexts.get(w) or self._ctx(w, at, watermark)
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
        survivor = next((st for st in states if st.window == result), None)
        merged = WindowState(
            window=result,
            trigger=s.trigger.on_merge([st.trigger for st in states], self._ctx(result, at, watermark)),
            acc=s.combiner.merge_accumulators([st.acc for st in states]),
            on_time=(
                OnTime.OWED
                if any(st.on_time is OnTime.OWED for st in states)
                else OnTime.BEFORE
                if watermark < result.end and not (survivor and survivor.on_time is OnTime.DONE)
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
                merged.ended = st.ended
                merged.absorbed += st.absorbed
            else:
                merged.absorbed += st.absorbed + ([st.standing] if st.standing else [])
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
        for w in due if len(due) == 1 else self._ordered(due):
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
        for w in self._ordered(self._due_at_watermark(old, new)):
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
            ctx = self._ctx(w, at, new)
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
                panes += self._emit(ws, self._ctx(ws.window, at, new), last=True)
            del self.windows[ws.window]
        return panes

    def _due_at_watermark(self, old: Instant, new: Instant) -> list[Window]:
        """The windows `advance_watermark(old, new)` has something to do for: an end to
        pass, an event-time timer due, or a garbage collection."""
        if new >= END_OF_TIME:
            return list(self.windows)
        gc_below = new - self.strategy.allowed_lateness  # gc_time(w) <= new: w.end <= gc_below
        return [
            w for w, ws in self.windows.items()
            if (w.end <= new and (old < w.end or w.end <= gc_below))
            or (ws.event_timer is not None and ws.event_timer <= new)
        ]

    def output_hold(self, input_watermark: Instant) -> Instant:
        """The least timestamp a future on-time or early pane of this key may carry, so that
        a downstream stage's watermark waits for it (end of time when nothing is pending)."""
        if ("hold", input_watermark) not in self._cached:
            self._cached["hold", input_watermark] = self._output_hold(input_watermark)
        return self._cached["hold", input_watermark]

    def _output_hold(self, input_watermark: Instant) -> Instant:
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

    @_changes_windows
    def correct(
        self, corrections: Sequence[Correction], at: Instant, watermark: Instant,
        elements: Iterable[Element] | None = None,
    ) -> Corrected:
        """Emit a batch backfill's corrections as panes that continue each window's history.

        Each pane's metadata comes from `describe_next_pane` over the window's history:
        this set's window when it holds one (live state), else the history the results'
        standing pane implies. In retracting mode the standing pane is retracted first; a
        discarding pane carries the combiner's `output_difference`. A window that lost all
        its input is retracted (retracting), or gets the empty aggregate (otherwise, where
        there is one). Corrections are restatements: none is marked last, since the input
        can be rewritten again.

        With `elements` (all of the key's input the backfill read) this set is live state:
        each corrected window is kept, its accumulator rebuilt from them and nothing pending,
        so later input carries on from the corrected figures."""
        s = self.strategy
        keep = elements is not None
        rebuilt = self._rebuild(elements) if keep and s.accumulation.accumulates else {}
        empty_acc = s.combiner.create_accumulator()
        empty = s.combiner.extract_output(empty_acc)
        out = Corrected()
        for c in sorted(corrections, key=lambda c: (c.present, c.window.end, c.window.start)):
            w = c.window
            ws = self._standing_window(c, at, watermark)
            if not c.present and (s.accumulation is AccumulationMode.RETRACTING or empty is None):
                if s.accumulation is AccumulationMode.RETRACTING:
                    out.panes += [p.retracted_at(at) for p in ws.absorbed]
                    if ws.standing is not None:
                        out.panes.append(ws.standing.retracted_at(at))
                out.results.append((w, None, None))
                continue
            total = c.value if c.present else empty
            ts = c.timestamp if c.present else (c.standing.timestamp if c.standing else w.max_timestamp)
            ts = END_OF_TIME - 1 if ts is None else ts
            value = total
            if not s.accumulation.accumulates:
                value = s.combiner.output_difference(total, c.standing_total if c.standing is not None else None)
            info = describe_next_pane(
                PaneHistory(ws.next_index, ws.next_on_time_index, ws.on_time), w.end, watermark, last=False)
            emitted = self._publish(ws, info, value, ts, at)
            out.panes += emitted
            out.results.append((w, emitted[-1], total))
            if keep and c.present and s.gc_time(w) > watermark:
                acc, lo, hi = rebuilt.get(w, (empty_acc, None, None))
                ws.acc = acc if s.accumulation.accumulates else s.combiner.create_accumulator()
                ws.ts_min, ws.ts_max = (lo, hi) if s.accumulation.accumulates else (None, None)
                ws.pending = 0
                self._refresh_timers(ws)
                self.windows[w] = ws
        return out

    @_changes_windows
    def take_over(self, standing: Sequence[Pane], watermark: Instant, elements: Iterable[Element] = ()) -> None:
        """Adopt windows that another run emitted (a batch backfill before the pipeline went
        live), so that live input continues their histories instead of starting new ones.

        Each window keeps the history its `standing` pane implies (`PaneHistory.after`) and,
        in retracting mode, that pane as the one to retract; accumulating windows get their
        accumulator rebuilt from `elements` (the input that run counted). Nothing is emitted,
        nothing is pending, and windows `watermark` has already collected are not kept."""
        s = self.strategy
        rebuilt = self._rebuild(elements) if s.accumulation.accumulates else {}
        for pane in standing:
            w = pane.window
            if w in self.windows or s.gc_time(w) <= watermark:
                continue
            ws = self._window_after(w, pane, watermark)
            ws.acc, ws.ts_min, ws.ts_max = rebuilt.get(w, (ws.acc, None, None))
            self._refresh_timers(ws)
            self.windows[w] = ws

    def _standing_window(self, c: Correction, at: Instant, watermark: Instant) -> WindowState:
        """The corrected window's state, taken out of this set: the live window (merged with
        the live windows it now covers, for a merging WindowFn), or one whose history is
        what the results' standing pane implies."""
        s = self.strategy
        w = c.window
        covered = [v for v in self.windows if v == w or (c.present and s.window_fn.is_merging and _overlap(v, w))]
        parts = [self.windows.pop(v) for v in self._ordered(covered)]
        same = next((p for p in parts if p.window == w), None)
        ws = same if same is not None else self._window_after(w, c.standing, watermark)
        others = [p for p in parts if p is not same]
        if others:
            ws.trigger = s.trigger.on_merge([p.trigger for p in [ws, *others]], self._ctx(w, at, watermark))
            for p in others:
                ws.absorbed += p.absorbed + ([p.standing] if p.standing else [])
        return ws

    def _window_after(self, w: Window, standing: Pane | None, watermark: Instant) -> WindowState:
        """A window known only by its standing pane (a results row): the history that pane
        implies, that pane to retract (retracting mode), an empty accumulator."""
        s = self.strategy
        h = PaneHistory.after(standing, w.end, watermark)
        return WindowState(
            window=w, trigger=s.trigger.new_state(), acc=s.combiner.create_accumulator(), on_time=h.on_time,
            next_index=h.next_index, next_on_time_index=h.next_on_time_index,
            standing=standing if s.accumulation is AccumulationMode.RETRACTING else None,
        )

    def _rebuild(self, elements: Iterable[Element]) -> dict[Window, tuple[Any, Instant | None, Instant | None]]:
        """Every window of `elements` (merged, for a merging WindowFn) with its accumulator
        and the least and greatest element time in it."""
        s = self.strategy
        got: dict[Window, tuple[Any, Instant | None, Instant | None]] = {}
        for el in elements:
            for w in s.window_fn.assign(AssignContext(self.key, el.value, el.timestamp)):
                acc, lo, hi = got.get(w, (s.combiner.create_accumulator(), None, None))
                acc = s.combiner.retract_input(acc, el.value) if el.retraction else s.combiner.add_input(acc, el.value)
                got[w] = (acc, _least((lo, el.timestamp)), _greatest((hi, el.timestamp)))
        if s.window_fn.is_merging:
            for result, parts in s.window_fn.merge(list(got)):
                merged = [got.pop(p) for p in parts]
                got[result] = (
                    s.combiner.merge_accumulators([m[0] for m in merged]),
                    _least(m[1] for m in merged), _greatest(m[2] for m in merged),
                )
        return got

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
        out = self._publish(
            ws, info, s.combiner.extract_output(ws.acc), self._timestamp(ws), ctx.processing_time, history)
        ws.pending = 0
        if not s.accumulation.accumulates:
            ws.acc = s.combiner.create_accumulator()
            ws.ts_min = ws.ts_max = None
        return out

    def _publish(
        self, ws: WindowState, info: PaneInfo, value: Any, timestamp: Instant, at: Instant,
        history: PaneHistory | None = None,
    ) -> list[Pane]:
        """The pane `info` describes, preceded (retracting mode) by the retractions of what
        it replaces; the window's history (`history`: `ws.history`, when at hand) moves on."""
        pane = Pane.build(
            self.key, ws.window, value, timestamp, info.timing, info.index, info.on_time_index, info.first,
            info.last, at,
        )
        out: list[Pane] = []
        if self.strategy.accumulation is AccumulationMode.RETRACTING:
            out += [p.retracted_at(at) for p in ws.absorbed]
            if ws.standing is not None:
                out.append(ws.standing.retracted_at(at))
            ws.absorbed = []
            ws.standing = pane
        out.append(pane)
        ws.history = history_after(ws.history if history is None else history, info)
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
        return sorted(windows, key=_end_start)


def _end_start(w: Window) -> tuple[Instant, Instant]:
    return w.end, w.start


def _least(values: Iterable[Instant | None]) -> Instant | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _greatest(values: Iterable[Instant | None]) -> Instant | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _overlap(a: Window, b: Window) -> bool:
    return a.start < b.end and b.start < a.end
