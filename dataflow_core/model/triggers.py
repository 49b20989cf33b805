"""When in processing time a window's pane comes out: the built-in triggers, which
pipelines compose (`AfterWatermark(early=..., late=...)`, `Repeatedly(AfterCount(n))`, ...).

Leaf triggers watch one thing (a count of elements, processing time, the watermark's
share of a window's elements); composite triggers combine sub-triggers. Each is a
`trigger_machine.Trigger`: an immutable description whose per-window `TriggerState` the
runner drives.
"""

from __future__ import annotations

import math

from dataflow_core.model.time import Duration, Instant, earliest, format_duration, parse_duration, positive_duration
from dataflow_core.model.trigger_machine import Trigger, TriggerContext, TriggerState


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
        fire_at = earliest(p.data.get("fire_at") for p in parts)
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

    def __init__(self, delay: "Duration | str"):
        self.delay = parse_duration(delay, "AfterProcessingTime delay")

    def deadline(self, arrival):
        return arrival + self.delay

    def describe(self):
        return f"AfterProcessingTime({format_duration(self.delay)})"


class AlignedProcessingTime(_ProcessingTimeTrigger):
    """Fires at the first `k * period + offset` strictly after the pane's first element arrived
    (the paper's AtPeriod)."""

    def __init__(self, period: "Duration | str", offset: "Duration | str" = 0):
        self.period = positive_duration(period, "AlignedProcessingTime period")
        self.offset = parse_duration(offset, "AlignedProcessingTime offset") % self.period

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
            self._late.on_fire(state.children[self._late_at], ctx)
        elif ctx.watermark >= ctx.window.end:
            state.data["late"] = True
            if self._early is not None:  # drop the early phase and its pending timers
                state.children[0] = self._early.new_state()
            if self._late is None:
                state.finished = True
        else:
            self._early.on_fire(state.children[0], ctx)

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
