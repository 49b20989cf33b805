"""The paper's batch execution (figure 10): every element delivered at once, then the
watermark moved to the end of time, so each window's last pane holds all of its data.

Two ways to the same final value per window: the general path runs the stage's strategy
key by key (`keyed_stage.run_stage`); the fast path compiles plain aggregations to Spark SQL from the
forms the model declares (`WindowFn.sql_windows` / `sql_session_gap`, `CombineFn.sql_output`,
`TimestampCombiner.sql_aggregate`), as combiner lifting does. A property test holds them
equal for every window function and combiner that declares its forms.
"""

from __future__ import annotations

import dataclasses

from typing import TYPE_CHECKING

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.watermarks import BEGINNING_OF_TIME
from dataflow_core.runners.schedule import Schedule, Step
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.execute.output_merge import discarding_merge, window_totals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FINAL_COLUMNS = ("window_start", "window_end", "value", "ts")
"""After the key columns: window bounds (ms; null for the global window), the window's
final value, and the timestamp its pane carries (ms; null for the global window)."""


def fast_path_applies(strategy: WindowingStrategy) -> bool:
    """Whether the model declares the SQL forms the fast path needs: the combiner's
    whole-window aggregate (`CombineFn.sql_output`) and the window function's assignment
    (`WindowFn.sql_windows`) or session gap (`WindowFn.sql_session_gap`); not discarding
    panes with LATEST timestamps (an empty on-time pane after early ones carries the
    window's end)."""
    discarding_latest = (
        strategy.accumulation is AccumulationMode.DISCARDING
        and strategy.timestamp_combiner is TimestampCombiner.LATEST
    )
    wfn = strategy.window_fn
    windows_in_sql = wfn.sql_windows("event_ms") is not None or wfn.sql_session_gap is not None
    return strategy.combiner.sql_output is not None and windows_in_sql and not discarding_latest


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
    if strategy.accumulation is AccumulationMode.DISCARDING and discarding_merge(strategy) is None:
        # outputs that do not merge: the window's final value is the aggregate of all its input
        strategy = dataclasses.replace(strategy, accumulation=AccumulationMode.ACCUMULATING)
    arrivals = elements.select(
        *key_columns, "value", "event_ms", "retraction",
        F.array(F.lit(0).cast("bigint")).alias("seq"), F.lit(now).cast("bigint").alias("at_ms"),
    )
    schedule = Schedule([Step((0,), now, END_OF_TIME)], BEGINNING_OF_TIME)
    out = run_stage(arrivals, strategy, schedule, KeyCodec(tuple(key_columns)), value_type)
    totals = window_totals(out.where("kind = 'pane'"), strategy, [*key_columns, "window_start", "window_end"], value_type)
    return totals.where(~F.col("is_retraction")).select(*key_columns, *FINAL_COLUMNS)


def _fast(elements, strategy, key_columns, value_type):
    """Each element's windows by `sql_windows` (exploded), or sessions; then per key and
    window the combiner's `sql_output` and the timestamp combiner's `sql_aggregate` (none:
    the window's max timestamp, null for the global window, which ends at the end of time)."""
    from pyspark.sql import functions as F

    wfn = strategy.window_fn
    value = F.expr(strategy.combiner.sql_output).cast(value_type).alias("value")  # type: ignore[arg-type]
    ts_sql = strategy.timestamp_combiner.sql_aggregate("event_ms")
    ts = (F.lit(None) if ts_sql is None else F.expr(ts_sql)).cast("bigint").alias("ts")
    if wfn.sql_session_gap is not None:
        out = _sessions(elements, wfn.sql_session_gap, key_columns, value, ts)
    else:
        framed = elements.withColumn("_w", F.explode(F.expr(wfn.sql_windows("event_ms"))))  # type: ignore[arg-type]
        framed = framed.withColumn("window_start", F.col("_w.start")).withColumn("window_end", F.col("_w.end"))
        out = framed.groupBy(*key_columns, "window_start", "window_end").agg(value, ts)
    out = out.withColumn("ts", F.coalesce(F.col("ts"), F.col("window_end") - F.lit(1)))
    return out.select(*key_columns, *FINAL_COLUMNS)


def _sessions(elements, gap, key_columns, value, ts):
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

    session = F.session_window(F.timestamp_millis("event_ms"), f"{gap - 1} milliseconds").alias("_s")
    return elements.groupBy(*key_columns, session).agg(
        value, ts, F.min("event_ms").alias("window_start"), (F.max("event_ms") + F.lit(gap)).alias("window_end"))
