"""What a key's window set takes in: elements, each a value at an event time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataflow_core.model.time import Instant
from dataflow_core.model.windows import Window


@dataclass(frozen=True)
class Element:
    """One input: a value at an event time, or (from an upstream retracting stage) the
    retraction of a value added earlier.

    `counted`: spans `[start, end)` of window starts whose windows already hold this element
    (a backfill counted it in the windows its range owns, before the live pipeline took them
    over); it goes into its other windows only. Windows that overlap (sliding ones) are why an
    element can be counted in some of its windows and not others (docs/model.md)."""

    value: Any
    timestamp: Instant
    retraction: bool = False
    counted: tuple[tuple[Instant, Instant], ...] = ()

    def counted_in(self, window: Window) -> bool:
        """Whether `window` already holds this element (see `counted`)."""
        return any(lo <= window.start < hi for lo, hi in self.counted)
