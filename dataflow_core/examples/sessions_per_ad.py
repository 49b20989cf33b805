"""The paper's two-stage example: sessions per user and ad, then per ad the number of
sessions shorter than a threshold.

Stage 1 emits accumulating-and-retracting session panes; stage 2 counts short sessions
per ad and applies stage 1's retractions through `retract_input`. When a late view merges
two short sessions into a long one, both short ones are retracted and the count drops.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable

from dataflow_core.api import (
    AfterCount, AfterWatermark, CountFn, Duration, GlobalWindows, IntervalWindow, Pane, Repeatedly, Sessions, SumFn,
    stage,
)
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.time import Instant
from dataflow_core.model.windows import merge_overlapping


def session_length(pane: Pane, gap: Duration) -> Duration:
    """A session window spans [first view, last view + gap)."""
    return pane.window.end - pane.window.start - gap


def short_sessions_per_ad(gap: Duration, short: Duration, allowed_lateness: Duration) -> Pipeline:
    """Stage 1 is keyed by (user, ad); stage 2 by ad. The stages are built as a pipeline's
    are (`dataflow_core.api.stage`), for the reference runner rather than a table."""

    def to_ad(pane: Pane) -> Iterable[tuple[Hashable, Any]]:
        user, ad = pane.key
        return [(ad, 1)] if session_length(pane, gap) < short else []

    sessions = stage("sessions", Sessions(gap), CountFn(), trigger=AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
                     accumulation="retracting", allowed_lateness=allowed_lateness)
    counts = stage("short_sessions_per_ad", GlobalWindows(), SumFn(), trigger=Repeatedly(AfterCount(1)),
                   accumulation="accumulating", key_columns=("ad",), from_upstream=to_ad, input_type=int)
    # The reference runner takes the model's form of the stages (what `PipelineSpec.model` is).
    return Pipeline.of(*(Stage(s.output, s.strategy, s.from_upstream) for s in (sessions, counts)))


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
