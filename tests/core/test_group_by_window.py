"""KeyedWindowSet details that the scenarios reach only in combination."""

from __future__ import annotations

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount
from dataflow_core.model.windows import Sessions
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
    assert runner.dropped == 1
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


# --- a backfill's corrections adopted by live state (KeyedWindowSet.restate) ----------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dataflow_core.model.group_by_window import Element, KeyedWindowSet  # noqa: E402
from dataflow_core.model.panes import Pane, PaneTiming  # noqa: E402
from dataflow_core.model.triggers import AfterWatermark  # noqa: E402
from dataflow_core.model.windows import FixedWindows  # noqa: E402

_times = st.lists(st.integers(0, 600), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(_times, _times, _times, st.sampled_from(["fixed", "sessions"]), st.booleans())
def test_restated_windows_carry_on_as_if_they_had_seen_the_backfill_input(live, missed, later, shape, retracting):
    """Live state saw `live` only; a backfill over `live + missed` restates it; then
    `later` arrives. Every window then holds what one window set that saw everything holds,
    and (retracting) a later pane retracts exactly the backfill's pane."""
    window_fn = FixedWindows(100 * S) if shape == "fixed" else Sessions(30 * S)
    mode = AccumulationMode.RETRACTING if retracting else AccumulationMode.ACCUMULATING
    strategy = WindowingStrategy(window_fn=window_fn, trigger=AfterWatermark(late=AfterCount(1)),
                                 accumulation=mode, allowed_lateness=10_000 * S, combiner=SumFn())
    els = lambda times: [Element(1, t * S) for t in times]  # noqa: E731
    ks = KeyedWindowSet("k", strategy)
    ks.add_bundle(els(live), at=0, watermark=0)
    past = 1_000 * S  # the live watermark has passed every window: a backfill of the past
    ks.advance_watermark(0, past, at=5)
    truth = KeyedWindowSet("k", strategy)
    backfilled = truth._accumulate(els(live + missed))
    gone = [(w, None) for w in ks.windows if w not in backfilled]
    panes = {w: Pane("k", w, acc, w.max_timestamp, PaneTiming.ON_TIME, 7, 0, False, False, 10) for w, acc in backfilled.items()}
    ks.restate(gone + list(panes.items()), els(live + missed), watermark=past)
    assert {w: st.acc for w, st in ks.windows.items()} == backfilled
    assert all(st.pending == 0 and st.next_index == 8 for st in ks.windows.values())
    out = ks.add_bundle(els(later), at=20, watermark=past)
    out += ks.advance_watermark(past, 5_000 * S, at=30)
    everything = truth._accumulate(els(live + missed + later))
    assert {w: st.acc for w, st in ks.windows.items()} == everything
    retracted = sorted((p.window.start, p.value) for p in out if p.retraction)
    replaced = sorted((w.start, v) for w, v in backfilled.items() if w not in everything or everything[w] != v)
    if retracting:
        assert retracted == replaced
    else:
        assert retracted == []
