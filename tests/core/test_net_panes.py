"""The one rule of what a window's panes net to (`WindowingStrategy.net_panes`), and the
model's rules that the gates and runners ask instead of restating them."""

from __future__ import annotations

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.pane_codec import pane_from_row, standing_flags
from dataflow_core.model.panes import Pane, PaneTiming, pane_breaks
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import is_due
from dataflow_core.model.watermarks import advanced
from dataflow_core.model.windows import FixedWindows, GlobalWindows, IntervalWindow

W = IntervalWindow(0, 1000)


class MySum(SumFn):
    """A user's sum: nets, and takes the fast path, as SumFn does."""


def pane(value, index, timing=PaneTiming.EARLY, ts=999, emitted=0, retraction=False, on_time=None):
    return Pane("k", W, value, ts, timing, index, on_time, index == 0, False, emitted, retraction)


def test_discarding_panes_merge_by_output_merge_not_by_name():
    strategy = WindowingStrategy(FixedWindows(1000), accumulation=AccumulationMode.DISCARDING, combiner=MySum(),
                                 timestamp_combiner=TimestampCombiner.EARLIEST)
    total = strategy.net_panes([pane(2, 0, ts=10, emitted=1), pane(3, 1, PaneTiming.ON_TIME, ts=5, emitted=2, on_time=0)])
    assert (total.value, total.timestamp, total.index) == (5, 5, 1)
    assert MySum.sql_output == "sum(value)"


def test_the_last_pane_stands_and_a_last_retraction_nets_to_nothing():
    strategy = WindowingStrategy(GlobalWindows(), accumulation=AccumulationMode.RETRACTING, combiner=CountFn())
    first = pane(2, 0, emitted=1)
    assert strategy.net_panes([first]) is first
    assert strategy.net_panes([first, first.retracted_at(2)]) is None
    assert strategy.net_panes([]) is None


def test_each_broken_rule_is_named_on_the_pane_that_breaks_it():
    p0 = pane(1, 0, emitted=1)
    p_on_time = pane(2, 1, PaneTiming.ON_TIME, emitted=2, on_time=0)
    second = pane(3, 2, PaneTiming.ON_TIME, emitted=3, on_time=1)
    assert [[rule for rule, _ in b] for b in pane_breaks([p0, p_on_time, second, pane(3, 2, retraction=True)])] == [
        [], [], ["on_time_once"], ["retraction_standing"]]


def test_small_rules_have_one_home():
    assert advanced(5, 3) == 5 and advanced(5, 10**20) < 10**20
    assert is_due(3, None, 4, 0) and not is_due(4, None, 4, 0) and is_due(None, 7, 0, 7) and not is_due(None, None, 9, 9)
    assert standing_flags(0) == (True, False) and standing_flags(2) == (False, False)
    row = {"window_start": 0, "window_end": 1000, "value": 1, "ts": 999, "timing": "LATE", "pane_index": 0,
           "on_time_index": 0, "emitted_at": 5}
    assert (pane_from_row("k", row).first, pane_from_row("k", row).last) == (True, False)
    fixed = WindowingStrategy(FixedWindows(1000), allowed_lateness=500)
    assert fixed.dropped_before(10_000) == 10_000 - 500 - 1000
    assert WindowingStrategy(GlobalWindows()).dropped_before(10_000) is None


def test_a_subclass_that_reassigns_windows_has_no_inherited_sql_form():
    class Shifted(FixedWindows):
        def assign(self, ctx):
            return super().assign(ctx)

    class Renamed(FixedWindows):
        pass

    assert Shifted(1000).sql_window("t") is None and Shifted(1000).sql_windows("t") is None
    assert Renamed(1000).sql_window("t") == FixedWindows(1000).sql_window("t")
