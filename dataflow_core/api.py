"""Everything a pipeline definition needs, in one import: the one way to define a pipeline.

>>> from dataflow_core.api import AfterCount, AfterWatermark, FixedWindows, SumFn, pipeline, stage
>>> shop_revenue = pipeline(
...     "shop_revenue", input_table="shop_orders", key="shop_id", value="amount",
...     event_time="ordered_at", ingest_time="received_at", event_id="order_id",
...     stages=[stage("shop_revenue", FixedWindows("1h"), SumFn(),
...                   trigger=AfterWatermark(late=AfterCount(1)), accumulation="accumulating",
...                   allowed_lateness="1d")],
... )
>>> print("\\n".join(shop_revenue.describe()))
shop_revenue
  input: table shop_orders, key shop_id, value amount, watermark HeuristicWatermark(bound=2m)
  stage shop_revenue (tables shop_revenue_panes, shop_revenue)
    key shop_id; what sum; where FixedWindows(1h); when AfterWatermark(late=AfterCount(1)), allowed lateness 1d; how accumulating

The key is named once (the pipeline's `key`, which is the first stage's key). Every duration
takes the same forms (`model.time.parse_duration`): milliseconds as a number, or text such as
"90s", "10m", "1h", "1d". A stage with a trigger of its own names its accumulation mode, as
in Beam; with the default trigger it is discarding. Value types are model terms (`int`,
`float`, `Decimal`, ...) or left out and inferred from the input table; nothing defaults to
the sample data. `dataflow check --pipeline NAME` checks a pipeline against its table before
any Spark starts (docs/write-your-own-pipeline.md).

Exported: every built-in trigger and every watermark estimator the Spark runners run, the
window functions and combiners, and the base classes for one's own (`WindowFn`, `Trigger`,
`CombineFn`). `stage` and `pipeline` build the `StageSpec` and `PipelineSpec` the runners
take; those types are exported for annotations, not as a second way to define a pipeline.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import (
    CombineFn, CountFn, DistinctCountFn, MaxFn, MeanFn, MinFn, SumFn, ToListFn,
)
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.pipeline import PaneMapper
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import Duration, parse_duration
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.triggers import (
    AfterAll, AfterCount, AfterEach, AfterFirst, AfterPercentileWatermark, AfterProcessingTime, AfterWatermark,
    AlignedProcessingTime, Default, Never, OrFinally, RepeatUntil, Repeatedly,
)
from dataflow_core.model.watermarks import (
    HeuristicWatermark, PercentileWatermark, PerfectWatermark, WatermarkEstimator,
)
from dataflow_core.model.windows import (
    FixedWindows, GlobalWindows, IntervalWindow, Sessions, SlidingWindows, Window, WindowFn,
)
from dataflow_core.pipelines import PipelineSpec, StageSpec, register

MODES = ", ".join(f'"{m.value}"' for m in AccumulationMode)


def duration(value: "Duration | str") -> Duration:
    """Milliseconds, from any of the forms every duration argument takes (`parse_duration`)."""
    return parse_duration(value, "duration")


def seconds(n: float) -> Duration:
    return _scaled(n, 1000, "seconds")


def minutes(n: float) -> Duration:
    return _scaled(n, 60_000, "minutes")


def hours(n: float) -> Duration:
    return _scaled(n, 3_600_000, "hours")


def days(n: float) -> Duration:
    return _scaled(n, 86_400_000, "days")


def _scaled(n: float, unit: int, name: str) -> Duration:
    """`n` units in milliseconds (to the nearest), checked as every duration is."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        raise ValueError(f"{name}({n!r}): give a number")
    try:
        return parse_duration(round(n * unit))
    except (ValueError, OverflowError):
        raise ValueError(f"{name}({n!r}) is no duration (a duration is zero or more)") from None


