"""Combiner lifting (the paper's §2.2 incremental combining, Beam's combiner lifting): a
runner may reduce a step's elements to one pre-combined part per (window before merging,
addition or retraction) and hand the model those parts instead of the elements
(`KeyedWindowSet.add_combined`). FORMAT rule 3 makes this exact: a step's elements arrive
as one bundle, and triggers see the bundle once.

The rules stay here: a `WindowFn` gives its window assignment as SQL (`sql_window`), a
`CombineFn` its partial aggregate (`sql_partial`, `from_partial`), a `Trigger` says whether
counts and times are all it looks at (`summarizable`). `lifts` says when all of that holds;
otherwise a runner feeds elements. `combine_bundle` is the reduction in Python, the
meaning every SQL form must have (property tests hold them equal).
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, NamedTuple

from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import Instant
from dataflow_core.model.windows import AssignContext, Window


class Combined(NamedTuple):
    """One step's elements of one window (before merging), pre-combined: the combiner's
    accumulator of their values, how many there were and their least and greatest event
    time; additions and retractions come apart. (Immutable; a named tuple because a
    replay makes one per key, window and step.)"""

    window: Window
    acc: Any
    count: int  # type: ignore[assignment]  # how many values, not tuple.count
    earliest: Instant
    latest: Instant
    retraction: bool = False


def lifts(strategy: WindowingStrategy, exact_values: bool = True) -> bool:
    """Whether a runner may feed `strategy` pre-combined parts: one window per element from
    its time alone (not merging), a combiner with a SQL partial form (for inexact,
    floating-point values one that does not depend on the order of addition), and a
    trigger that only needs counts and times. Sessions are fed elements: a merge with a
    closed window inside a bundle depends on the order of the bundle's elements."""
    c = strategy.combiner
    return (
        not strategy.window_fn.is_merging
        and strategy.window_fn.sql_window("event_ms") is not None
        and c.sql_partial is not None
        and (exact_values or c.partial_exact_for_floats)
        and strategy.trigger.summarizable
    )


def combine_bundle(strategy: WindowingStrategy, key: Hashable, elements: Iterable[Any]) -> list[Combined]:
    """A bundle of `Element`s as pre-combined parts, in the order `add_combined` takes them
    (window end, start; additions before retractions)."""
    c = strategy.combiner
    got: dict[tuple[Window, bool], list] = {}
    for el in elements:
        (w,) = strategy.window_fn.assign(AssignContext(key, el.value, el.timestamp))
        slot = got.setdefault((w, el.retraction), [c.create_accumulator(), 0, el.timestamp, el.timestamp])
        slot[0] = c.add_input(slot[0], el.value)
        slot[1] += 1
        slot[2] = min(slot[2], el.timestamp)
        slot[3] = max(slot[3], el.timestamp)
    parts = [Combined(w, acc, n, lo, hi, r) for (w, r), (acc, n, lo, hi) in got.items()]
    return sorted(parts, key=lambda p: (p.window.end, p.window.start, p.retraction))
