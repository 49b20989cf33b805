"""One key's history, replayed on its own: the unit of work a distributed runner hands to an
executor.

Keys of one stage never interact, so a runner may split a stage by key, provided every key
sees the same global clock: the *schedule*, a list of steps, each a processing time and
the input watermark after it (one small aggregation over all keys, computed before the
keys run). `run_key` then visits only the steps where something happens to its key (its
own elements, a processing-time timer coming due, the watermark passing one of its
deadlines), which is what makes a long arrival-order replay cheap for quiet keys.

Between stages, the downstream watermark is the upstream's input watermark held back by
each key's pending work (`KeyedWindowSet.output_hold`). Each key reports the spans of
sub-steps during which its hold is below the input watermark (`HoldSpan`); only those can
hold the downstream back, and they are few. `downstream_schedule` folds them into the next
stage's schedule. The result equals `ReferencePipelineRunner`, sub-step for sub-step:

- a step `s` of a stage's schedule is processed as: fire the key's timers due strictly
  before its time (sub-steps `(*s, 0, t)`), add the key's elements (`(*s, 1, 0)`), move
  the watermark (`(*s, 2, 0)`);
- a downstream stage's steps are the upstream's sub-steps, so sequence numbers grow by
  two integers per stage and compare as tuples.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, NamedTuple, Sequence

from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.lifting import Combined, combine_bundle, lifts
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, pane_elements
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant

Seq = tuple[int, ...]
TIMERS, ELEMENTS, WATERMARK = 0, 1, 2  # the phases of a step, in the order they run


@dataclass(frozen=True)
class Step:
    """A moment of the stage's input: its processing time and the watermark after it."""

    seq: Seq
    time: Instant
    watermark: Instant


