"""What one window of one key holds between events: its accumulator, trigger state, what
is pending, and what it has said so far (its pane history and standing pane)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dataflow_core.model.panes import OnTime, Pane, PaneHistory
from dataflow_core.model.time import Instant, earliest, latest
from dataflow_core.model.trigger_machine import TriggerState
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
    merged_away: list[Window] = field(default_factory=list)  # merged-in windows that had emitted (`Pane.replaces`)
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

    def replaced_at(self, at: Instant) -> list[Pane]:
        """The retractions, at `at`, of what this window's next pane replaces (retracting
        mode): the standing panes of the windows merged into it, then its own."""
        out = [p.retracted_at(at) for p in self.absorbed]
        if self.standing is not None:
            out.append(self.standing.retracted_at(at))
        return out

    def absorb(self, other: "WindowState") -> None:
        """Take over what a window merged into this one still has to retract, and to declare
        gone (`Pane.replaces`: it, if it emitted, and what merged into it)."""
        self.absorbed += other.absorbed + ([other.standing] if other.standing else [])
        self.merged_away += other.merged_away + ([other.window] if other.next_index else [])

    @classmethod
    def merged(
        cls, result: Window, states: list["WindowState"], trigger: TriggerState, acc: Any, watermark: Instant,
    ) -> "WindowState":
        """The state of window `result` that `states` merge into (their trigger states and
        accumulators already merged into `trigger` and `acc`). Its on-time pane is owed if any
        part owed one; the part with `result`'s own bounds, if any, is the same window, so its
        pane history goes on; the others' standing panes are to be retracted."""
        survivor = next((st for st in states if st.window == result), None)
        if any(st.on_time is OnTime.OWED for st in states):
            on_time = OnTime.OWED
        elif watermark < result.end and not (survivor and survivor.on_time is OnTime.DONE):
            on_time = OnTime.BEFORE
        else:
            on_time = OnTime.DONE
        merged = cls(
            window=result, trigger=trigger, acc=acc, on_time=on_time, pending=sum(st.pending for st in states),
            ts_min=earliest(st.ts_min for st in states), ts_max=latest(st.ts_max for st in states),
        )
        for st in states:
            if st is survivor:
                merged.next_index, merged.next_on_time_index = st.next_index, st.next_on_time_index
                merged.standing, merged.ended = st.standing, st.ended
                merged.absorbed += st.absorbed
                merged.merged_away += st.merged_away
            else:
                merged.absorb(st)
        return merged
