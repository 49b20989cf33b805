"""What a diagram shows: a neutral, in-memory history of one grouping stage.

A `History` holds the elements (key, value, event time, arrival time), the watermark as it
moved over processing time, and the panes the stage emitted (`dataflow_core.model.panes.Pane`,
retractions included). It is built from a replayed scenario (`history_from_scenario`) or from
the Delta tables of a real run (`dataflow_core.diagram.tables`); the drawing only reads it.
All times are integer milliseconds since the epoch (`dataflow_core.model.time`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.model.panes import Pane
from dataflow_core.model.time import Instant


@dataclass(frozen=True)
class ElementRecord:
    """One input element: drawn as a dot at (event_time, arrival); a duplicate delivery or a
    quarantined row is drawn apart (the runs did not aggregate it)."""

    key: Hashable
    value: Any
    event_time: Instant
    arrival: Instant
    kind: str = "accepted"  # or "duplicate" (a later delivery of an event id) or "quarantined"


@dataclass(frozen=True)
class WatermarkStep:
    """From `processing_time` on, the watermark is `watermark` (until the next step)."""

    processing_time: Instant
    watermark: Instant


@dataclass
class History:
    elements: list[ElementRecord] = field(default_factory=list)
    watermarks: list[WatermarkStep] = field(default_factory=list)
    panes: list[Pane] = field(default_factory=list)
    title: str = ""
    subtitle: str = ""

    def keys(self) -> list[Hashable]:
        """Every key, in order of first appearance (elements first, then panes)."""
        seen: dict[Hashable, None] = {}
        for e in self.elements:
            seen.setdefault(e.key, None)
        for p in self.panes:
            seen.setdefault(p.key, None)
        return list(seen)

    def for_keys(self, keys: Sequence[Hashable]) -> "History":
        """The same history restricted to `keys` (the watermark is shared by all keys).

        A key given as text matches a key whose text form is equal (`--key 7` finds key 7).
        """
        known = self.keys()
        by_text = {str(k): k for k in known}
        chosen = []
        for k in keys:
            if k in known:
                chosen.append(k)
            elif str(k) in by_text:
                chosen.append(by_text[str(k)])
            else:
                shown = ", ".join(str(x) for x in known[:10]) + (", ..." if len(known) > 10 else "")
                raise DataflowError(f"unknown key {k!r} (keys in this history: {shown or 'none'})")
        wanted = set(chosen)
        return History(
            [e for e in self.elements if e.key in wanted],
            list(self.watermarks),
            [p for p in self.panes if p.key in wanted],
            self.title,
            self.subtitle,
        )

    def watermark_at(self, t: Instant) -> Instant | None:
        """The watermark in force at processing time `t` (after every step at or before `t`)."""
        current = None
        for step in self.watermarks:
            if step.processing_time > t:
                break
            current = step.watermark if current is None else max(current, step.watermark)
        return current


def monotone_steps(points: Iterable[tuple[Instant, Instant]]) -> list[WatermarkStep]:
    """(processing time, watermark) observations -> the steps of a watermark that never moves
    back (FORMAT.md rule 4): sorted by processing time, keeping only the moves forward."""
    steps: list[WatermarkStep] = []
    for t, wm in sorted(points, key=lambda p: p[0]):
        if steps and wm <= steps[-1].watermark:
            continue
        if steps and steps[-1].processing_time == t:
            steps[-1] = WatermarkStep(t, wm)
        else:
            steps.append(WatermarkStep(t, wm))
    return steps


def history_from_scenario(scenario: Any, panes: Sequence[Pane] | None = None) -> History:
    """A scenario (`dataflow_core.scenario.Scenario`) and its panes as a history.

    Without `panes`, the scenario is replayed on the reference runner. The watermark starts at
    the scenario's `start` and moves at each event that sets one (never back).
    """
    if panes is None:
        from dataflow_core.scenario import replay_local

        panes = replay_local(scenario).panes
    elements = [
        ElementRecord(key, value, ts, event.at) for event in scenario.events for key, value, ts in event.add
    ]
    points = [(scenario.start, scenario.start)]
    points += [(e.at, e.watermark) for e in scenario.events if e.watermark is not None]
    subtitle = _describe_strategy(scenario.strategy)
    return History(elements, monotone_steps(points), list(panes), scenario.name, subtitle)


def _describe_strategy(strategy: Any) -> str:
    parts = []
    window_fn = getattr(strategy, "window_fn", None)
    if window_fn is not None:
        parts.append(window_fn.describe())
    trigger = getattr(strategy, "trigger", None)
    if trigger is not None and hasattr(trigger, "describe"):
        parts.append(trigger.describe())
    accumulation = getattr(strategy, "accumulation", None)
    if accumulation is not None:
        parts.append(getattr(accumulation, "value", str(accumulation)))
    combiner = getattr(strategy, "combiner", None)
    if combiner is not None and getattr(combiner, "name", None):
        parts.append(combiner.name)
    return " · ".join(str(p) for p in parts)
