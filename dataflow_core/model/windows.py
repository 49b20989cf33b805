"""Where in event time: windows and the functions that assign and merge them.

A `WindowFn` assigns each element to windows; a merging `WindowFn` (such as `Sessions`)
also says which of a key's windows merge. Users extend `WindowFn` for custom windows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Sequence

from dataflow_core.model.time import END_OF_TIME, Duration, Instant, format_duration, parse_duration, positive_duration


class Window(ABC):
    """A half-open span `[start, end)` of event time."""

    start: Instant
    end: Instant

    @property
    def max_timestamp(self) -> Instant:
        """The last instant inside the window (end minus 1 ms)."""
        return self.end - 1


@dataclass(frozen=True, order=True)
class IntervalWindow(Window):
    start: Instant
    end: Instant

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"window end {self.end} must be after its start {self.start}")

    def intersects(self, other: "IntervalWindow") -> bool:
        return self.start < other.end and other.start < self.end

    def span(self, other: Window) -> "IntervalWindow":
        return IntervalWindow(min(self.start, other.start), max(self.end, other.end))


@dataclass(frozen=True, order=True)
class GlobalWindow(Window):
    """The single window covering all of event time; it ends at the end of time."""

    start: Instant = -END_OF_TIME
    end: Instant = END_OF_TIME


GLOBAL_WINDOW = GlobalWindow()


@dataclass(frozen=True)
class AssignContext:
    """What a `WindowFn` may look at to place an element."""

    key: Hashable
    value: Any
    timestamp: Instant


class WindowFn(ABC):
    """Assigns elements to windows; override `merge` for merging windows.

    A subclass that redefines `assign` or `merge` and does not restate a SQL form
    (`sql_window`, `sql_windows`, `sql_session_gap`) has none: an inherited form never
    misstates a user's windows (runners then assign in Python)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "assign" in cls.__dict__ or "merge" in cls.__dict__:
            for form in ("sql_window", "sql_windows", "sql_session_gap"):
                if form not in cls.__dict__:
                    setattr(cls, form, WindowFn.__dict__[form])

    @abstractmethod
    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        """The windows the element belongs to (before any merging)."""

    @property
    def is_merging(self) -> bool:
        return False

    @property
    def reach(self) -> Duration | None:
        """How far after an element's time the windows it is assigned to (before merging) can
        end; None when unbounded or unknown. An element whose assigned windows all ended
        more than the allowed lateness before the watermark is dropped as too late, so a
        runner may forget what it needs to recognise its duplicates after that."""
        return None

    def merge(self, windows: Sequence[Window]) -> list[tuple[Window, list[Window]]]:
        """Groups of a key's windows to merge, each as (result, parts). Default: none."""
        return []

    def sql_window(self, event_ms: str) -> tuple[str, str] | None:
        """For a WindowFn that puts every element in exactly one window, chosen by its time
        alone: Spark SQL expressions of that window's start and end (epoch ms; both NULL
        for the global window, as in `pane_codec.window_bounds`), over the SQL expression
        `event_ms` of the element's time. None when there is no such form; a property test
        holds each form equal to `assign`."""
        return None

    def sql_windows(self, event_ms: str) -> str | None:
        """For a non-merging WindowFn that places elements by their time alone: a Spark SQL
        expression of the array of windows an element is assigned to, each a struct
        (`start`, `end`) as `sql_window` gives them, over the SQL expression `event_ms`.
        By default the one window of `sql_window`; None when there is no such form."""
        one = self.sql_window(event_ms)
        if one is None or self.is_merging:
            return None
        return f"array(named_struct('start', {one[0]}, 'end', {one[1]}))"

    @property
    def sql_session_gap(self) -> Duration | None:
        """For a merging WindowFn that opens `[t, t + gap)` per element and merges a key's
        windows that overlap (sessions): the gap, so that a runner may compute its windows
        with a session aggregate; None otherwise."""
        return None

    def describe(self) -> str:
        return type(self).__name__ + "()"


class GlobalWindows(WindowFn):
    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        return (GLOBAL_WINDOW,)

    def sql_window(self, event_ms: str) -> tuple[str, str]:
        return ("CAST(NULL AS BIGINT)", "CAST(NULL AS BIGINT)")

    def describe(self) -> str:
        return "GlobalWindows()"


