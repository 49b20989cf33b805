"""Sample input data: a video platform's content and ad views with realistic disorder
(late, duplicated and malformed rows), deterministic for a seed. See docs/data.md."""

from dataflow_core.sample.config import SampleConfig, parse_start
from dataflow_core.sample.video_events import (
    COLUMNS,
    DEFECTS,
    DEVICES,
    KINDS,
    MOBILE_DEVICES,
    count_by_kind,
    generate_events,
)

__all__ = [
    "COLUMNS",
    "DEFECTS",
    "DEVICES",
    "KINDS",
    "MOBILE_DEVICES",
    "SampleConfig",
    "count_by_kind",
    "generate_events",
    "parse_start",
]
