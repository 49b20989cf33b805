"""Merging windows declare what ceased to exist: a pane of a window that absorbed windows
which had emitted names them (`Pane.replaces`), in every accumulation mode, so the current
results (`WindowingStrategy.current_panes`, the rule of a results table) hold the windows
of the final aggregate only, never a session that later merged into another."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, MeanFn, SumFn
from dataflow_core.model.corrections import rebuild_windows
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.state_codec import state_from_text, state_text
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark, Repeatedly
from dataflow_core.model.windows import IntervalWindow, Sessions

GAP = 10
TRIGGERS = {
    "early_and_late": lambda: AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
    "every_two": lambda: Repeatedly(AfterCount(2)),
    "early_by_time": lambda: AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(1)),
}
COMBINERS = {"sum": SumFn, "count": CountFn, "mean": MeanFn}

bundles = st.lists(  # per bundle: its elements (key, event time, value) and how far the watermark then moves
    st.tuples(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 80), st.integers(1, 5)), max_size=5),
              st.integers(0, 15)),
    min_size=1, max_size=8)


def _strategy(mode: AccumulationMode, trigger: str, combiner: str) -> WindowingStrategy:
    return WindowingStrategy(Sessions(GAP), TRIGGERS[trigger](), mode, parse_duration("3650d"), COMBINERS[combiner]())


def _run(strategy: WindowingStrategy, drawn, through_state: bool) -> tuple[list, list]:
    """Every pane the keys emit for the bundles (then the watermark to the end of time), and
    every element; `through_state` stores and reloads each key's state between bundles, as
    micro-batches do."""
    sets: dict[str, KeyedWindowSet] = {}
    panes, everything, wm = [], [], 0
    for n, (els, move) in enumerate(drawn):
        at = 10 * (n + 1)
        for key in "ab":
            ks = sets.setdefault(key, KeyedWindowSet(key, strategy))
            if through_state:
                ks = sets[key] = KeyedWindowSet.from_state(key, strategy, state_from_text(state_text(ks.to_state())))
            mine = [Element(v, t) for k, t, v in sorted(els, key=lambda e: e[1]) if k == key]
            everything += [(key, e) for e in mine]
            panes += ks.fire_processing_timers(at - 1, wm)
            panes += ks.add_bundle(mine, at, wm)
        for ks in sets.values():
            panes += ks.advance_watermark(wm, wm + move, at)
        wm += move
    for ks in sets.values():
        panes += ks.fire_processing_timers(10 * len(drawn) + 5, wm)
        panes += ks.advance_watermark(wm, END_OF_TIME, 10 * len(drawn) + 9)
    return panes, everything


@settings(max_examples=150, deadline=None)
@given(bundles, st.sampled_from(list(AccumulationMode)), st.sampled_from(sorted(TRIGGERS)),
       st.sampled_from(sorted(COMBINERS)), st.booleans())
def test_the_current_windows_are_the_windows_of_the_final_aggregate_in_every_mode(
    drawn, mode, trigger, combiner, through_state,
):
    strategy = _strategy(mode, trigger, combiner)
    panes, everything = _run(strategy, drawn, through_state)
    current = strategy.current_panes(panes)
    finals = {}
    for key in "ab":
        for w, (acc, _, _) in rebuild_windows(key, strategy, [e for k, e in everything if k == key]).items():
            finals[key, w] = strategy.combiner.extract_output(acc)
    assert set(current) == set(finals)
    if mode.accumulates:  # a discarding session's panes carry only what came after its parts' panes
        assert {kw: p.value for kw, p in current.items()} == finals


def test_a_session_that_absorbs_windows_that_emitted_declares_them_gone_once():
    """Two sessions that fired early, then an element between them: the merged session's next
    pane replaces both; its later panes replace nothing. Accumulating mode: no retraction."""
    strategy = _strategy(AccumulationMode.ACCUMULATING, "early_and_late", "sum")
    ks = KeyedWindowSet("k", strategy)
    first = ks.add_bundle([Element(1, 0), Element(1, 15)], at=1, watermark=0)
    assert {p.window for p in first} == {IntervalWindow(0, 10), IntervalWindow(15, 25)}
    assert all(p.replaces == () for p in first)
    [bridged] = ks.add_bundle([Element(1, 8)], at=2, watermark=0)
    assert bridged.window == IntervalWindow(0, 25) and not bridged.retraction
    assert set(bridged.replaces) == {IntervalWindow(0, 10), IntervalWindow(15, 25)}
    [more] = ks.add_bundle([Element(1, 20)], at=3, watermark=0)
    assert more.window == IntervalWindow(0, 30) and more.replaces == (IntervalWindow(0, 25),)
    later = ks.advance_watermark(0, END_OF_TIME, at=4)
    assert all(p.replaces == () for p in later)
    current = strategy.current_panes(first + [bridged, more] + later)
    assert {w: p.value for (_, w), p in current.items()} == {IntervalWindow(0, 30): 4}


def test_a_window_that_never_emitted_is_not_declared():
    """An element inside a session merges its own `[t, t + gap)` window into it: nothing had
    emitted there, so nothing is declared (no results row to delete)."""
    strategy = _strategy(AccumulationMode.DISCARDING, "every_two", "sum")
    ks = KeyedWindowSet("k", strategy)
    panes = ks.add_bundle([Element(1, 0), Element(1, 5)], at=1, watermark=0)
    assert [(p.window, p.replaces) for p in panes] == [(IntervalWindow(0, 15), ())]
