"""The reference runner: pure Python, in memory, deterministic.

It is the oracle the Spark runners are tested against. Callers script a history in
processing-time order: move the clock, deliver a bundle, move the watermark.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable

from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant


class ReferenceRunner:
    """One GroupByKeyAndWindow stage over all keys."""

    def __init__(self, strategy: WindowingStrategy, start: Instant):
        self.strategy = strategy
        self.processing_time = start
        self.watermark = start
        self.keys: dict[Hashable, KeyedWindowSet] = {}
        self.elements_in = 0

    @property
    def dropped(self) -> int:
        return sum(k.dropped for k in self.keys.values())

    def _key(self, key: Hashable) -> KeyedWindowSet:
        ks = self.keys.get(key)
        if ks is None:
            ks = self.keys[key] = KeyedWindowSet(key, self.strategy)
        return ks

    def advance_processing_time(self, to: Instant) -> list[Pane]:
        """Rule 2: fire every timer due strictly before `to`, in time order, then set the clock."""
        if to < self.processing_time:
            raise ValueError(f"processing time cannot move back from {self.processing_time} to {to}")
        panes: list[Pane] = []
        while True:
            due = [(t, i, ks) for i, ks in enumerate(self.keys.values()) if (t := ks.next_processing_timer()) is not None]
            due = [d for d in due if d[0] < to]
            if not due:
                break
            t = min(d[0] for d in due)
            for _, _, ks in sorted((d for d in due if d[0] == t), key=lambda d: d[1]):
                panes += ks.fire_processing_timers(t, self.watermark)
        self.processing_time = to
        return panes

    def add(self, elements: Iterable[tuple[Hashable, Any, Instant]]) -> list[Pane]:
        """One bundle arriving now: (key, value, event time) triples."""
        by_key: dict[Hashable, list[Element]] = {}
        for key, value, ts in elements:
            by_key.setdefault(key, []).append(Element(value, ts))
            self.elements_in += 1
        panes: list[Pane] = []
        for key, els in by_key.items():
            panes += self._key(key).add_bundle(els, self.processing_time, self.watermark)
        return panes

    def advance_watermark(self, to: Instant) -> list[Pane]:
        """Rule 4; a watermark never moves back, so an earlier value leaves it where it is."""
        old, self.watermark = self.watermark, max(self.watermark, min(to, END_OF_TIME))
        if self.watermark == old:
            return []
        panes: list[Pane] = []
        for ks in self.keys.values():
            panes += ks.advance_watermark(old, self.watermark, self.processing_time)
        return panes

    def output_watermark(self) -> Instant:
        """This stage's output watermark: its input watermark held back by pending panes."""
        return min([self.watermark] + [ks.output_hold(self.watermark) for ks in self.keys.values()])
