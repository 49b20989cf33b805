"""The paper's two-stage example: sessions per user and ad, then per ad the number of
sessions shorter than a threshold.

Stage 1 emits accumulating-and-retracting session panes; stage 2 counts short sessions
per ad and applies stage 1's retractions through `retract_input`. When a late view merges
two short sessions into a long one, both short ones are retracted and the count drops.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Duration, Instant
from dataflow_core.model.triggers import AfterCount, AfterWatermark, Repeatedly
from dataflow_core.model.windows import GlobalWindows, Sessions, merge_overlapping, IntervalWindow


def session_length(pane: Pane, gap: Duration) -> Duration:
    """A session window spans [first view, last view + gap)."""
    return pane.window.end - pane.window.start - gap


def short_sessions_per_ad(gap: Duration, short: Duration, allowed_lateness: Duration) -> Pipeline:
    """Stage 1 is keyed by (user, ad); stage 2 by ad."""

    def to_ad(pane: Pane) -> Iterable[tuple[Hashable, Any]]:
        user, ad = pane.key
        return [(ad, 1)] if session_length(pane, gap) < short else []

    sessions = WindowingStrategy(
        window_fn=Sessions(gap),
        trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
        accumulation=AccumulationMode.RETRACTING,
        allowed_lateness=allowed_lateness,
        combiner=CountFn(),
    )
    counts = WindowingStrategy(
        window_fn=GlobalWindows(),
        trigger=Repeatedly(AfterCount(1)),
        accumulation=AccumulationMode.ACCUMULATING,
        combiner=SumFn(),
    )
    return Pipeline.of(Stage("sessions", sessions), Stage("short_sessions_per_ad", counts, to_ad))


def batch_short_sessions_per_ad(
    views: Iterable[tuple[Hashable, Hashable, Instant]], gap: Duration, short: Duration
) -> dict[Hashable, int]:
    """The same answer computed over all data at once: what streaming must converge to."""
    by_key: dict[tuple, list[IntervalWindow]] = {}
    for user, ad, t in views:
        by_key.setdefault((user, ad), []).append(IntervalWindow(t, t + gap))
    counts: dict[Hashable, int] = {}
    for (user, ad), windows in by_key.items():
        merged_parts = {w for _, parts in merge_overlapping(windows) for w in parts}
        sessions = [span for span, _ in merge_overlapping(windows)]
        sessions += [w for w in set(windows) if w not in merged_parts]
        for s in set(sessions):
            if s.end - s.start - gap < short:
                counts[ad] = counts.get(ad, 0) + 1
    return counts