class FixedWindows(WindowFn):
    """Tumbling windows `[k*size + offset, (k+1)*size + offset)`. Durations in any of
    `time.parse_duration`'s forms (`FixedWindows("1h")`, `FixedWindows(3_600_000)`)."""

    def __init__(self, size: "Duration | str", offset: "Duration | str" = 0):
        self.size = positive_duration(size, "FixedWindows size")
        self.offset = parse_duration(offset, "FixedWindows offset") % self.size

    def window_for(self, t: Instant, offset: Duration | None = None) -> IntervalWindow:
        off = self.offset if offset is None else offset
        start = (t - off) // self.size * self.size + off
        return IntervalWindow(start, start + self.size)

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        return (self.window_for(ctx.timestamp),)

    def sql_window(self, event_ms: str) -> tuple[str, str]:
        start = f"(({event_ms}) - pmod(({event_ms}) - {self.offset}L, {self.size}L))"
        return (start, f"({start} + {self.size}L)")

    @property
    def reach(self) -> Duration:
        return self.size

    def describe(self) -> str:
        extra = f", offset={format_duration(self.offset)}" if self.offset else ""
        return f"FixedWindows({format_duration(self.size)}{extra})"


class SlidingWindows(WindowFn):
    """Windows of `size` starting every `period`; an element lands in size/period of them."""

    def __init__(self, size: "Duration | str", period: "Duration | str", offset: "Duration | str" = 0):
        self.size = positive_duration(size, "SlidingWindows size")
        self.period = positive_duration(period, "SlidingWindows period")
        self.offset = parse_duration(offset, "SlidingWindows offset") % self.period

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        t = ctx.timestamp
        last_start = (t - self.offset) // self.period * self.period + self.offset
        windows = []
        start = last_start
        while start > t - self.size:
            windows.append(IntervalWindow(start, start + self.size))
            start -= self.period
        return tuple(reversed(windows))

    def sql_windows(self, event_ms: str) -> str:
        count = -(-self.size // self.period)
        last = f"(({event_ms}) - pmod(({event_ms}) - {self.offset}L, {self.period}L))"
        starts = f"sequence({last} - {(count - 1) * self.period}L, {last}, {self.period}L)"
        return (f"transform(filter({starts}, s -> s + {self.size}L > ({event_ms})), "
                f"s -> named_struct('start', s, 'end', s + {self.size}L))")

    @property
    def reach(self) -> Duration:
        return self.size

    def describe(self) -> str:
        extra = f", offset={format_duration(self.offset)}" if self.offset else ""
        return f"SlidingWindows({format_duration(self.size)}, {format_duration(self.period)}{extra})"


class Sessions(WindowFn):
    """Each element opens `[t, t + gap)`; a key's overlapping windows merge."""

    def __init__(self, gap: "Duration | str"):
        self.gap = positive_duration(gap, "Sessions gap")

    @property
    def is_merging(self) -> bool:
        return True

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        return (IntervalWindow(ctx.timestamp, ctx.timestamp + self.gap),)

    @property
    def reach(self) -> Duration:
        return self.gap

    @property
    def sql_session_gap(self) -> Duration:
        return self.gap

    def merge(self, windows: Sequence[Window]) -> list[tuple[Window, list[Window]]]:
        return merge_overlapping(windows)

    def describe(self) -> str:
        return f"Sessions({format_duration(self.gap)})"


def merge_overlapping(windows: Iterable[Window]) -> list[tuple[Window, list[Window]]]:
    """Groups of overlapping interval windows (transitively), for merging WindowFns."""
    groups: list[tuple[IntervalWindow, list[Window]]] = []
    for w in sorted(windows, key=lambda w: (w.start, w.end)):
        if groups and w.start < groups[-1][0].end:
            span, parts = groups[-1]
            groups[-1] = (span.span(w), parts + [w])
        else:
            groups.append((IntervalWindow(w.start, w.end), [w]))
    return [(span, parts) for span, parts in groups if len(parts) > 1]