def stage(
    output: str, window: WindowFn, combiner: CombineFn, *, trigger: Trigger | None = None,
    accumulation: "AccumulationMode | str | None" = None,
    allowed_lateness: "Duration | str" = 0,
    timestamp_combiner: "TimestampCombiner | str" = TimestampCombiner.END_OF_WINDOW,
    value_type: Any = None, key_columns: Sequence[str] = (), from_upstream: PaneMapper | None = None,
    input_type: Any = None, description: str = "",
) -> StageSpec:
    """One grouping stage: where (`window`), what (`combiner`), when (`trigger`, default the
    watermark's: `Default()`), how (`accumulation`: "discarding", "accumulating" or
    "retracting"; required with a trigger of one's own, as Beam requires it, since an early or
    late pane means something else in each mode; discarding with the default trigger).
    The first stage's key is the pipeline's; a later stage names `key_columns` and maps
    each upstream pane to (key, value) pairs with `from_upstream`."""
    try:
        mode = _mode(output, trigger, accumulation)
        ts = (timestamp_combiner if isinstance(timestamp_combiner, TimestampCombiner)
              else TimestampCombiner.parse(timestamp_combiner))
        strategy = WindowingStrategy(window_fn=window, trigger=trigger or Default(), accumulation=mode,
                                     allowed_lateness=allowed_lateness, combiner=combiner, timestamp_combiner=ts)
    except ValueError as exc:
        raise DataflowError(f"stage {output!r}: {exc}") from None
    return StageSpec(output, strategy, tuple(key_columns), value_type, from_upstream, input_type, description)


def _mode(output: str, trigger: Trigger | None, accumulation: "AccumulationMode | str | None") -> AccumulationMode:
    """The stage's accumulation mode: given, or discarding under the default trigger."""
    if isinstance(accumulation, AccumulationMode):
        return accumulation
    if accumulation is not None:
        return AccumulationMode.parse(accumulation)
    if trigger is None or trigger == Default():
        return AccumulationMode.DISCARDING
    raise DataflowError(
        f"stage {output!r}: trigger {trigger.describe()} needs an accumulation mode: give accumulation= one of {MODES}"
    )


def pipeline(name: str, *, input_table: str, key: Any, value: str, stages: Sequence[StageSpec],
             watermark: Any = None, **settings: Any) -> PipelineSpec:
    """Define and register a pipeline (`PipelineSpec`'s fields: `where`, `event_time`,
    `ingest_time`, `event_id`, `partition_column`, `quality_suite`, `max_skew`,
    `max_duplicate_share`, `description`); `watermark` defaults to a heuristic one trailing the latest event time
    by two minutes."""
    estimator = watermark if watermark is not None else HeuristicWatermark(bound="2m")
    return register(PipelineSpec(name=name, input_table=input_table, key=key, value=value, stages=tuple(stages),
                                 watermark=estimator, **settings))


TRIGGERS = (
    "AfterAll", "AfterCount", "AfterEach", "AfterFirst", "AfterPercentileWatermark", "AfterProcessingTime",
    "AfterWatermark", "AlignedProcessingTime", "Default", "Never", "OrFinally", "RepeatUntil", "Repeatedly",
)
"""Every built-in trigger: each runs on the Spark runners (tests/core/test_api.py holds each to a
conformance case the Spark runner replays)."""

ESTIMATORS = ("HeuristicWatermark", "PercentileWatermark", "PerfectWatermark")
"""The watermark estimators the Spark runners feed (not `SourceProgressWatermark`: no Spark
source reports per-partition progress)."""

__all__ = [
    *TRIGGERS, *ESTIMATORS,
    "AccumulationMode", "CombineFn", "CountFn", "Decimal", "DistinctCountFn", "Duration", "FixedWindows",
    "GlobalWindows", "IntervalWindow", "MaxFn", "MeanFn", "MinFn", "Pane", "PaneMapper", "PaneTiming",
    "PipelineSpec", "Sessions", "SlidingWindows", "StageSpec", "SumFn", "TimestampCombiner", "ToListFn", "Trigger",
    "WatermarkEstimator", "Window", "WindowFn", "days", "duration", "hours", "minutes", "pipeline", "seconds",
    "stage",
]
