"""Sample input data: a video platform's content and ad views with realistic disorder
(late, duplicated and malformed rows), deterministic for a seed. See docs/data.md.

The Spark-based generator is imported on first use, so that the `dataflow` command line
(which imports `config` for its options) starts without loading PySpark.
"""

from __future__ import annotations

import importlib
from typing import Any

from dataflow_core.sample.config import SampleConfig, parse_start

_FROM_GENERATOR = ("COLUMNS", "DEFECTS", "DEVICES", "KINDS", "MOBILE_DEVICES", "count_by_kind", "generate_events")

__all__ = ["SampleConfig", "parse_start", *_FROM_GENERATOR]


def __getattr__(name: str) -> Any:
    if name in _FROM_GENERATOR:
        return getattr(importlib.import_module("dataflow_core.sample.video_events"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
