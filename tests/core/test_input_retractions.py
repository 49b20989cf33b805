"""Input retractions (a deleted or updated input row taken back out of its windows, docs/model.md
"Input corrections"): any sequence of inserts and deletes, in any batching, with the state
stored between batches, leaves each window at the aggregate of the rows that remain in it;
a delete past allowed lateness is left standing and counted as a correction left for a backfill."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN, CombineFn, SumFn
from dataflow_core.model.elements import Element
from dataflow_core.model.group_by_window import KeyedWindowSet
from dataflow_core.model.lifting import combine_bundle, lifts
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, Repeatedly
from dataflow_core.model.windows import AssignContext, FixedWindows, GlobalWindows, Sessions, SlidingWindows

M = parse_duration("1m")
WINDOW_FNS = [FixedWindows(2 * M), SlidingWindows(3 * M, M), GlobalWindows(), FixedWindows(5 * M, M)]
TRIGGERS = [Repeatedly(AfterCount(1)), AfterWatermark(early=AfterCount(2), late=AfterCount(1))]
MODES = list(AccumulationMode)
RETRACTABLE = [name for name, make in BUILT_IN.items() if make().can_retract]


def strategies():
    """Every built-in retractable combiner, window function, trigger and mode whose first
    stage takes input retractions."""
    out = []
    for name in RETRACTABLE:
        for window_fn in WINDOW_FNS:
            for trigger in TRIGGERS:
                for mode in MODES:
                    s = WindowingStrategy(window_fn, trigger, mode, 2 * M, BUILT_IN[name]())
                    if s.takes_input_retractions:
                        out.append(s)
    return out


STRATEGIES = strategies()

# A history: batches, each of new rows (value, event time) and deletes of rows inserted in an
# earlier batch (by draw index: which of the rows standing then), and how far the watermark moves.
BATCHES = st.lists(st.tuples(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10 * M - 1)), max_size=4),
    st.lists(st.integers(0, 1_000), max_size=3),
    st.sampled_from([0, 0, M // 2, 2 * M]),
    st.booleans(),
), min_size=1, max_size=6)


def feed(ks: KeyedWindowSet, elements: list[Element], at: int, wm: int, lifted: bool):
    """One batch's elements as elements, or pre-combined (`model.lifting`) where the strategy lifts."""
    if lifted and lifts(ks.strategy):
        return ks.add_combined(combine_bundle(ks.strategy, ks.key, elements), at, wm)
    return ks.add_bundle(elements, at, wm)


def aggregate(combiner: CombineFn, values: list):
    return combiner.extract_output(combiner.add_inputs(combiner.create_accumulator(), values))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(STRATEGIES), BATCHES)
def test_inserts_and_deletes_in_any_batching_net_to_the_aggregate_of_the_rows_that_remain(strategy, batches):
    ks, panes, wm, at = KeyedWindowSet("k", strategy), [], 0, 0
    standing: list[tuple[int, int, int]] = []  # (row id, value, event time) of rows inserted and not deleted
    in_windows: dict = {}  # (row id, window) -> value: the pairs the windows hold, by the model's lateness rule
    left = counted_left = 0
    for n, (rows, deletes, move, lifted) in enumerate(batches):
        at += M
        gone = {standing[d % len(standing)] for d in deletes} if standing else set()
        els = [Element(v, t, retraction=True) for _, v, t in sorted(gone)]
        for row in gone:
            windows = strategy.window_fn.assign(AssignContext("k", row[1], row[2]))
            held = [w for w in windows if (row[0], w) in in_windows]
            kept = [w for w in held if strategy.is_late(w, wm)]  # past lateness: the pair stands
            left += not [w for w in held if w not in kept]
            for w in held:
                if w not in kept:
                    del in_windows[row[0], w]
        standing = [r for r in standing if r not in gone]
        for i, (v, t) in enumerate(rows):
            row = (n * 10 + i, v, t)
            standing.append(row)
            els.append(Element(v, t))
            for w in strategy.window_fn.assign(AssignContext("k", v, t)):
                if not strategy.is_late(w, wm):
                    in_windows[row[0], w] = v
        panes += feed(ks, els, at, wm, lifted)
        panes += ks.advance_watermark(wm, wm + move, at)
        wm += move
        counted_left += ks.dropped_retractions  # counted per run, not kept in the state
        ks = KeyedWindowSet.from_state("k", strategy, ks.to_state())  # a micro-batch's stored state
    panes += ks.advance_watermark(wm, END_OF_TIME, at + M)
    assert counted_left == left
    expected: dict = {}
    for (_, w), v in in_windows.items():
        expected.setdefault(w, []).append(v)
    got = {w: p.value for (_, w), p in strategy.current_panes(panes).items()}
    empty = strategy.combiner.empty_output()
    assert {w: v for w, v in got.items() if w in expected or v != empty} == {
        w: aggregate(strategy.combiner, vs) for w, vs in expected.items()}


@given(st.sampled_from([s for s in STRATEGIES if not isinstance(s.window_fn, GlobalWindows)]),
       st.integers(0, 10 * M - 1))
def test_a_delete_past_allowed_lateness_is_left_standing_and_counted(strategy, t):
    ks = KeyedWindowSet("k", strategy)
    ks.add_bundle([Element(3, t)], M, 0)
    ks.advance_watermark(0, END_OF_TIME - 1, M)
    held = {w: ws.acc for w, ws in ks.windows.items()}
    assert ks.add_bundle([Element(3, t, retraction=True)], 2 * M, END_OF_TIME - 1) == []
    assert ks.dropped_retractions == 1 and {w: ws.acc for w, ws in ks.windows.items()} == held


def test_stages_that_cannot_take_an_input_retraction_say_so():
    """Sessions (a delete may split one, and a session keeps no element times to split it by),
    discarding multisets (a pane after a firing no longer holds the row) and combiners without
    `retract_input` leave input deletes for a backfill."""

    class Only(SumFn):
        name = "only"
        retract_input = CombineFn.retract_input  # type: ignore[assignment]

    def takes(window_fn=FixedWindows(M), mode=AccumulationMode.ACCUMULATING, combiner=None):
        return WindowingStrategy(window_fn, Repeatedly(AfterCount(1)), mode, 0,
                                 combiner or SumFn()).takes_input_retractions

    assert not takes(Sessions(M))
    assert not takes(mode=AccumulationMode.DISCARDING, combiner=BUILT_IN["min"]())
    assert not takes(combiner=Only())
    assert takes(mode=AccumulationMode.DISCARDING) and takes(SlidingWindows(2 * M, M), AccumulationMode.RETRACTING)
