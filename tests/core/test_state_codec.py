"""A key's state written as JSON data and read back carries on exactly as if never stored."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import DistinctCountFn, MeanFn, MinFn, SumFn, ToListFn
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.state_codec import STATE_VERSION, UnknownStateVersion, state_from_text, state_text
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.triggers import (
    AfterCount, AfterPercentileWatermark, AfterProcessingTime, AfterWatermark, OrFinally, Repeatedly,
)
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from tests.core.properties_common import pickle_free

S = 1000
WINDOWS = st.sampled_from([FixedWindows(120 * S), SlidingWindows(180 * S, 60 * S), Sessions(60 * S), GlobalWindows()])
TRIGGERS = st.sampled_from([
    AfterWatermark(early=AfterProcessingTime(60 * S), late=AfterCount(1)),
    Repeatedly(AfterCount(2)),
    OrFinally(Repeatedly(AfterCount(1)), AfterPercentileWatermark(0.5)),
])
COMBINERS = st.sampled_from([SumFn(), MeanFn(), MinFn(), ToListFn(), DistinctCountFn()])
VALUES = st.sampled_from([int, Decimal])  # billing sums DECIMAL values
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.tuples(st.integers(0, 9), st.integers(0, 900)), min_size=1, max_size=4)),
        st.tuples(st.just("watermark"), st.integers(0, 200)),
        st.tuples(st.just("clock"), st.integers(1, 120)),
    ),
    min_size=1, max_size=16,
)


def _drive(ks: KeyedWindowSet, steps, state: dict, value=int) -> list:
    """Apply steps; `state` carries the clock and watermark across calls."""
    out = []
    for kind, arg in steps:
        if kind == "add":
            out += ks.add_bundle([Element(value(v), t * S) for v, t in arg], state["at"], state["wm"])
        elif kind == "watermark":
            new = state["wm"] + arg * S
            out += ks.advance_watermark(state["wm"], new, state["at"])
            state["wm"] = new
        else:
            state["at"] += arg * S
            out += ks.fire_processing_timers(state["at"], state["wm"])
    return out


@settings(max_examples=150, deadline=None)
@given(WINDOWS, TRIGGERS, COMBINERS, st.sampled_from(list(AccumulationMode)), STEPS, STEPS,
       st.sampled_from(list(TimestampCombiner)), VALUES)
def test_state_round_trip_continues_exactly(window_fn, trigger, combiner, mode, before, after, tc, value):
    if mode is AccumulationMode.RETRACTING and not combiner.can_retract:
        mode = AccumulationMode.ACCUMULATING
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=parse_duration("10m"), combiner=combiner, timestamp_combiner=tc)
    straight, clock = KeyedWindowSet("k", strategy), {"at": 0, "wm": 0}
    _drive(straight, before, clock, value)
    cut = (straight.dropped_pairs, straight.dropped_elements)
    expected = _drive(straight, after + [("watermark", 10**9)], dict(clock), value)

    stored, clock = KeyedWindowSet("k", strategy), {"at": 0, "wm": 0}
    _drive(stored, before, clock, value)
    text = state_text(stored.to_state())  # what the state table holds
    assert text is None or pickle_free(text)
    resumed = KeyedWindowSet.from_state("k", strategy, state_from_text(text))
    assert resumed.to_state() == stored.to_state()
    start = (resumed.dropped_pairs, resumed.dropped_elements)  # a key with no window keeps no counts
    assert _drive(resumed, after + [("watermark", 10**9)], dict(clock), value) == expected
    # runners count each visit's drops (the difference), so what is dropped after resuming must agree
    assert (resumed.dropped_pairs - start[0], resumed.dropped_elements - start[1]) == (
        straight.dropped_pairs - cut[0], straight.dropped_elements - cut[1])


def test_an_unknown_state_version_is_refused_with_a_clear_error():
    strategy = WindowingStrategy(window_fn=FixedWindows(60 * S), combiner=SumFn())
    ks = KeyedWindowSet("k", strategy)
    ks.add_bundle([Element(1, 5 * S)], 0, 0)
    state = ks.to_state()
    assert state is not None and state["version"] == STATE_VERSION
    with pytest.raises(UnknownStateVersion, match=r"format version 99; this build reads version 1"):
        KeyedWindowSet.from_state("k", strategy, {**state, "version": 99})
    with pytest.raises(UnknownStateVersion, match="format version None"):
        KeyedWindowSet.from_state("k", strategy, {"windows": []})


def test_an_empty_key_has_no_state():
    strategy = WindowingStrategy(window_fn=FixedWindows(60 * S), combiner=SumFn())
    ks = KeyedWindowSet("k", strategy)
    assert ks.to_state() is None
    assert KeyedWindowSet.from_state("k", strategy, None).windows == {}
    ks.add_bundle([Element(1, 5 * S)], 0, 0)
    ks.advance_watermark(0, END_OF_TIME, 1)  # collected: nothing left to keep
    assert ks.to_state() is None


def _as_version_1(state: dict) -> dict:
    """The same state as version 1 wrote it: every window field and every trigger node in full."""
    def node(n) -> dict:
        n = {"children": n} if isinstance(n, list) else n
        return {"finished": n.get("finished", False), "data": n.get("data", {}),
                "processing_timer": n.get("processing_timer"), "event_timer": n.get("event_timer"),
                "children": [node(c) for c in n.get("children", [])]}
    defaults = {"pending": 0, "ts_min": None, "ts_max": None, "next_index": 0, "next_on_time_index": 0,
                "standing": None, "absorbed": [], "ended": False}
    windows = [{**defaults, **w, "trigger": node(w["trigger"])} for w in state["windows"]]
    return {**state, "version": 1, "windows": windows}


@settings(max_examples=60, deadline=None)
@given(WINDOWS, TRIGGERS, COMBINERS, st.sampled_from(list(AccumulationMode)), STEPS, STEPS, VALUES)
def test_state_written_by_version_1_is_read_and_carries_on_alike(window_fn, trigger, combiner, mode, before, after,
                                                                   value):
    """Live state tables written before the compact format (version 2) resume exactly as
    the same state written now; and the compact text is never longer."""
    if mode is AccumulationMode.RETRACTING and not combiner.can_retract:
        mode = AccumulationMode.ACCUMULATING
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=parse_duration("10m"), combiner=combiner)
    stored, clock = KeyedWindowSet("k", strategy), {"at": 0, "wm": 0}
    _drive(stored, before, clock, value)
    state = stored.to_state()
    if state is None:
        return
    old = state_text(_as_version_1(state))
    assert len(state_text(state)) <= len(old)
    from_old = KeyedWindowSet.from_state("k", strategy, state_from_text(old))
    from_new = KeyedWindowSet.from_state("k", strategy, state_from_text(state_text(state)))
    assert from_old.to_state() == from_new.to_state() == state
    tail = after + [("watermark", 10**9)]
    assert _drive(from_old, tail, dict(clock), value) == _drive(from_new, tail, dict(clock), value)
