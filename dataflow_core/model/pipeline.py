"""Multi-stage pipelines: the panes of one GroupByKeyAndWindow feed the next.

A downstream stage sees each upstream pane as an element stamped with the pane's
timestamp; a retraction pane arrives as the retraction of that element and is applied
through the combiner's `retract_input`. This is how the paper's sessions-then-counts
example stays exactly right when a late element merges two sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.group_by_window import Element
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import InvalidStrategy, WindowingStrategy

PaneMapper = Callable[[Pane], Iterable[tuple[Hashable, Any]]]
"""Turns an upstream pane into downstream (key, value) elements; it must map a retraction
pane exactly as it mapped the pane it cancels (it sees the same fields)."""


def pane_elements(pane: Pane, mapper: PaneMapper) -> list[tuple[Hashable, Element]]:
    """A downstream stage's elements from one upstream pane: each (key, value) `mapper`
    gives, at the pane's timestamp, retractions where the pane is one (every runner's rule)."""
    return [(key, Element(value, pane.timestamp, pane.retraction)) for key, value in mapper(pane)]


@dataclass(frozen=True)
class Stage:
    name: str
    strategy: WindowingStrategy
    from_upstream: PaneMapper | None = None  # None for the first stage


@dataclass(frozen=True)
class Pipeline:
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise InvalidStrategy("a pipeline needs at least one stage")
        if self.stages[0].from_upstream is not None:
            raise InvalidStrategy(f"stage {self.stages[0].name!r} is the first stage and has no upstream to map")
        for up, down in zip(self.stages, self.stages[1:]):
            if down.from_upstream is None:
                raise InvalidStrategy(f"stage {down.name!r} needs from_upstream to turn {up.name!r}'s panes into elements")
            if up.strategy.accumulation is AccumulationMode.RETRACTING and not down.strategy.combiner.can_retract:
                raise InvalidStrategy(
                    f"stage {down.name!r} receives retractions from {up.name!r} but its combiner "
                    f"{down.strategy.combiner.name!r} cannot retract (no retract_input)"
                )

    @classmethod
    def of(cls, *stages: Stage) -> "Pipeline":
        return cls(tuple(stages))
