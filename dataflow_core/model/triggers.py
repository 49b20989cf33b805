"""When in processing time a window's pane comes out: triggers as per-window state machines.

A `Trigger` is an immutable description; each window holds a `TriggerState` tree that
mirrors the trigger tree. The runner calls, per window:

- `on_element` for each element that lands in the window (after merging), or, for a
  runner that pre-combined a bundle (combiner lifting), `on_elements` once for the
  bundle's elements in the window: their count and least and greatest time. A trigger
  that looks at anything else (values, every time) is not `summarizable`, and a runner
  then feeds it elements,
- `on_merge` to combine the states of windows being merged into one,
- timers: a node sets `state.processing_timer` / `state.event_timer`; when processing time
  or the watermark reaches it, the runner delivers it (`on_processing_timer` /
  `on_event_timer`) and evaluates the window,
- `should_fire` when the window is evaluated, and `on_fire` after it fired.

A trigger *finishes* by setting `state.finished`; a window whose root trigger finished is
closed. User-defined triggers subclass `Trigger` (see `dataflow_core.examples.triggers`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

from dataflow_core.model.time import Duration, Instant, format_duration
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
        merged.processing_timer = _earliest(p.processing_timer for p in parts)
        merged.event_timer = _earliest(p.event_timer for p in parts)
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


def _earliest(times: Any) -> Instant | None:
    present = [t for t in times if t is not None]
    return min(present) if present else None


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


def next_processing_timer(trigger: Trigger, state: TriggerState) -> Instant | None:
    return _earliest(s.processing_timer for _, s in _nodes(trigger, state))


def next_event_timer(trigger: Trigger, state: TriggerState) -> Instant | None:
    return _earliest(s.event_timer for _, s in _nodes(trigger, state))


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


# --- leaf triggers ------------------------------------------------------------------


class AfterCount(Trigger):
    """Fires once the pane holds `count` elements (the paper's AtCount)."""

    def __init__(self, count: int):
        if count < 1:
            raise ValueError(f"AfterCount needs a count of at least 1, got {count}")
        self.count = count

    def on_element(self, state, ctx, value, timestamp):
        state.data["n"] = state.data.get("n", 0) + 1

    def on_elements(self, state, ctx, count, earliest, latest):
        state.data["n"] = state.data.get("n", 0) + count

    def on_merge(self, parts, ctx):
        merged = super().on_merge(parts, ctx)
        merged.data["n"] = sum(p.data.get("n", 0) for p in parts)
        return merged

    def should_fire(self, state, ctx):
        return state.data.get("n", 0) >= self.count

    def on_fire(self, state, ctx):
        state.finished = True

    def describe(self):
        return f"AfterCount({self.count})"


class _ProcessingTimeTrigger(Trigger):
    """Fires once a processing-time deadline, set by the pane's first element, is reached."""

    def deadline(self, arrival: Instant) -> Instant:
        raise NotImplementedError

    def on_element(self, state, ctx, value, timestamp):
        if "fire_at" not in state.data:
            state.data["fire_at"] = self.deadline(ctx.processing_time)
            state.processing_timer = state.data["fire_at"]

    def on_elements(self, state, ctx, count, earliest, latest):
        if count and "fire_at" not in state.data:  # `on_element`, inlined (once per bundle and window)
            state.data["fire_at"] = state.processing_timer = self.deadline(ctx.processing_time)

    def on_processing_timer(self, state, ctx):
        state.data["reached"] = True

    def on_merge(self, parts, ctx):
        merged = super().on_merge(parts, ctx)
        fire_at = _earliest(p.data.get("fire_at") for p in parts)
        if fire_at is not None:
            merged.data["fire_at"] = fire_at
        if any(p.data.get("reached") for p in parts):
            merged.data["reached"] = True
            merged.processing_timer = None
        else:
            merged.processing_timer = fire_at
        return merged

    def should_fire(self, state, ctx):
        return bool(state.data.get("reached"))

    def on_fire(self, state, ctx):
        state.finished = True
        state.processing_timer = None


class AfterProcessingTime(_ProcessingTimeTrigger):
    """Fires `delay` after the first element of the pane arrived."""

    def __init__(self, delay: Duration):
        if delay < 0:
            raise ValueError("AfterProcessingTime delay must not be negative")
        self.delay = delay

    def deadline(self, arrival):
        return arrival + self.delay

    def describe(self):
        return f"AfterProcessingTime({format_duration(self.delay)})"


class AlignedProcessingTime(_ProcessingTimeTrigger):
    """Fires at the first `k * period + offset` strictly after the pane's first element arrived
    (the paper's AtPeriod)."""

    def __init__(self, period: Duration, offset: Duration = 0):
        if period <= 0:
            raise ValueError("AlignedProcessingTime period must be positive")
        self.period = period
        self.offset = offset % period

    def deadline(self, arrival):
        return ((arrival - self.offset) // self.period + 1) * self.period + self.offset

    def describe(self):
        extra = f", offset={format_duration(self.offset)}" if self.offset else ""
        return f"AlignedProcessingTime({format_duration(self.period)}{extra})"


class Never(Trigger):
    """Never fires; only garbage collection emits the window's final pane."""

    def should_fire(self, state, ctx):
        return False

    def on_fire(self, state, ctx):
        pass

    def describe(self):
        return "Never()"


class AfterPercentileWatermark(Trigger):
    """Fires once `percentile` of the window's input is behind the watermark.

    The paper's (and MillWheel's) percentile watermark as a trigger: a window can come out
    when, say, 99% of its data is complete instead of waiting for the stragglers.
    """

    def __init__(self, percentile: float):
        if not 0 < percentile <= 1:
            raise ValueError(f"percentile must be in (0, 1], got {percentile}")
        self.percentile = percentile

    def _threshold_time(self, times: list[Instant]) -> Instant | None:
        if not times:
            return None
        k = max(1, math.ceil(self.percentile * len(times) - 1e-9))
        return sorted(times)[k - 1] + 1  # watermark at which k elements are behind it

    def on_element(self, state, ctx, value, timestamp):
        times = state.data.setdefault("times", [])
        times.append(timestamp)
        state.event_timer = self._threshold_time(times)

    @property
    def summarizable(self) -> bool:
        return False  # needs every element's time

    def on_merge(self, parts, ctx):
        merged = super().on_merge(parts, ctx)
        merged.data["times"] = [t for p in parts for t in p.data.get("times", [])]
        merged.event_timer = self._threshold_time(merged.data["times"])
        return merged

    def should_fire(self, state, ctx):
        threshold = self._threshold_time(state.data.get("times", []))
        return threshold is not None and ctx.watermark >= threshold

    def on_fire(self, state, ctx):
        state.finished = True
        state.event_timer = None

    def describe(self):
        return f"AfterPercentileWatermark({self.percentile:g})"


# --- composite triggers -------------------------------------------------------------


class Repeatedly(Trigger):
    """After the sub-trigger fires it starts afresh; never finishes."""

    def __init__(self, trigger: Trigger):
        self.trigger = trigger
        self.children = (trigger,)

    # on_element(s): the base class's loop over children, for the one child (a hot path)
    def on_element(self, state, ctx, value, timestamp):
        child = state.children[0]
        if not child.finished:
            self.trigger.on_element(child, ctx, value, timestamp)

    def on_elements(self, state, ctx, count, earliest, latest):
        child = state.children[0]
        if not child.finished:
            self.trigger.on_elements(child, ctx, count, earliest, latest)

    def should_fire(self, state, ctx):
        return self.trigger.should_fire(state.children[0], ctx)

    def on_fire(self, state, ctx):
        self.trigger.on_fire(state.children[0], ctx)
        if state.children[0].finished:
            state.children[0] = self.trigger.new_state()

    def describe(self):
        return f"Repeatedly({self.trigger.describe()})"


class AfterWatermark(Trigger):
    """Fires when the watermark passes the window's end; `early` fires (repeatedly) before
    that and `late` (repeatedly) after it. Without `late`, finishes after the on-time pane."""

    def __init__(self, early: Trigger | None = None, late: Trigger | None = None):
        self.early = early
        self.late = late
        self._early = Repeatedly(early) if early is not None else None
        self._late = Repeatedly(late) if late is not None else None
        self.children = tuple(t for t in (self._early, self._late) if t is not None)
        self._late_at = len(self.children) - 1  # the early child, if any, comes first

    def _child(self, state: TriggerState, late: bool) -> tuple[Trigger | None, TriggerState | None]:
        if late:
            return (None, None) if self._late is None else (self._late, state.children[self._late_at])
        return (None, None) if self._early is None else (self._early, state.children[0])

    @staticmethod
    def is_late_phase(state: TriggerState) -> bool:
        return bool(state.data.get("late"))

    # on_element(s) and should_fire inline `_child` and `is_late_phase`: they run for every
    # window a bundle touches.
    def on_element(self, state, ctx, value, timestamp):
        if state.data.get("late"):
            if self._late is not None:
                self._late.on_element(state.children[self._late_at], ctx, value, timestamp)
        elif self._early is not None:
            self._early.on_element(state.children[0], ctx, value, timestamp)

    def on_elements(self, state, ctx, count, earliest, latest):
        if state.data.get("late"):
            if self._late is not None:
                self._late.on_elements(state.children[self._late_at], ctx, count, earliest, latest)
        elif self._early is not None:
            self._early.on_elements(state.children[0], ctx, count, earliest, latest)

    def on_merge(self, parts, ctx):
        late = any(self.is_late_phase(p) for p in parts)
        merged = TriggerState(finished=any(p.finished for p in parts))
        if late:
            merged.data["late"] = True
        merged.children = []
        for i, trig in enumerate(self.children):
            if trig is self._early and late:
                merged.children.append(trig.new_state())  # the early phase is over
            else:
                merged.children.append(trig.on_merge([p.children[i] for p in parts], ctx))
        return merged

    def should_fire(self, state, ctx):
        if state.data.get("late"):
            return self._late is not None and self._late.should_fire(state.children[self._late_at], ctx)
        if ctx.watermark >= ctx.window.end:
            return True
        return self._early is not None and self._early.should_fire(state.children[0], ctx)

    def on_fire(self, state, ctx):
        if state.data.get("late"):
            self._late.on_fire(state.children[self._late_at], ctx)  # type: ignore[union-attr]
        elif ctx.watermark >= ctx.window.end:
            state.data["late"] = True
            if self._early is not None:  # drop the early phase and its pending timers
                state.children[0] = self._early.new_state()
            if self._late is None:
                state.finished = True
        else:
            self._early.on_fire(state.children[0], ctx)  # type: ignore[union-attr]

    def describe(self):
        args = []
        if self.early is not None:
            args.append(f"early={self.early.describe()}")
        if self.late is not None:
            args.append(f"late={self.late.describe()}")
        return f"AfterWatermark({', '.join(args)})"


class _OverSubTriggers(Trigger):
    """A trigger over a list of sub-triggers, written `Name(T1, T2, ...)`."""

    def __init__(self, *triggers: Trigger):
        if not triggers:
            raise ValueError(f"{type(self).__name__} needs at least one trigger")
        self.children = tuple(triggers)

    def _ready(self, state: TriggerState, ctx: TriggerContext) -> list[bool]:
        return [c.should_fire(s, ctx) for c, s in zip(self.children, state.children) if not s.finished]

    def describe(self):
        return f"{type(self).__name__}({', '.join(c.describe() for c in self.children)})"


class AfterEach(_OverSubTriggers):
    """Each sub-trigger in turn, moving on when one finishes (the paper's SequenceOf)."""

    def on_element(self, state, ctx, value, timestamp):
        i = state.data.get("i", 0)
        self.children[i].on_element(state.children[i], ctx, value, timestamp)

    def on_elements(self, state, ctx, count, earliest, latest):
        i = state.data.get("i", 0)
        self.children[i].on_elements(state.children[i], ctx, count, earliest, latest)

    def on_merge(self, parts, ctx):
        merged = super().on_merge(parts, ctx)
        merged.data["i"] = max(p.data.get("i", 0) for p in parts)
        return merged

    def should_fire(self, state, ctx):
        i = state.data.get("i", 0)
        return self.children[i].should_fire(state.children[i], ctx)

    def on_fire(self, state, ctx):
        i = state.data.get("i", 0)
        self.children[i].on_fire(state.children[i], ctx)
        if state.children[i].finished:
            state.data["i"] = i + 1
            if i + 1 == len(self.children):
                state.data["i"] = i
                state.finished = True


class AfterFirst(_OverSubTriggers):
    """Fires when any sub-trigger fires, then finishes (the paper's FirstOf)."""

    def should_fire(self, state, ctx):
        return any(self._ready(state, ctx))

    def on_fire(self, state, ctx):
        self._fire_children(state, ctx, only_ready=True)
        state.finished = True


class AfterAll(_OverSubTriggers):
    """Fires when every sub-trigger is ready to fire, then finishes."""

    def should_fire(self, state, ctx):
        return all(self._ready(state, ctx))

    def on_fire(self, state, ctx):
        self._fire_children(state, ctx, only_ready=False)
        state.finished = True


class OrFinally(Trigger):
    """Fires as `trigger` does until `until` fires; then fires once more and finishes."""

    def __init__(self, trigger: Trigger, until: Trigger):
        self.trigger = trigger
        self.until = until
        self.children = (trigger, until)

    def should_fire(self, state, ctx):
        return self.trigger.should_fire(state.children[0], ctx) or self.until.should_fire(
            state.children[1], ctx
        )

    def on_fire(self, state, ctx):
        if self.until.should_fire(state.children[1], ctx):
            self.until.on_fire(state.children[1], ctx)
            state.finished = True
            return
        self.trigger.on_fire(state.children[0], ctx)
        if state.children[0].finished:
            state.finished = True

    def describe(self):
        return f"OrFinally({self.trigger.describe()}, {self.until.describe()})"


def Default() -> Trigger:  # noqa: N802 - reads like the other trigger constructors
    """Beam's and the paper's default: `Repeatedly(AfterWatermark())`."""
    return Repeatedly(AfterWatermark())


def RepeatUntil(trigger: Trigger, until: Trigger) -> Trigger:  # noqa: N802
    """The paper's `RepeatUntil(T, U)`: `OrFinally(Repeatedly(T), U)`."""
    return OrFinally(Repeatedly(trigger), until)
