"""Sessions of ad views per user and ad, and per ad the number of short sessions (the
paper's retraction example): when a late view merges two sessions, stage 1 retracts both
and stage 2's count drops, so it stays exactly right."""

from typing import Any, Hashable, Iterable

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime, Repeatedly
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import GlobalWindows, Sessions
from dataflow_core.pipelines import PipelineSpec, StageSpec, register

GAP = parse_duration("30m")
SHORT = parse_duration("5m")


def short_session_of_ad(pane: Pane) -> Iterable[tuple[Hashable, Any]]:
    """A session is [first view, last view + gap): shorter than 5 minutes counts for its ad."""
    user_id, ad_id = pane.key
    length = pane.window.end - pane.window.start - GAP
    return [(ad_id, 1)] if length < SHORT else []


AD_SESSIONS = register(
    PipelineSpec(
        name="ad_sessions",
        description="sessions of ad views per user and ad; short sessions per ad, kept right by retractions",
        input_table="video_events",
        partition_column="event_date",
        quality_suite="video_events",
        where="ad_id IS NOT NULL",
        key={"user_id": "user_id", "ad_id": "ad_id"},
        value="1",
        watermark=lambda: HeuristicWatermark(bound=parse_duration("2m")),
        stages=(
            StageSpec(
                output="ad_sessions",
                key_columns=("user_id", "ad_id"),
                value_type="bigint",
                strategy=WindowingStrategy(
                    window_fn=Sessions(GAP),
                    trigger=AfterWatermark(
                        early=AlignedProcessingTime(parse_duration("1m")), late=AfterCount(1)
                    ),
                    accumulation=AccumulationMode.RETRACTING,
                    allowed_lateness=parse_duration("1d"),
                    combiner=CountFn(),
                ),
            ),
            StageSpec(
                output="ad_short_sessions",
                key_columns=("ad_id",),
                value_type="bigint",
                input_type="bigint",
                from_upstream=short_session_of_ad,
                strategy=WindowingStrategy(
                    window_fn=GlobalWindows(),
                    trigger=Repeatedly(AfterCount(1)),
                    accumulation=AccumulationMode.ACCUMULATING,
                    combiner=SumFn(),
                ),
            ),
        ),
    )
)