class Schedule:
    """A stage's steps in order; times and watermarks never decrease along it."""

    def __init__(self, steps: Sequence[Step], start: Instant, start_time: Instant | None = None):
        self.steps = list(steps)
        self.start = start  # the watermark before the first step
        self.start_time = start_time  # the processing time before it (a resumed run's last)
        self.seqs = [s.seq for s in self.steps]
        self.index = {seq: i for i, seq in enumerate(self.seqs)}  # a step's place, without bisecting tuples
        self.times = [s.time for s in self.steps]
        self.watermarks = [s.watermark for s in self.steps]
        for a, b in zip(self.steps, self.steps[1:]):
            if not (a.seq < b.seq and a.time <= b.time and a.watermark <= b.watermark):
                raise ValueError(f"schedule out of order between {a} and {b}")

    def __len__(self) -> int:
        return len(self.steps)

    def watermark_through(self, seq: Seq, inclusive: bool = True) -> Instant:
        """The input watermark after the last step at (or before) `seq`."""
        i = (bisect.bisect_right if inclusive else bisect.bisect_left)(self.seqs, seq)
        return self.watermarks[i - 1] if i else self.start

    def first_time_after(self, t: Instant, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose time is after `t`."""
        return bisect.bisect_right(self.times, t, lo)

    def first_watermark_at(self, w: Instant, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose watermark reaches `w`."""
        return bisect.bisect_left(self.watermarks, w, lo)

    def first_watermark_above(self, w: Instant, lo: int) -> int:
        return bisect.bisect_right(self.watermarks, w, lo)

    def index_after(self, seq: Seq, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose seq is after `seq`."""
        return bisect.bisect_right(self.seqs, seq, lo)


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
    def count(self) -> int:
        return len(self.elements) + sum(p.count for p in self.combined)


@dataclass(frozen=True)
class HoldSpan:
    """Sub-steps `[start, end)` during which a key holds the downstream watermark at `hold`
    (below the input watermark); `end` None means to the end of the run."""

    start: Seq
    start_time: Instant
    end: Seq | None
    end_time: Instant | None
    hold: Instant


@dataclass
class KeyResult:
    panes: list[tuple[Seq, Pane]] = field(default_factory=list)  # (sub-step, pane)
    holds: list[HoldSpan] = field(default_factory=list)
    elements: int = 0
    dropped_elements: int = 0  # elements none of whose windows took them (late, or window closed)
    dropped_pairs: int = 0  # element-window pairs dropped (what scenarios count as `dropped`)
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
    tracking = track_holds
    holds = _HoldTracker(schedule, out.holds)
    if tracking and state is not None and schedule.steps:
        _carry_in(holds, schedule, ks.output_hold(wm), wm)
    seqs, times, watermarks, index, n = schedule.seqs, schedule.times, schedule.watermarks, schedule.index, len(schedule)
    dropped_elements, dropped_pairs = ks.dropped_elements, ks.dropped_pairs
    next_timer, next_deadline = ks.next_processing_timer, ks.next_watermark_deadline
    # The schedule index where a timer / deadline comes due, kept while it stays the same
    # (a key's next timer and deadline change far less often than it is visited).
    timer = deadline = None
    timer_at = deadline_at = n
    i = 0  # next arrival
    j = 0  # next schedule step not yet visited
    n_arrivals = len(arrivals)
    while True:
        seq: Seq | None = arrivals[i].seq if i < n_arrivals else None
        k = -1  # the schedule index of `seq` once known
        if (t := next_timer()) is not None:  # (still the next timer when the timers phase starts)
            if t != timer:
                timer, timer_at = t, schedule.first_time_after(t)
            at = timer_at if timer_at > j else j
            if at < n and (seq is None or seqs[at] < seq):
                seq, k = seqs[at], at
        if (d := next_deadline(wm)) is not None:
            if d != deadline:
                deadline, deadline_at = d, schedule.first_watermark_at(d)
            at = deadline_at if deadline_at > j else j
            if at < n and (seq is None or seqs[at] < seq):
                seq, k = seqs[at], at
        if seq is None:
            break
        if k < 0:  # an arrival's step, which may lie between schedule steps (downstream)
            # on the schedule, `index_after(seq, j) - 1` is its place, or j - 1 if that is behind
            k = max(index[seq], j - 1) if seq in index else schedule.index_after(seq, j) - 1
        on_schedule = k >= 0 and seqs[k] == seq
        arrival = arrivals[i] if i < n_arrivals and arrivals[i].seq == seq else None
        time = times[k] if on_schedule else arrival.time  # type: ignore[union-attr]
        new_wm = watermarks[k] if k >= 0 else schedule.start
        # Steps skipped since the key's last visit had nothing due for it (no deadline at or
        # below their watermarks), so it simply stands at the watermark before this step.
        before = k - 1 if on_schedule else k
        if before >= 0 and watermarks[before] > wm:
            wm = watermarks[before]
        elif before < 0 and schedule.start > wm:
            wm = schedule.start
        while t is not None and t < time:
            sub = (*seq, TIMERS, t)
            if panes := ks.fire_processing_timers(t, wm):
                out.panes += [(sub, p) for p in panes]
            if tracking:
                holds.observe(sub, t, ks.output_hold(wm), wm)
            t = next_timer()
        if arrival is not None:
            sub = (*seq, ELEMENTS, 0)
            if arrival.elements and (panes := ks.add_bundle(arrival.elements, time, wm)):
                out.panes += [(sub, p) for p in panes]
            if arrival.combined and (panes := ks.add_combined(arrival.combined, time, wm)):
                out.panes += [(sub, p) for p in panes]
            if tracking:
                holds.observe(sub, time, ks.output_hold(wm), wm)
            i += 1
        if new_wm > wm:
            sub = (*seq, WATERMARK, 0)
            if (d := next_deadline(wm)) is not None and d <= new_wm:  # else nothing is due
                if panes := ks.advance_watermark(wm, new_wm, time):
                    out.panes += [(sub, p) for p in panes]
            wm = new_wm
            if tracking:
                holds.observe(sub, time, ks.output_hold(wm), wm)
        if k + 1 > j:
            j = k + 1
    out.elements = sum(a.count for a in arrivals)
    out.dropped_elements = ks.dropped_elements - dropped_elements  # only elements change these
    out.dropped_pairs = ks.dropped_pairs - dropped_pairs
    holds.close()
    return out


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


def downstream_schedule(
    schedule: Schedule, spans: Iterable[HoldSpan], start: Instant | None = None
) -> Schedule:
    """The next stage's schedule: this stage's input watermark held back by its keys' hold
    spans, as a step at every sub-step where that changes, plus a step at each of this
    stage's watermark sub-steps (so downstream timers see the clock move).

    `start` is the downstream watermark before the schedule (default this stage's start;
    a resumed run passes where the downstream stood)."""
    times: dict[Seq, Instant] = {(*s.seq, WATERMARK, 0): s.time for s in schedule.steps}
    clock = set(times)
    starts: dict[Seq, list[Instant]] = {}
    ends: dict[Seq, list[Instant]] = {}
    for span in spans:
        times.setdefault(span.start, span.start_time)
        starts.setdefault(span.start, []).append(span.hold)
        if span.end is not None:
            times.setdefault(span.end, span.end_time)  # type: ignore[arg-type]
            ends.setdefault(span.end, []).append(span.hold)
    active: list[Instant] = []  # a heap with lazy removal
    removed: dict[Instant, int] = {}
    steps: list[Step] = []
    out = schedule.start if start is None else start
    for seq in sorted(times):
        for h in ends.get(seq, ()):
            removed[h] = removed.get(h, 0) + 1
        for h in starts.get(seq, ()):
            heapq.heappush(active, h)
        while active and removed.get(active[0], 0):
            removed[active[0]] -= 1
            heapq.heappop(active)
        wm_in = schedule.watermark_through(seq[:-2], inclusive=seq[-2] == WATERMARK)
        held = min(wm_in, active[0]) if active else wm_in
        if held > out or seq in clock:
            out = max(out, held)
            steps.append(Step(seq, times[seq], out))
    return Schedule(steps, schedule.start if start is None else start, schedule.start_time)


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
