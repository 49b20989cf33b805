"""What every trigger is: a per-window state machine, and how a runner drives it.

A `Trigger` is an immutable description; each window holds a `TriggerState` tree that
mirrors the trigger tree. The runner calls, per window:

- `on_element` for each element that lands in the window (after merging), or, for a
  runner that pre-combined a bundle (combiner lifting), `on_elements` once for the
  bundle's elements in the window: their count and least and greatest time. A trigger
  that looks at anything else (values, every time) is not `summarizable`, and a runner
  then feeds it elements,
- `on_merge` to combine the states of windows being merged into one,
- timers: a node sets `state.processing_timer` / `state.event_timer`; when processing time
  or the watermark reaches it, the runner delivers it (`deliver_processing_timers` /
  `deliver_event_timers` call `on_processing_timer` / `on_event_timer`) and evaluates the
  window (`next_timers` says when that is next due),
- `should_fire` when the window is evaluated, and `on_fire` after it fired.

A trigger *finishes* by setting `state.finished`; a window whose root trigger finished is
closed. The built-in triggers are in `model.triggers`; user-defined triggers subclass
`Trigger` (see `dataflow_core.examples.triggers`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

from dataflow_core.model.time import Instant, earliest
from dataflow_core.model.windows import Window


@dataclass
class TriggerState:
    """One node's per-window state: its own fields, timers and its children's states."""

    finished: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    children: list["TriggerState"] = field(default_factory=list)
    processing_timer: Instant | None = None
    event_timer: Instant | None = None


class TriggerContext(NamedTuple):
    """The moment a trigger is asked about: its window, the processing time and the
    watermark (immutable; a named tuple because one is made per window per key visit)."""

    window: Window
    processing_time: Instant
    watermark: Instant


class Trigger(ABC):
    """Base class; composite triggers list their sub-triggers in `children`."""

    children: tuple["Trigger", ...] = ()

    def new_state(self) -> TriggerState:
        return TriggerState(children=[c.new_state() for c in self.children])

    def on_element(self, state: TriggerState, ctx: TriggerContext, value: Any, timestamp: Instant) -> None:
        for child, cstate in zip(self.children, state.children):
            if not cstate.finished:
                child.on_element(cstate, ctx, value, timestamp)

    def on_elements(
        self, state: TriggerState, ctx: TriggerContext, count: int, earliest: Instant, latest: Instant
    ) -> None:
        """`count` elements of one bundle land in the window, at times in [earliest, latest]:
        the same as `count` calls of `on_element` for a `summarizable` trigger (within a
        bundle nothing fires between elements, so their order does not matter)."""
        for child, cstate in zip(self.children, state.children):
            if not cstate.finished:
                child.on_elements(cstate, ctx, count, earliest, latest)

    @property
    def summarizable(self) -> bool:
        """Whether `on_elements` stands for `on_element` here and in every sub-trigger. A
        trigger that overrides `on_element` must override `on_elements` too (and say so by
        overriding this) to be fed pre-combined bundles."""
        return _defines_after(type(self), "on_elements", "on_element") and all(c.summarizable for c in self.children)

    def on_merge(self, parts: Sequence[TriggerState], ctx: TriggerContext) -> TriggerState:
        """Default merge: children merge position by position, finished if any part was."""
        merged = TriggerState(finished=any(p.finished for p in parts))
        merged.children = [
            child.on_merge([p.children[i] for p in parts], ctx) for i, child in enumerate(self.children)
        ]
        merged.processing_timer = earliest(p.processing_timer for p in parts)
        merged.event_timer = earliest(p.event_timer for p in parts)
        return merged

    def on_processing_timer(self, state: TriggerState, ctx: TriggerContext) -> None:
        """Called when this node's processing-time timer is due."""

    def on_event_timer(self, state: TriggerState, ctx: TriggerContext) -> None:
        """Called when the watermark reaches this node's event-time timer."""

    @abstractmethod
    def should_fire(self, state: TriggerState, ctx: TriggerContext) -> bool: ...

    @abstractmethod
    def on_fire(self, state: TriggerState, ctx: TriggerContext) -> None: ...

    @abstractmethod
    def describe(self) -> str: ...

    def __repr__(self) -> str:
        return self.describe()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trigger) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(self.describe())

    def _fire_children(self, state: TriggerState, ctx: TriggerContext, only_ready: bool) -> None:
        for child, cstate in zip(self.children, state.children):
            if not cstate.finished and (not only_ready or child.should_fire(cstate, ctx)):
                child.on_fire(cstate, ctx)


def _defines_after(cls: type, method: str, than: str) -> bool:
    """Whether the class that gives `cls` its `method` is the one that gives it `than`, or
    a subclass of it (an override of `than` alone leaves `method` stale)."""
    owner = next(k for k in cls.__mro__ if method in k.__dict__)
    other = next(k for k in cls.__mro__ if than in k.__dict__)
    return issubclass(owner, other)


# --- walking the state tree -------------------------------------------------------


def _nodes(trigger: Trigger, state: TriggerState) -> list[tuple[Trigger, TriggerState]]:
    """Every node of the tree with its state, parents before children (depth first); a
    list, taken before any node is delivered to (walked per timer)."""
    out = [(trigger, state)]
    if trigger.children:
        for child, cstate in zip(trigger.children, state.children):
            out += _nodes(child, cstate)  # trees are a few levels deep
    return out


def next_timers(state: TriggerState) -> tuple[Instant | None, Instant | None]:
    """The earliest processing-time and event-time timers anywhere in a state tree (asked
    after every evaluation of a window: one flat loop over a list that grows as it goes)."""
    pt, et = state.processing_timer, state.event_timer
    if state.children:
        nodes = list(state.children)
        for s in nodes:
            t = s.processing_timer
            if t is not None and (pt is None or t < pt):
                pt = t
            t = s.event_timer
            if t is not None and (et is None or t < et):
                et = t
            if s.children:
                nodes += s.children
    return pt, et


def deliver_processing_timers(trigger: Trigger, state: TriggerState, ctx: TriggerContext) -> None:
    for node, s in _nodes(trigger, state):
        if s.processing_timer is not None and s.processing_timer <= ctx.processing_time:
            s.processing_timer = None
            node.on_processing_timer(s, ctx)


def deliver_event_timers(trigger: Trigger, state: TriggerState, ctx: TriggerContext) -> None:
    for node, s in _nodes(trigger, state):
        if s.event_timer is not None and s.event_timer <= ctx.watermark:
            s.event_timer = None
            node.on_event_timer(s, ctx)
