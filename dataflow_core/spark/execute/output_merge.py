"""A combiner's declared `output_merge` (how a window's discarding pane outputs add up to
its total) in Spark SQL: as an aggregate over panes, and of a stored total and a new one."""

from __future__ import annotations

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.strategy import WindowingStrategy

_AGGREGATE = {"sum": "sum", "min": "min", "max": "max"}
_PAIR = {"sum": "{a} + {b}", "min": "least({a}, {b})", "max": "greatest({a}, {b})"}


def discarding_merge(strategy: WindowingStrategy) -> str | None:
    """The merge of a discarding strategy's pane outputs; None when panes accumulate, or when
    they are discarding panes whose outputs do not merge (a mean's): a window then stands at
    its latest pane (docs/model.md, "Discarding panes that do not merge")."""
    if strategy.accumulation is not AccumulationMode.DISCARDING:
        return None
    return strategy.combiner.output_merge if strategy.combiner.output_merge in _AGGREGATE else None


def merge_aggregate(merge: str, column: str) -> str:
    """SQL aggregating `column` over a window's panes."""
    return f"{_AGGREGATE[merge]}({column})"


def merge_pair(merge: str, a: str, b: str) -> str:
    """SQL merging two totals."""
    return _PAIR[merge].format(a=a, b=b)
