"""KeyedWindowSet details that the scenarios reach only in combination."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.windows import AssignContext, Sessions, SlidingWindows
from dataflow_core.runners.reference import ReferenceRunner

S = 1000


def test_closed_session_owes_its_on_time_pane_until_collected_later():
    """A closed session that merged in unemitted data: the watermark passes its end (no
    trigger may fire) and garbage collection comes later; its final pane is ON_TIME."""
    strategy = WindowingStrategy(window_fn=Sessions(10 * S), trigger=AfterCount(2),
                                 accumulation=AccumulationMode.ACCUMULATING,
                                 allowed_lateness=1000 * S, combiner=SumFn())
    runner = ReferenceRunner(strategy, 0)
    runner.advance_processing_time(1 * S)
    fired = runner.add([("k", 1, 0), ("k", 2, 5 * S)])  # [0, 15s) fires and closes
    assert [(p.value, p.last) for p in fired] == [(3, True)]
    runner.add([("k", 4, 20 * S)])  # [20s, 30s) open, one element waiting
    assert runner.add([("k", 8, 12 * S)]) == []  # [12s, 22s) bridges both: closed, the 8 is dropped
    assert runner.dropped_pairs == 1
    assert runner.advance_watermark(100 * S) == []  # past the end, nothing may fire
    final = runner.advance_watermark(END_OF_TIME)
    assert [(p.value, p.timing.value, p.last) for p in final] == [(7, "ON_TIME", True)]


def test_keys_are_woken_only_when_the_watermark_reaches_their_windows():
    strategy = WindowingStrategy(window_fn=Sessions(10 * S), combiner=SumFn())
    runner = ReferenceRunner(strategy, 0)
    runner.add([("early", 1, 0), ("late", 1, 100 * S)])
    first = runner.advance_watermark(50 * S)
    assert [(p.key, p.value) for p in first] == [("early", 1)]
    second = runner.advance_watermark(200 * S)
    assert [(p.key, p.value) for p in second] == [("late", 1)]


@settings(max_examples=200, deadline=None)
@given(size=st.integers(2, 6), period=st.integers(1, 3), offset=st.integers(0, 5), t=st.integers(0, 60),
       span=st.tuples(st.integers(-10, 70), st.integers(0, 30)))
def test_an_element_counted_in_some_windows_goes_into_the_others_only(size, period, offset, t, span):
    """Law: with `counted` spans of window starts, an element adds its value to exactly the
    windows of `assign` whose start is outside them; counted windows are neither added to nor
    dropped, and the element is not dropped while one of its windows took or holds it."""
    strategy = WindowingStrategy(window_fn=SlidingWindows(size * S, period * S, offset * S), trigger=AfterCount(1),
                                 accumulation=AccumulationMode.ACCUMULATING, allowed_lateness=0, combiner=SumFn())
    lo, hi = span[0] * S, (span[0] + span[1]) * S
    el = Element(1, t * S, counted=((lo, hi),) if hi > lo else ())
    windows = KeyedWindowSet("k", strategy)
    panes = windows.add_bundle([el], at=0, watermark=-END_OF_TIME)
    assigned = strategy.window_fn.assign(AssignContext("k", 1, t * S))
    assert {p.window for p in panes} == {w for w in assigned if not lo <= w.start < hi}
    assert (windows.dropped_pairs, windows.dropped_elements) == (0, 0 if assigned else 1)  # (a gap between windows)
