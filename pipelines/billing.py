"""Ad billing (the paper's motivating case): per ad, the watch seconds of its views in
hourly event-time windows; early estimates every 10 minutes of processing time, one
on-time figure when the watermark passes the hour, then a correction per late view."""

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register

BILLING = register(
    PipelineSpec(
        name="billing",
        description="watch seconds per ad and event-time hour: early, on-time and late figures",
        input_table="video_events",
        partition_column="event_date",
        quality_suite="video_events",
        where="ad_id IS NOT NULL",  # content views are not billing input (nor bad rows)
        key={"ad_id": "ad_id"},
        value="CAST(watch_seconds AS DECIMAL(18,3))",  # exact sums, in any order
        watermark=lambda: HeuristicWatermark(bound=parse_duration("2m")),
        stages=(
            StageSpec(
                output="billing",
                key_columns=("ad_id",),
                value_type="decimal(28,3)",
                strategy=WindowingStrategy(
                    window_fn=FixedWindows(parse_duration("1h")),
                    trigger=AfterWatermark(
                        early=AlignedProcessingTime(parse_duration("10m")), late=AfterCount(1)
                    ),
                    accumulation=AccumulationMode.ACCUMULATING,
                    allowed_lateness=parse_duration("1d"),
                    combiner=SumFn(),
                ),
            ),
        ),
    )
)
