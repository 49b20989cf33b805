"""The paper's batch execution (figure 10): every element delivered at once, then the
watermark moved to the end of time, so each window's last pane holds all of its data.

Two ways to the same final value per window: the general path runs the stage's strategy
key by key (`keyed_stage.run_stage`); the fast path compiles plain aggregations (built-in
combiners over fixed, sliding, session or global windows) to Spark SQL. A property test
holds them equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, MaxFn, MinFn, SumFn
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.watermarks import BEGINNING_OF_TIME
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.runners.keyed import Schedule, Step
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.execute.output_merge import window_totals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FINAL_COLUMNS = ("window_start", "window_end", "value", "ts")
"""After the key columns: window bounds (ms; null for the global window), the window's
final value, and the timestamp its pane carries (ms; null for the global window)."""

_FAST_COMBINERS = (SumFn, CountFn, MinFn, MaxFn)
_FAST_WINDOWS = (FixedWindows, SlidingWindows, Sessions, GlobalWindows)


def fast_path_applies(strategy: WindowingStrategy) -> bool:
    """Built-in combiners over built-in windows; not discarding panes with LATEST
    timestamps (an empty on-time pane after early ones carries the window's end)."""
    discarding_latest = (
        strategy.accumulation is AccumulationMode.DISCARDING
        and strategy.timestamp_combiner is TimestampCombiner.LATEST
    )
    return (
        type(strategy.combiner) in _FAST_COMBINERS
        and type(strategy.window_fn) in _FAST_WINDOWS
        and not discarding_latest
    )


def final_values(
    elements: "DataFrame", strategy: WindowingStrategy, key_columns: tuple[str, ...], value_type: str,
    now: Instant, fast: bool | None = None,
) -> "DataFrame":
    """Per key and window, the final value; `elements` has the key columns, `value`,
    `event_ms` and optionally `retraction`. `fast` None picks the fast path when it applies."""
    use_fast = fast_path_applies(strategy) if fast is None else fast
    if use_fast and not fast_path_applies(strategy):
        raise ValueError(f"no fast path for {strategy.combiner.name} over {strategy.window_fn.describe()}")
    if use_fast and "retraction" not in elements.columns:
        return _fast(elements, strategy, key_columns, value_type)
    return _general(elements, strategy, key_columns, value_type, now)


def _general(elements, strategy, key_columns, value_type, now):
    from pyspark.sql import functions as F

    if "retraction" not in elements.columns:
        elements = elements.withColumn("retraction", F.lit(False))
    arrivals = elements.select(
        *key_columns, "value", "event_ms", "retraction",
        F.array(F.lit(0).cast("bigint")).alias("seq"), F.lit(now).cast("bigint").alias("at_ms"),
    )
    schedule = Schedule([Step((0,), now, END_OF_TIME)], BEGINNING_OF_TIME)
    out = run_stage(arrivals, strategy, schedule, KeyCodec(tuple(key_columns)), value_type)
    totals = window_totals(out.where("kind = 'pane'"), strategy, [*key_columns, "window_start", "window_end"], value_type)
    return totals.where(~F.col("is_retraction")).select(*key_columns, *FINAL_COLUMNS)


def _fast(elements, strategy, key_columns, value_type):
    from pyspark.sql import functions as F

    wfn = strategy.window_fn
    t = F.col("event_ms")
    if isinstance(wfn, FixedWindows):
        start = t - F.pmod(t - F.lit(wfn.offset), F.lit(wfn.size))
        framed = elements.withColumn("window_start", start).withColumn("window_end", start + F.lit(wfn.size))
    elif isinstance(wfn, SlidingWindows):
        last_start = t - F.pmod(t - F.lit(wfn.offset), F.lit(wfn.period))
        count = -(-wfn.size // wfn.period)
        starts = F.sequence(last_start - F.lit((count - 1) * wfn.period), last_start, F.lit(wfn.period))
        framed = (
            elements.withColumn("window_start", F.explode(starts))
            .where(F.col("window_start") + F.lit(wfn.size) > t)
            .withColumn("window_end", F.col("window_start") + F.lit(wfn.size))
        )
    elif isinstance(wfn, Sessions):
        return _fast_sessions(elements, strategy, key_columns, value_type)
    else:  # global
        framed = elements.withColumn("window_start", F.lit(None).cast("bigint")).withColumn(
            "window_end", F.lit(None).cast("bigint")
        )
    return _aggregate(framed, strategy, key_columns, value_type)


def _fast_sessions(elements, strategy, key_columns, value_type):
    """Spark's `session_window` also merges sessions that only touch (an event exactly one
    gap after the last one joins its session), while the model merges `[t, t+gap)` windows
    only when they overlap. A gap one millisecond shorter gives the model's rule on integer
    milliseconds (the next event joins iff it is before the last one plus the gap).

    The bounds come from the session's first and last element (`[first, last + gap)`), not
    from the `session_window` column: Spark pushes a filter on that grouping column below
    the merging of sessions (it filters each element's own `[t, t+gap)` window), so the
    backfill's filter on where a window starts would cut a session that began before the
    range down to its elements inside the range."""
    from pyspark.sql import functions as F

    gap = strategy.window_fn.gap
    session = F.session_window(F.timestamp_millis("event_ms"), f"{gap - 1} milliseconds").alias("_s")
    value, ts = _aggregates(strategy)
    if strategy.timestamp_combiner is TimestampCombiner.END_OF_WINDOW:
        ts = F.lit(None)
    out = elements.groupBy(*key_columns, session).agg(
        value.cast(value_type).alias("value"), ts.alias("ts"),
        F.min("event_ms").alias("window_start"), (F.max("event_ms") + F.lit(gap)).alias("window_end"))
    out = out.withColumn("ts", F.coalesce(F.col("ts").cast("bigint"), F.col("window_end") - F.lit(1)))
    return out.select(*key_columns, *FINAL_COLUMNS)


def _aggregates(strategy):
    from pyspark.sql import functions as F

    value = {
        SumFn: F.sum("value"),
        CountFn: F.count(F.lit(1)),
        MinFn: F.min("value"),
        MaxFn: F.max("value"),
    }[type(strategy.combiner)]
    ts = {
        TimestampCombiner.EARLIEST: F.min("event_ms"),
        TimestampCombiner.LATEST: F.max("event_ms"),
    }.get(strategy.timestamp_combiner, F.max("window_end") - F.lit(1))
    return value, ts


def _aggregate(framed, strategy, key_columns, value_type):
    from pyspark.sql import functions as F

    value, ts = _aggregates(strategy)
    tc = strategy.timestamp_combiner
    out = framed.groupBy(*key_columns, "window_start", "window_end").agg(
        value.cast(value_type).alias("value"), ts.alias("ts")
    )
    if isinstance(strategy.window_fn, GlobalWindows) and tc is TimestampCombiner.END_OF_WINDOW:
        out = out.withColumn("ts", F.lit(None).cast("bigint"))  # the end of time
    return out.select(*key_columns, *FINAL_COLUMNS)
