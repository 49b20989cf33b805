"""The reference runner: pure Python, in memory, deterministic.

It is the oracle the Spark runners are tested against. Callers script a history in
processing-time order: move the clock, deliver a bundle, move the watermark.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Iterable, Sequence

from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, pane_elements
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Duration, Instant
from dataflow_core.model.watermarks import Progress, WatermarkEstimator, advanced, observes_pending


class ReferenceRunner:
    """One GroupByKeyAndWindow stage over all keys."""

    def __init__(self, strategy: WindowingStrategy, start: Instant):
        self.strategy = strategy
        self.processing_time = start
        self.watermark = start
        self.keys: dict[Hashable, KeyedWindowSet] = {}
        self.elements_in = 0
        # Lazily invalidated heaps of (time, key order, key): an entry counts only while it
        # still equals the key's current next timer / watermark deadline.
        self._order: dict[Hashable, int] = {}
        self._timers: list[tuple[Instant, int, Hashable]] = []
        self._deadlines: list[tuple[Instant, int, Hashable]] = []

    @property
    def dropped_pairs(self) -> int:
        """Element-window pairs dropped as too late or for a closed window (FORMAT's `dropped`)."""
        return sum(k.dropped_pairs for k in self.keys.values())

    def _key(self, key: Hashable) -> KeyedWindowSet:
        ks = self.keys.get(key)
        if ks is None:
            ks = self.keys[key] = KeyedWindowSet(key, self.strategy)
            self._order[key] = len(self._order)
        return ks

    def _reschedule(self, key: Hashable) -> None:
        ks = self.keys[key]
        if (t := ks.next_processing_timer()) is not None:
            heapq.heappush(self._timers, (t, self._order[key], key))
        if (d := ks.next_watermark_deadline(self.watermark)) is not None:
            heapq.heappush(self._deadlines, (d, self._order[key], key))

    def _pop_due(self, heap: list, limit: Instant, current) -> list[Hashable]:
        """Keys whose live heap entry is at or before `limit`, in key order."""
        due: dict[Hashable, None] = {}
        while heap and heap[0][0] <= limit:
            t, _, key = heapq.heappop(heap)
            if current(self.keys[key]) == t:
                due[key] = None
        return sorted(due, key=self._order.__getitem__)

    def next_timer(self) -> Instant | None:
        """The earliest pending processing-time timer of any key."""
        while self._timers:
            t, _, key = self._timers[0]
            if self.keys[key].next_processing_timer() == t:
                return t
            heapq.heappop(self._timers)
        return None

    def fire_timers_at(self, t: Instant) -> list[Pane]:
        """Move the clock to `t` and fire the timers due then (none may be due earlier)."""
        self._check_clock(t)
        self.processing_time = t
        panes: list[Pane] = []
        for key in self._pop_due(self._timers, t, KeyedWindowSet.next_processing_timer):
            panes += self.keys[key].fire_processing_timers(t, self.watermark)
            self._reschedule(key)
        return panes

    def advance_processing_time(self, to: Instant) -> list[Pane]:
        """Rule 2: fire every timer due strictly before `to`, in time order, then set the clock."""
        self._check_clock(to)
        panes: list[Pane] = []
        while (t := self.next_timer()) is not None and t < to:
            panes += self.fire_timers_at(t)
        self.processing_time = to
        return panes

    def _check_clock(self, to: Instant) -> None:
        if to < self.processing_time:
            raise ValueError(f"processing time cannot move back from {self.processing_time} to {to}")

    def add(self, elements: Iterable[tuple]) -> list[Pane]:
        """One bundle arriving now: (key, value, event time[, retraction]) tuples."""
        by_key: dict[Hashable, list[Element]] = {}
        for key, value, ts, *rest in elements:
            by_key.setdefault(key, []).append(Element(value, ts, bool(rest and rest[0])))
            self.elements_in += 1
        panes: list[Pane] = []
        for key, els in by_key.items():
            panes += self._key(key).add_bundle(els, self.processing_time, self.watermark)
            self._reschedule(key)
        return panes

    def advance_watermark(self, to: Instant) -> list[Pane]:
        """Rule 4; a watermark never moves back, so an earlier value leaves it where it is."""
        old, self.watermark = self.watermark, advanced(self.watermark, to)
        if self.watermark == old:
            return []
        panes: list[Pane] = []
        for key in self._pop_due(self._deadlines, self.watermark, lambda ks: ks.next_watermark_deadline(old)):
            panes += self.keys[key].advance_watermark(old, self.watermark, self.processing_time)
            self._reschedule(key)
        return panes

    def output_watermark(self) -> Instant:
        """This stage's output watermark: its input watermark held back by pending panes."""
        return min([self.watermark] + [ks.output_hold(self.watermark) for ks in self.keys.values()])


class ReferencePipelineRunner:
    """Runs a multi-stage pipeline in memory. A stage's watermark is the least of its input's
    watermark and its upstream's oldest pending work (`ReferenceRunner.output_watermark`)."""

    def __init__(self, pipeline: Pipeline, start: Instant):
        self.pipeline = pipeline
        self.stages = [ReferenceRunner(stage.strategy, start) for stage in pipeline.stages]
        self.outputs: list[list[Pane]] = [[] for _ in self.stages]

    @property
    def dropped_pairs(self) -> list[int]:
        return [r.dropped_pairs for r in self.stages]

    def advance_processing_time(self, to: Instant) -> None:
        while True:
            due = [(t, i) for i, r in enumerate(self.stages) if (t := r.next_timer()) is not None and t < to]
            if not due:
                break
            t, i = min(due)
            for j, r in enumerate(self.stages[: i + 1]):
                if r.processing_time < t:
                    self._emit(j, r.advance_processing_time(t))
            self._emit(i, self.stages[i].fire_timers_at(t))
        for i, r in enumerate(self.stages):
            self._emit(i, r.advance_processing_time(to))

    def add(self, elements: Iterable[tuple]) -> None:
        self._emit(0, self.stages[0].add(elements))

    def advance_watermark(self, to: Instant) -> None:
        self._emit(0, self.stages[0].advance_watermark(to))

    def _emit(self, i: int, panes: list[Pane]) -> None:
        """Record stage i's panes and pass them, and its new output watermark, downstream."""
        self.outputs[i] += panes
        if i + 1 == len(self.stages):
            return
        down, mapper = self.stages[i + 1], self.pipeline.stages[i + 1].from_upstream
        assert mapper is not None  # every stage after the first maps its upstream's panes
        up = self.stages[i]
        if down.processing_time < up.processing_time:
            self._emit(i + 1, down.advance_processing_time(up.processing_time))
        elements = [(k, e.value, e.timestamp, e.retraction) for p in panes for k, e in pane_elements(p, mapper)]
        if elements:
            self._emit(i + 1, down.add(elements))
        self._emit(i + 1, down.advance_watermark(up.output_watermark()))


def reference_watermarks(estimator: WatermarkEstimator, batches: Sequence[tuple[Instant, Sequence[Instant]]],
                         max_skew: Duration | None = None, bounded: bool = False) -> list[Instant]:
    """The input watermark after each batch (processing time, every event time it delivered)
    as the reference runner estimates it: the estimator given every event time of the batch
    (not a summary) and, when the input is `bounded` and it observes PENDING, every event
    time of the batches still to come. The Spark runners' summaries must give the same."""
    pending = observes_pending(estimator) and bounded
    out = []
    for n, (at, times) in enumerate(batches):
        later = [t for _, ts in batches[n + 1:] for t in ts] if pending else []
        out.append(estimator.update(Progress(batch_event_times=list(times), pending_event_times=later,
                                             bounded=pending, processing_time=at, max_skew=max_skew)))
    return out
