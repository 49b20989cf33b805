"""What one window of one key holds between events: its accumulator, trigger state, what
is pending, and what it has said so far (its pane history and standing pane)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataflow_core.model.panes import OnTime, Pane, PaneHistory
from dataflow_core.model.time import Instant
from dataflow_core.model.triggers import TriggerState
from dataflow_core.model.windows import Window


@dataclass
class WindowState:
    window: Window
    trigger: TriggerState
    acc: Any
    on_time: OnTime
    pending: int = 0  # elements no pane has included yet
    ts_min: Instant | None = None  # element times of the next pane's content
    ts_max: Instant | None = None
    next_index: int = 0
    next_on_time_index: int = 0
    standing: Pane | None = None  # last pane, not yet retracted (retracting mode)
    absorbed: list[Pane] = field(default_factory=list)  # standing panes of merged-away windows
    ended: bool = False  # a pane marked last is out
    processing_timer: Instant | None = None  # cached from the trigger state tree
    event_timer: Instant | None = None

    @property
    def closed(self) -> bool:
        return self.trigger.finished

    @property
    def history(self) -> PaneHistory:
        return PaneHistory(self.next_index, self.next_on_time_index, self.on_time, self.ended)

    @history.setter
    def history(self, h: PaneHistory) -> None:
        self.next_index, self.next_on_time_index, self.on_time, self.ended = (
            h.next_index, h.next_on_time_index, h.on_time, h.ended)
