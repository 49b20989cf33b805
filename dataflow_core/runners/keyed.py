"""One key's history, replayed on its own: the unit of work a distributed runner hands to an
executor.

Keys of one stage never interact, so a runner may split a stage by key, provided every key
sees the same global clock, the stage's `Schedule` (`schedule.py`). `run_key` visits only
the steps where something happens to its key (its own elements, a processing-time timer
coming due, the watermark passing one of its deadlines), which is what makes a long
arrival-order replay cheap for quiet keys.

Each key reports the spans of sub-steps during which its hold is below the input watermark
(`HoldSpan`); `downstream_schedule` folds them into the next stage's schedule. The result
equals `ReferencePipelineRunner`, sub-step for sub-step: a step `s` of a stage's schedule is
processed as: fire the key's timers due strictly before its time (sub-steps `(*s, 0, t)`),
add the key's elements (`(*s, 1, 0)`), move the watermark (`(*s, 2, 0)`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, NamedTuple, Sequence

from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.lifting import Combined, combine_bundle, lifts
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, pane_elements
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.runners.schedule import (
    ELEMENTS, TIMERS, WATERMARK, HoldSpan, Schedule, Seq, downstream_schedule,
)


class Arrival(NamedTuple):
    """Elements of one key arriving at one step (`seq`) at processing time `time`: the
    elements themselves, or (combiner lifting, `model.lifting`) `combined`, the same bundle
    pre-combined per window, with `elements` empty. (Immutable; a named tuple because a
    replay makes one per key and step.)"""

    seq: Seq
    time: Instant
    elements: tuple[Element, ...]
    combined: tuple[Combined, ...] = ()

    @property
    def count(self) -> int:  # type: ignore[override]  # how many elements, not tuple.count
        return len(self.elements) + sum(p.count for p in self.combined)

    @property
    def retractions(self) -> int:
        """How many of `count` are retractions."""
        return sum(e.retraction for e in self.elements) + sum(p.count for p in self.combined if p.retraction)


@dataclass
class KeyResult:
    panes: list[tuple[Seq, Pane]] = field(default_factory=list)  # (sub-step, pane)
    holds: list[HoldSpan] = field(default_factory=list)
    elements: int = 0
    dropped_elements: int = 0  # elements none of whose windows took them (late, or window closed)
    dropped_pairs: int = 0  # element-window pairs dropped (what scenarios count as `dropped`)
    retractions: int = 0  # of `elements`, those flagged as retractions
    dropped_retractions: int = 0  # of `dropped_elements`, those flagged as retractions
    state: KeyedWindowSet | None = None


def run_key(
    key: Hashable,
    strategy: WindowingStrategy,
    schedule: Schedule,
    arrivals: Sequence[Arrival],
    state: KeyedWindowSet | None = None,
    watermark: Instant | None = None,
    track_holds: bool = True,
) -> KeyResult:
    """Replays one key's arrivals against the global schedule (see the module docstring).

    `state` and `watermark` resume a key from an earlier run (micro-batches); by default the
    key starts empty at the schedule's start. `track_holds=False` skips the hold spans (no
    stage is downstream).
    """
    ks = state if state is not None else KeyedWindowSet(key, strategy)
    wm = schedule.start if watermark is None else watermark
    out = KeyResult(state=ks)
    arrivals = sorted(arrivals, key=_seq_of)
    holds = _HoldTracker(schedule, out.holds) if track_holds else None
    if holds is not None and state is not None and schedule.steps:
        _carry_in(holds, schedule, ks.output_hold(wm), wm)
    dropped_elements, dropped_pairs, dropped_retractions = ks.dropped_elements, ks.dropped_pairs, ks.dropped_retractions
    _KeyReplay(ks, schedule, wm, out, holds).replay(arrivals)
    out.elements = sum(a.count for a in arrivals)
    out.dropped_elements = ks.dropped_elements - dropped_elements  # only elements change these
    out.dropped_pairs = ks.dropped_pairs - dropped_pairs
    out.retractions = sum(a.retractions for a in arrivals)
    out.dropped_retractions = ks.dropped_retractions - dropped_retractions
    if holds is not None:
        holds.close()
    return out


class _KeyReplay:
    """One `run_key` call: the key's state and watermark as it goes, the panes and holds it
    reports, and where on the schedule its next timer and deadline come due. Each visit is
    one step (or an arrival's sub-step downstream) processed in phases, `TIMERS`, `ELEMENTS`,
    `WATERMARK`, each phase a method."""

    def __init__(self, ks: KeyedWindowSet, schedule: Schedule, wm: Instant, out: KeyResult,
                 holds: _HoldTracker | None):
        self.ks, self.schedule, self.wm, self.out, self.holds = ks, schedule, wm, out, holds
        # The schedule index where a timer / deadline comes due, kept while it stays the same
        # (a key's next timer and deadline change far less often than it is visited).
        self.timer: Instant | None = None
        self.deadline: Instant | None = None
        self.timer_at = self.deadline_at = len(schedule)

    def replay(self, arrivals: list[Arrival]) -> None:
        """Visits, in order, every step where the key has an arrival, a timer due or a
        deadline passed, and no other."""
        schedule = self.schedule
        seqs, times, watermarks = schedule.seqs, schedule.times, schedule.watermarks
        n_arrivals = len(arrivals)
        i = 0  # next arrival
        j = 0  # next schedule step not yet visited
        while True:
            seq, k, t = self._next_visit(arrivals[i].seq if i < n_arrivals else None, j)
            if seq is None:
                return
            if k < 0:
                k = self._arrival_index(seq, j)
            on_schedule = k >= 0 and seqs[k] == seq
            arrival = arrivals[i] if i < n_arrivals and arrivals[i].seq == seq else None
            time = times[k] if on_schedule else arrival.time  # type: ignore[union-attr]
            self._catch_up(k - 1 if on_schedule else k)
            self._fire_timers(seq, t, time)
            if arrival is not None:
                self._add(seq, arrival, time)
                i += 1
            self._move_watermark(seq, watermarks[k] if k >= 0 else schedule.start, time)
            if k + 1 > j:
                j = k + 1

    def _next_visit(self, seq: Seq | None, j: int) -> tuple[Seq | None, int, Instant | None]:
        """The earliest of the next arrival's step `seq`, the step where the next timer comes
        due and the one where the watermark passes the next deadline, looking from step `j`
        on: that step, its schedule index (-1 when it is the arrival's, not yet placed) and
        the next timer."""
        seqs, n = self.schedule.seqs, len(self.schedule)
        k = -1
        if (t := self.ks.next_processing_timer()) is not None:  # (still the next timer when the timers phase starts)
            if t != self.timer:
                self.timer, self.timer_at = t, self.schedule.first_time_after(t)
            at = self.timer_at if self.timer_at > j else j
            if at < n and (seq is None or seqs[at] < seq):
                seq, k = seqs[at], at
        if (d := self.ks.next_watermark_deadline(self.wm)) is not None:
            if d != self.deadline:
                self.deadline, self.deadline_at = d, self.schedule.first_watermark_at(d)
            at = self.deadline_at if self.deadline_at > j else j
            if at < n and (seq is None or seqs[at] < seq):
                seq, k = seqs[at], at
        return seq, k, t

    def _arrival_index(self, seq: Seq, j: int) -> int:
        """An arrival's place on the schedule, which it may fall between (downstream): its
        step's index, else the step before it, or j - 1 if that is behind."""
        index = self.schedule.index
        return max(index[seq], j - 1) if seq in index else self.schedule.index_after(seq, j) - 1

    def _catch_up(self, before: int) -> None:
        """Steps skipped since the key's last visit had nothing due for it (no deadline at or
        below their watermarks), so it simply stands at the watermark of step `before`."""
        if before >= 0:
            if self.schedule.watermarks[before] > self.wm:
                self.wm = self.schedule.watermarks[before]
        elif self.schedule.start > self.wm:
            self.wm = self.schedule.start

    def _fire_timers(self, seq: Seq, t: Instant | None, time: Instant) -> None:
        """The `TIMERS` phase: every processing-time timer due strictly before `time`, from
        the next one `t`."""
        ks = self.ks
        while t is not None and t < time:
            sub = (*seq, TIMERS, t)
            if panes := ks.fire_processing_timers(t, self.wm):
                self.out.panes += [(sub, p) for p in panes]
            self._observe_hold(sub, t)
            t = ks.next_processing_timer()

    def _add(self, seq: Seq, arrival: Arrival, time: Instant) -> None:
        """The `ELEMENTS` phase: the arrival's elements and pre-combined windows."""
        sub = (*seq, ELEMENTS, 0)
        if arrival.elements and (panes := self.ks.add_bundle(arrival.elements, time, self.wm)):
            self.out.panes += [(sub, p) for p in panes]
        if arrival.combined and (panes := self.ks.add_combined(arrival.combined, time, self.wm)):
            self.out.panes += [(sub, p) for p in panes]
        self._observe_hold(sub, time)

    def _move_watermark(self, seq: Seq, new_wm: Instant, time: Instant) -> None:
        """The `WATERMARK` phase: the input watermark moves to the step's, firing what that
        passes (the state is asked only when a deadline lies within the move)."""
        if new_wm <= self.wm:
            return
        sub = (*seq, WATERMARK, 0)
        if (d := self.ks.next_watermark_deadline(self.wm)) is not None and d <= new_wm:
            if panes := self.ks.advance_watermark(self.wm, new_wm, time):
                self.out.panes += [(sub, p) for p in panes]
        self.wm = new_wm
        self._observe_hold(sub, time)

    def _observe_hold(self, sub: Seq, time: Instant) -> None:
        if self.holds is not None:
            self.holds.observe(sub, time, self.ks.output_hold(self.wm), self.wm)


def _seq_of(arrival: Arrival) -> Seq:
    return arrival.seq


def _carry_in(holds: "_HoldTracker", schedule: Schedule, hold: Instant, wm: Instant) -> None:
    """A resumed key's hold carries over from its last run: it holds from the very start of
    this run (before any of its sub-steps) until it changes."""
    first = schedule.steps[0]
    since = first.time if schedule.start_time is None else schedule.start_time
    holds.observe((*first.seq, TIMERS, -END_OF_TIME), since, hold, wm)


def carried_hold_spans(schedule: Schedule, hold: Instant) -> list[HoldSpan]:
    """The hold spans of a key that this run does not visit, from the hold stored after its
    last run.

    Such a key keeps that hold all run long: `output_hold` changes only when the key gets
    elements, fires a timer or sees the watermark pass one of its deadlines, and each of
    those makes `run_key` visit it. So its span is the one `run_key` would report for a
    resumed key with nothing to do."""
    spans: list[HoldSpan] = []
    if schedule.steps:
        holds = _HoldTracker(schedule, spans)
        _carry_in(holds, schedule, hold, schedule.start)
        holds.close()
    return spans


class _HoldTracker:
    """Turns a key's hold after each sub-step into the spans where it is below the input
    watermark (the only spans that can hold a downstream stage back)."""

    def __init__(self, schedule: Schedule, spans: list[HoldSpan]):
        self.schedule = schedule
        self.spans = spans
        self.current: tuple[Seq, Instant, Instant, Instant] | None = None  # since, time, hold, wm

    def observe(self, sub: Seq, time: Instant, hold: Instant, wm: Instant) -> None:
        if self.current is not None and self.current[2] == hold:
            return
        self._flush(sub, time)
        self.current = (sub, time, hold, wm) if hold < END_OF_TIME else None

    def close(self) -> None:
        self._flush(None, None)

    def _flush(self, end: Seq | None, end_time: Instant | None) -> None:
        if self.current is None:
            return
        since, time, hold, wm = self.current
        self.current = None
        if hold >= wm:  # not below yet: from the first step whose watermark passes it
            step, phase = since[:-2], since[-2]
            lo = (bisect.bisect_right if phase == WATERMARK else bisect.bisect_left)(self.schedule.seqs, step)
            k = self.schedule.first_watermark_above(hold, lo)
            if k >= len(self.schedule):
                return
            since, time = (*self.schedule.seqs[k], WATERMARK, 0), self.schedule.times[k]
        if end is None or since < end:
            self.spans.append(HoldSpan(since, time, end, end_time, hold))


# --- a whole pipeline, key by key, in one process ----------------------------------------


@dataclass
class StageRun:
    panes: list[tuple[Seq, Pane]]
    schedule: Schedule
    elements: int
    dropped_elements: int
    states: dict[Hashable, KeyedWindowSet]


def lifted(strategy: WindowingStrategy, key: Hashable, arrivals: Iterable[Arrival]) -> list[Arrival]:
    """A key's arrivals with each bundle pre-combined per window (`model.lifting`), for a
    strategy that `lifts`."""
    return [Arrival(a.seq, a.time, (), (*a.combined, *combine_bundle(strategy, key, a.elements))) for a in arrivals]


def run_stage(
    strategy: WindowingStrategy, schedule: Schedule, arrivals: dict[Hashable, list[Arrival]],
    lift: bool = False, track_holds: bool = True,
) -> tuple[StageRun, list[HoldSpan]]:
    """Every key of one stage through `run_key` (what an executor does for its keys);
    `lift` pre-combines each bundle where the strategy `lifts`."""
    panes: list[tuple[Seq, Pane]] = []
    spans: list[HoldSpan] = []
    elements = dropped_elements = 0
    states = {}
    lift = lift and lifts(strategy)
    for key, key_arrivals in arrivals.items():
        if lift:
            key_arrivals = lifted(strategy, key, key_arrivals)
        r = run_key(key, strategy, schedule, key_arrivals, track_holds=track_holds)
        panes += r.panes
        spans += r.holds
        elements += r.elements
        dropped_elements += r.dropped_elements
        assert r.state is not None  # run_key always ends with the key's state
        states[key] = r.state
    return StageRun(panes, schedule, elements, dropped_elements, states), spans


def arrivals_from_panes(
    panes: Iterable[tuple[Seq, Pane]], mapper: Callable[[Pane], Iterable[tuple[Hashable, Any]]]
) -> dict[Hashable, list[Arrival]]:
    """A downstream stage's input: each upstream pane mapped to elements at its sub-step."""
    grouped: dict[Hashable, dict[Seq, tuple[Instant, list[Element]]]] = {}
    for seq, pane in panes:
        for key, element in pane_elements(pane, mapper):
            slot = grouped.setdefault(key, {}).setdefault(seq, (pane.emitted_at, []))
            slot[1].append(element)
    return {
        key: [Arrival(seq, t, tuple(els)) for seq, (t, els) in sorted(by_seq.items())]
        for key, by_seq in grouped.items()
    }


def run_pipeline(
    pipeline: Pipeline, schedule: Schedule, arrivals: dict[Hashable, list[Arrival]], lift: bool = False
) -> list[StageRun]:
    """All stages, each split by key, chained through `downstream_schedule`; `lift`
    pre-combines bundles in the stages whose strategy `lifts`."""
    runs: list[StageRun] = []
    spans: list[HoldSpan] = []
    for n, stage in enumerate(pipeline.stages):
        if n:
            up = runs[-1]
            arrivals = arrivals_from_panes(up.panes, stage.from_upstream)  # type: ignore[arg-type]
            schedule = downstream_schedule(up.schedule, spans)
        last = n == len(pipeline.stages) - 1
        run, spans = run_stage(stage.strategy, schedule, arrivals, lift=lift, track_holds=not last)
        runs.append(run)
    return runs
