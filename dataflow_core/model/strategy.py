"""One grouping stage's answers to the four questions, validated when it is defined."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Mapping, TypeVar

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CombineFn, SumFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.time import END_OF_TIME, Duration, Instant, format_duration, parse_duration
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.triggers import Default
from dataflow_core.model.windows import GlobalWindows, Window, WindowFn


class TimestampCombiner(enum.Enum):
    """Which event time a pane carries downstream."""

    END_OF_WINDOW = "end_of_window"
    EARLIEST = "earliest"
    LATEST = "latest"

    @property
    def merge(self) -> str:
        """How the timestamps of a window's panes combine into its total's: "min" for
        EARLIEST, else "max" (END_OF_WINDOW panes all carry the window's end)."""
        return "min" if self is TimestampCombiner.EARLIEST else "max"

    def pane_timestamp(self, window: Window, earliest: Instant | None, latest: Instant | None) -> Instant:
        """The timestamp of a pane whose content's element times run from `earliest` to
        `latest` (None: it has no element, as an on-time pane may not)."""
        if self is TimestampCombiner.EARLIEST and earliest is not None:
            return earliest
        if self is TimestampCombiner.LATEST and latest is not None:
            return latest
        return window.max_timestamp

    def least_pane_timestamp(self, window: Window, earliest: Instant | None) -> Instant:
        """The least timestamp a later pane of `window` may carry when its pending content's
        earliest element time is `earliest` (None: none pending yet): what holds a
        downstream watermark back."""
        if self is TimestampCombiner.END_OF_WINDOW or earliest is None:
            return window.max_timestamp
        return earliest

    def sql_aggregate(self, event_ms: str) -> str | None:
        """The timestamp of a window's elements aggregated at once, as a Spark SQL aggregate
        over their times `event_ms`; None for END_OF_WINDOW (the window's max timestamp)."""
        if self is TimestampCombiner.END_OF_WINDOW:
            return None
        return f"{self.merge}({event_ms})"

    @classmethod
    def parse(cls, text: str) -> "TimestampCombiner":
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown timestamp combiner {text!r} (expected one of: {names})") from None


class InvalidStrategy(ValueError):
    """A strategy that cannot run as defined (raised when it is defined, not when it runs)."""


@dataclass(frozen=True)
class WindowingStrategy:
    window_fn: WindowFn = field(default_factory=GlobalWindows)
    trigger: Trigger = field(default_factory=Default)
    accumulation: AccumulationMode = AccumulationMode.DISCARDING
    allowed_lateness: Duration = 0
    combiner: CombineFn = field(default_factory=SumFn)
    timestamp_combiner: TimestampCombiner = TimestampCombiner.END_OF_WINDOW

    def __post_init__(self) -> None:
        try:  # any of `parse_duration`'s forms: 86_400_000, "1d"
            object.__setattr__(self, "allowed_lateness", parse_duration(self.allowed_lateness, "allowed_lateness"))
        except ValueError as exc:
            raise InvalidStrategy(str(exc)) from None
        if self.accumulation is AccumulationMode.RETRACTING and not self.combiner.can_retract:
            raise InvalidStrategy(
                f"accumulation 'retracting' needs a combiner that can retract, and "
                f"{self.combiner.name!r} has no retract_input: its retractions could not be "
                "applied downstream; implement CombineFn.retract_input or use 'accumulating'"
            )

    def definition(self) -> dict[str, str]:
        """What a stage's stored state and pane history mean, as text: its window, trigger,
        accumulation, allowed lateness, combiner and timestamp combiner. State written under
        one definition cannot be carried on under another (a 1 h window's accumulator is not
        a 30 min window's), so runners record this with a stage's tables and compare it
        (`definition_changes`) before they carry a stage on."""
        combiner = self.combiner
        own_repr = type(combiner).__repr__ is not CombineFn.__repr__
        return {
            "window": self.window_fn.describe(),
            "trigger": self.trigger.describe(),
            "accumulation": self.accumulation.value,
            "allowed lateness": format_duration(self.allowed_lateness),
            "combiner": repr(combiner) if own_repr else combiner.name,
            "timestamp combiner": self.timestamp_combiner.value,
        }

    @property
    def takes_input_retractions(self) -> bool:
        """Whether a deleted or updated input row can be taken back out of this (first)
        stage's windows live, as an input retraction (`Element.retraction`): the combiner
        can uncombine; the windows do not merge (a delete can split a session, and a
        session's state keeps no element times to split it by); and a later pane still holds
        what the row added (accumulating), or discarding panes add up by sum (`sum`, `count`:
        a negative increment nets out; a multiset's increment after a firing never held the
        row). Otherwise the change is left for a backfill, and counted (docs/model.md)."""
        c, mode = self.combiner, self.accumulation
        return (c.can_retract and not self.window_fn.is_merging
                and (mode.accumulates or c.output_merge == "sum"))

    def gc_time(self, window: Window) -> Instant:
        """When the window's state is dropped: its end plus allowed lateness, capped at the
        end of time (so the global window is collected when the watermark reaches the end)."""
        return self.gc_time_of_end(window.end)

    def gc_time_of_end(self, end: Instant) -> Instant:
        """`gc_time` of a window that ends at `end` (a key's index keeps ends, not windows)."""
        return min(end + self.allowed_lateness, END_OF_TIME)

    def is_late(self, window: Window, watermark: Instant) -> bool:
        """Whether an element assigned to `window` now would be dropped as too late."""
        return self.gc_time(window) <= watermark

    def dropped_before(self, watermark: Instant) -> Instant | None:
        """Elements whose event time is before this are dropped as too late at `watermark`,
        whatever windows they are assigned to (those end at most `WindowFn.reach` after
        it); None when the reach is unknown or the watermark at either end of time."""
        reach = self.window_fn.reach
        if reach is None or watermark <= -END_OF_TIME or watermark >= END_OF_TIME:
            return None
        return watermark - self.allowed_lateness - reach

    def net_panes(self, panes: "list[Pane]") -> "Pane | None":
        """What one window's panes, in emission order, net to: its last pane, none when that
        is a retraction. Discarding panes add up: the total carries the merge of the panes'
        values (`CombineFn.output_merge`) and of their timestamps (`TimestampCombiner.merge`);
        discarding panes whose outputs do not merge leave the window at its last pane.
        The one rule of a window's total: batch finals, results rows and the results gate
        apply it (in Spark SQL: `spark.execute.output_merge.window_totals`)."""
        if not panes or panes[-1].retraction:
            return None
        if self.accumulation is not AccumulationMode.DISCARDING or self.combiner.output_merge is None:
            return panes[-1]
        kept = [p for p in panes if not p.retraction]
        merge = min if self.timestamp_combiner.merge == "min" else max
        return replace(panes[-1], value=self.combiner.merge_outputs([p.value for p in kept]),
                       timestamp=merge(p.timestamp for p in kept))

    def current_panes(self, panes: "Iterable[Pane]") -> "dict[tuple[Hashable, Window], Pane]":
        """The current results that `panes` (of any keys and windows, in emission order)
        leave: per key and window what its panes net to (`net_panes`), without the windows a
        later pane of the same key declared merged away (`Pane.replaces`), in every
        accumulation mode. A discarding window's total takes in the totals of the windows it
        merged away (`folds_merged_away`): their panes hold the part of its data that its own
        panes never repeat. The rule of a results table (in Spark SQL: `window_totals`)."""
        by_window: dict[tuple[Hashable, Window], list[Pane]] = {}
        last_at: dict[tuple[Hashable, Window], int] = {}  # where each window's last pane stands
        gone_at: dict[tuple[Hashable, Window], int] = {}  # where the last pane declaring it gone stands
        absorbed: dict[tuple[Hashable, Window], list[Window]] = {}  # windows each window's panes declared gone
        for n, p in enumerate(panes):
            by_window.setdefault((p.key, p.window), []).append(p)
            last_at[(p.key, p.window)] = n
            if not p.retraction:
                for w in p.replaces:
                    gone_at[(p.key, w)] = n
                    absorbed.setdefault((p.key, p.window), []).append(w)
        nets = {kw: self.net_panes(ps) for kw, ps in by_window.items()}
        if self.folds_merged_away:
            nets = self._folded(nets, absorbed)
        return {kw: net for kw, net in nets.items() if net is not None and gone_at.get(kw, -1) < last_at[kw]}

    @property
    def folds_merged_away(self) -> bool:
        """Whether a window's total takes in the totals of the windows merged into it: for
        discarding panes that add up (`CombineFn.output_merge`). A merged window's discarding
        panes hold only what no pane of its parts emitted (as in Beam: merging combines the
        parts' un-emitted state), so its total is its panes' and its parts' together;
        accumulating panes hold everything already."""
        return self.accumulation is AccumulationMode.DISCARDING and self.combiner.output_merge is not None

    def fold_totals(self, own: "Pane", parts: "Iterable[Pane]") -> "Pane":
        """Window `own`'s total (a net pane) with the totals `parts` of the windows merged
        into it: values merged by `CombineFn.output_merge`, timestamps by the timestamp
        combiner's merge (`merge_totals`); the metadata stays `own`'s."""
        parts = list(parts)
        if not parts:
            return own
        value, timestamp = self.merge_totals([(own.value, own.timestamp), *((p.value, p.timestamp) for p in parts)])
        return replace(own, value=value, timestamp=timestamp)

    def merge_totals(self, totals: "Iterable[tuple[Any, Any]]") -> "tuple[Any, Any]":
        """(value, timestamp) of a window whose parts' totals are `totals` ((value, timestamp)
        pairs; a None is no part): values by `CombineFn.output_merge`, timestamps by the
        timestamp combiner's merge."""
        pairs = list(totals)
        merge = min if self.timestamp_combiner.merge == "min" else max
        values = [v for v, _ in pairs if v is not None or self.combiner.output_merge != "sum"]
        stamps = [t for _, t in pairs if t is not None]
        return self.combiner.merge_outputs(values), (merge(stamps) if stamps else None)

    def _folded(self, nets: dict, absorbed: dict) -> dict:
        """`nets` with each window's total folded with those of the windows it absorbed."""
        return fold_merged_away(
            nets, lambda kw: [(kw[0], w) for w in absorbed.get(kw, ())],
            lambda own, parts: own if own is None else self.fold_totals(own, [p for p in parts if p is not None]))


_T = TypeVar("_T")
_W = TypeVar("_W", bound=Hashable)


def fold_merged_away(
    totals: "Mapping[_W, _T]", parts_of: "Callable[[_W], Iterable[_W]]", fold: "Callable[[_T, list[_T]], _T]",
) -> "dict[_W, _T]":
    """Every window's total folded with the folded totals of the windows merged into it
    (`parts_of`: the windows its panes declared merged away, `Pane.replaces`), through
    earlier merges too: a window is merged away once, so the windows form a forest and each
    part is folded into one total. Parts without a total of their own here are skipped.
    The one rule of `current_panes` and of its Spark SQL form (`window_totals`)."""
    done: dict = {}

    def total(w: "_W") -> "_T":
        if w not in done:
            done[w] = totals[w]  # a cycle (never in a model history) folds nothing twice
            done[w] = fold(totals[w], [total(p) for p in parts_of(w) if p in totals])
        return done[w]

    return {w: total(w) for w in totals}


def definition_changes(recorded: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """What differs between a recorded `WindowingStrategy.definition` and the current one,
    one phrase per part ("window FixedWindows(1h) -> FixedWindows(30m)"); none when equal.
    Parts only one side has (a build that records more, or less) are not compared."""
    parts = list(dict.fromkeys([*recorded, *current]))
    return [f"{part} {recorded[part]} -> {current[part]}"
            for part in parts if part in recorded and part in current and recorded[part] != current[part]]
