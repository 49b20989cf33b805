"""Sessions of ad views per user and ad, and per ad the number of short sessions (the
paper's retraction example): when a late view merges two sessions, stage 1 retracts both
and stage 2's count drops, so it stays exactly right."""

from typing import Any, Hashable, Iterable

from dataflow_core.api import (
    AfterCount, AfterWatermark, AlignedProcessingTime, CountFn, GlobalWindows, HeuristicWatermark, Pane, Repeatedly,
    Sessions, SumFn, duration, pipeline, stage,
)

GAP = duration("30m")
SHORT = duration("5m")


def short_session_of_ad(pane: Pane) -> Iterable[tuple[Hashable, Any]]:
    """A session is [first view, last view + gap): shorter than 5 minutes counts for its ad."""
    user_id, ad_id = pane.key
    length = pane.window.end - pane.window.start - GAP
    return [(ad_id, 1)] if length < SHORT else []


AD_SESSIONS = pipeline(
    "ad_sessions",
    description="sessions of ad views per user and ad; short sessions per ad, kept right by retractions",
    input_table="video_events",
    partition_column="event_date",
    quality_suite="video_events",
    where="ad_id IS NOT NULL",
    max_duplicate_share=0.25,  # its live views arrive twice up to 20 % of a batch (the demo's)
    key=("user_id", "ad_id"),
    value="1",
    watermark=HeuristicWatermark(bound="2m"),
    stages=[
        stage(
            "ad_sessions", Sessions(GAP), CountFn(),
            trigger=AfterWatermark(early=AlignedProcessingTime("1m"), late=AfterCount(1)),
            accumulation="retracting", allowed_lateness="1d", value_type="bigint",
        ),
        stage(
            "ad_short_sessions", GlobalWindows(), SumFn(),
            trigger=Repeatedly(AfterCount(1)), accumulation="accumulating",
            key_columns=("ad_id",), from_upstream=short_session_of_ad, input_type="bigint", value_type="bigint",
        ),
    ],
)
