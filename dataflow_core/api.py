"""Everything a pipeline definition needs, in one import:

    from dataflow_core.api import FixedWindows, SumFn, AfterWatermark, AfterCount, pipeline, stage

    pipeline(
        "shop_revenue", input_table="shop_orders", key="shop_id", value="amount",
        event_time="ordered_at", ingest_time="received_at", event_id="order_id",
        stages=[stage("shop_revenue", FixedWindows(hours(1)), SumFn(),
                      trigger=AfterWatermark(late=AfterCount(1)), allowed_lateness="1d")],
    )

The key is named once (the pipeline's `key`, which is the first stage's key); value types
are model terms (`int`, `float`, `Decimal`, ...) or left out and inferred from the input
table; nothing defaults to the sample data. `dataflow check --pipeline NAME` checks a
pipeline against its table before any Spark starts (docs/write-your-own-pipeline.md).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Sequence

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
    AfterAll, AfterCount, AfterEach, AfterFirst, AfterProcessingTime, AfterWatermark, AlignedProcessingTime,
    Default, Never, OrFinally, Repeatedly,
)
from dataflow_core.model.watermarks import (
    HeuristicWatermark, PercentileWatermark, PerfectWatermark, WatermarkEstimator,
)
from dataflow_core.model.windows import (
    FixedWindows, GlobalWindows, IntervalWindow, Sessions, SlidingWindows, Window, WindowFn,
)
from dataflow_core.pipelines import PipelineSpec, StageSpec, register


def duration(value: "Duration | str") -> Duration:
    """Milliseconds, from a number of them or text such as "90s", "10m", "1h", "1d"."""
    return parse_duration(value) if isinstance(value, str) else int(value)


def seconds(n: float) -> Duration:
    return int(n * 1000)


def minutes(n: float) -> Duration:
    return int(n * 60_000)


def hours(n: float) -> Duration:
    return int(n * 3_600_000)


def days(n: float) -> Duration:
    return int(n * 86_400_000)


def stage(
    output: str, window: WindowFn, combiner: CombineFn, *, trigger: Trigger | None = None,
    accumulation: "AccumulationMode | str" = AccumulationMode.ACCUMULATING,
    allowed_lateness: "Duration | str" = 0,
    timestamp_combiner: "TimestampCombiner | str" = TimestampCombiner.END_OF_WINDOW,
    value_type: Any = None, key_columns: Sequence[str] = (), from_upstream: PaneMapper | None = None,
    input_type: Any = None, description: str = "",
) -> StageSpec:
    """One grouping stage: where (`window`), what (`combiner`), when (`trigger`, default the
    watermark's), how (`accumulation`: "discarding", "accumulating" or "retracting").
    The first stage's key is the pipeline's; a later stage names `key_columns` and maps
    each upstream pane to (key, value) pairs with `from_upstream`."""
    mode = accumulation if isinstance(accumulation, AccumulationMode) else AccumulationMode.parse(accumulation)
    ts = (timestamp_combiner if isinstance(timestamp_combiner, TimestampCombiner)
          else TimestampCombiner.parse(timestamp_combiner))
    strategy = WindowingStrategy(window_fn=window, trigger=trigger or Default(), accumulation=mode,
                                 allowed_lateness=duration(allowed_lateness), combiner=combiner,
                                 timestamp_combiner=ts)
    return StageSpec(output, strategy, tuple(key_columns), value_type, from_upstream, input_type, description)


def pipeline(name: str, *, input_table: str, key: Any, value: str, stages: Sequence[StageSpec],
             watermark: Any = None, **settings: Any) -> PipelineSpec:
    """Define and register a pipeline (`PipelineSpec`'s fields; `watermark` defaults to a
    heuristic one trailing the latest event time by two minutes)."""
    estimator = watermark if watermark is not None else HeuristicWatermark(bound=minutes(2))
    return register(PipelineSpec(name=name, input_table=input_table, key=key, value=value, stages=tuple(stages),
                                 watermark=estimator, **settings))


__all__ = [
    "AccumulationMode", "AfterAll", "AfterCount", "AfterEach", "AfterFirst", "AfterProcessingTime",
    "AfterWatermark", "AlignedProcessingTime", "CombineFn", "CountFn", "Decimal", "Default", "DistinctCountFn",
    "Duration", "FixedWindows", "GlobalWindows", "HeuristicWatermark", "IntervalWindow", "MaxFn", "MeanFn",
    "MinFn", "Never", "OrFinally", "Pane", "PaneMapper", "PaneTiming", "PercentileWatermark", "PerfectWatermark",
    "PipelineSpec", "Repeatedly", "Sessions", "SlidingWindows", "StageSpec", "SumFn", "TimestampCombiner",
    "ToListFn", "Trigger", "WatermarkEstimator", "Window", "WindowFn", "WindowingStrategy", "days", "duration",
    "hours", "minutes", "pipeline", "register", "seconds", "stage",
]
