"""What comes out: a pane is one firing of one key's window (the paper's PaneInfo)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any, Hashable

from dataflow_core.model.time import Instant
from dataflow_core.model.windows import Window


class PaneTiming(enum.Enum):
    EARLY = "EARLY"
    ON_TIME = "ON_TIME"
    LATE = "LATE"


@dataclass(frozen=True)
class Pane:
    key: Hashable
    window: Window
    value: Any
    timestamp: Instant
    timing: PaneTiming
    index: int
    on_time_index: int | None
    first: bool
    last: bool
    emitted_at: Instant
    retraction: bool = False

    def retracted_at(self, emitted_at: Instant) -> "Pane":
        """The retraction of this pane: the same pane, marked, at a later moment."""
        return replace(self, retraction=True, emitted_at=emitted_at)
