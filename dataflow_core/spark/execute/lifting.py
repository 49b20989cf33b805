"""Combiner lifting on Spark: before grouping by key, Spark SQL reduces a stage's arrivals
to one row per (key, window before merging, step, addition or retraction), so executors'
Python sees windows rather than events, whose objects would cost more than the model's
work on them (the paper's §2.2, Beam's combiner lifting).

Every rule comes from the model: the window from `WindowFn.sql_window`, the partial
aggregate from `CombineFn.sql_partial`, whether a strategy may be lifted from
`model.lifting.lifts`; executors turn each row back into a `model.lifting.Combined`
(`CombineFn.from_partial`) for `KeyedWindowSet.add_combined`. Late parts are dropped and
counted by the model, as elements are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dataflow_core.model.lifting import Combined, lifts
from dataflow_core.model.pane_codec import window_of
from dataflow_core.model.strategy import WindowingStrategy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LIFTED_COLUMNS = ("window_start", "window_end", "partial", "n", "lo", "hi", "retraction", "seq", "at_ms")
"""After the key columns: a lifted arrival row (`lo`/`hi`: least and greatest event time)."""

_INEXACT = ("float", "double")


def can_lift(arrivals: "DataFrame", strategy: WindowingStrategy, decodes: bool = False) -> bool:
    """Whether a stage's arrivals may be lifted: the strategy `lifts` for the value column's
    type (floating-point values only where the partial does not depend on the order of
    addition) and values are taken as they are (no decoding codec)."""
    exact = arrivals.schema["value"].dataType.typeName() not in _INEXACT
    return not decodes and lifts(strategy, exact_values=exact)


def lift_arrivals(arrivals: "DataFrame", strategy: WindowingStrategy, key_columns: tuple[str, ...]) -> "DataFrame":
    """Arrivals (key columns, `value`, `event_ms`, `retraction`, `seq`, `at_ms`) reduced to
    `LIFTED_COLUMNS` rows; the strategy must `lifts`."""
    from pyspark.sql import functions as F

    start, end = strategy.window_fn.sql_window("event_ms")  # type: ignore[misc]
    partial = F.struct(*[F.expr(sql).alias(name) for name, sql in strategy.combiner.sql_partial])  # type: ignore[union-attr]
    return (
        arrivals.withColumn("window_start", F.expr(start)).withColumn("window_end", F.expr(end))
        .groupBy(*key_columns, "seq", "at_ms", "window_start", "window_end", "retraction")
        .agg(partial.alias("partial"), F.count(F.lit(1)).alias("n"),
             F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi"))
        .select(*key_columns, *LIFTED_COLUMNS)
    )


def combined_by_seq(table: Any, strategy: WindowingStrategy) -> dict[tuple, tuple[int, list[Combined]]]:
    """A key's lifted rows (an Arrow table) as its bundles: step -> (time, parts in the
    order `add_combined` takes them)."""
    cols = {name: table.column(name).to_pylist() for name in LIFTED_COLUMNS}
    from_partial = strategy.combiner.from_partial
    by_seq: dict[tuple, tuple[int, list[Combined]]] = {}
    windows: dict[tuple, Any] = {}  # one object per window: a key's rows name few windows, many times
    for start, end, partial, n, lo, hi, retraction, seq, at in zip(*(cols[c] for c in LIFTED_COLUMNS)):
        slot = by_seq.setdefault(tuple(seq), (at, []))
        w = windows.get((start, end))
        if w is None:
            w = windows[start, end] = window_of(start, end)
        slot[1].append(Combined(w, from_partial(partial), n, lo, hi, bool(retraction)))
    for _, parts in by_seq.values():
        parts.sort(key=lambda p: (p.window.end, p.window.start, p.retraction))
    return by_seq


def is_lifted(table: Any) -> bool:
    return "partial" in table.column_names


__all__ = ["LIFTED_COLUMNS", "can_lift", "combined_by_seq", "is_lifted", "lift_arrivals"]
