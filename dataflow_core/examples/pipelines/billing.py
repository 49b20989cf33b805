"""Ad billing (the paper's motivating case): per ad, the watch seconds of its views in
hourly event-time windows; early estimates every 10 minutes of processing time, one
on-time figure when the watermark passes the hour, then a correction per late view."""

from dataflow_core.api import (
    AfterCount, AfterWatermark, AlignedProcessingTime, FixedWindows, HeuristicWatermark, SumFn, pipeline, stage,
)

BILLING = pipeline(
    "billing",
    description="watch seconds per ad and event-time hour: early, on-time and late figures",
    input_table="video_events",
    partition_column="event_date",
    quality_suite="video_events",
    where="ad_id IS NOT NULL",  # content views are not billing input (nor bad rows)
    key="ad_id",
    value="CAST(watch_seconds AS DECIMAL(18,3))",  # exact sums, in any order
    watermark=HeuristicWatermark(bound="2m"),
    stages=[
        stage(
            "billing", FixedWindows("1h"), SumFn(),
            trigger=AfterWatermark(early=AlignedProcessingTime("10m"), late=AfterCount(1)),
            accumulation="accumulating", allowed_lateness="1d", value_type="decimal(28,3)",
        ),
    ],
)
