"""Batch execution on Spark: the fast path (Spark SQL) equals the general path (the model
key by key in executors), and both equal the reference runner's last pane per window, value
and timestamp, in every accumulation mode (discarding: the panes merged).

Many random cases run as one Spark job per strategy (a case is part of the key), so the
property covers hundreds of histories; edge cases are pinned beside it."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN, SumFn
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime, Default, Repeatedly
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.runners.reference import ReferenceRunner
from dataflow_core.spark.execute.batch import fast_path_applies, final_values

pytestmark = pytest.mark.integration

S = 1000
WINDOWS = [FixedWindows(60 * S), FixedWindows(60 * S, 15 * S), SlidingWindows(90 * S, 30 * S),
           SlidingWindows(100 * S, 30 * S, 7 * S), Sessions(20 * S), GlobalWindows()]
TRIGGERS = [Default(), Repeatedly(AfterCount(2)),
            AfterWatermark(early=AlignedProcessingTime(60 * S), late=AfterCount(1))]
COMBINERS = [make() for make in BUILT_IN.values() if make.sql_output is not None]  # every declared form
NOW = 10**12

elements_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-50, 50),
              st.builds(lambda s, ms: s * S + ms, st.integers(0, 300), st.sampled_from([0, 1, 999]))),
    min_size=1, max_size=25,
)


def reference_finals(strategy: WindowingStrategy, elements) -> dict:
    """Per (key, window): the last non-retraction pane's value and timestamp; discarding
    panes merged by the combiner's `output_merge` and the timestamp combiner."""
    runner = ReferenceRunner(strategy, -END_OF_TIME)
    runner.advance_processing_time(NOW)
    panes = runner.add([(k, Decimal(v), t) for k, v, t in elements])
    panes += runner.advance_watermark(END_OF_TIME)
    by_window = defaultdict(list)
    for p in panes:
        by_window[(p.key, p.window)].append(p)
    finals: dict = {}
    for (key, w), ps in by_window.items():
        glob = w.end >= END_OF_TIME
        wid = (key, None if glob else w.start, None if glob else w.end)
        if strategy.accumulation is AccumulationMode.DISCARDING:
            kept = [p for p in ps if not p.retraction]
            value = strategy.combiner.merge_outputs([p.value for p in kept])
            ts = (min if strategy.timestamp_combiner.merge == "min" else max)(p.timestamp for p in kept)
        elif ps[-1].retraction:
            continue
        else:
            value, ts = ps[-1].value, ps[-1].timestamp
        finals[wid] = (Decimal(value), None if ts >= END_OF_TIME - 1 else ts)
    return finals


def check_cases(spark, strategy: WindowingStrategy, cases: list[list[tuple]]) -> None:
    """All cases through both paths as one job each (the case number is part of the key)."""
    rows = [(n, k, Decimal(v), t) for n, case in enumerate(cases) for k, v, t in case]
    df = spark.createDataFrame(rows, "case int, k string, value decimal(18,3), event_ms bigint")
    keys = ("case", "k")
    fast = final_values(df, strategy, keys, "decimal(28,3)", NOW, fast=True).collect()
    general = final_values(df, strategy, keys, "decimal(28,3)", NOW, fast=False).collect()
    as_set = lambda rows: sorted(tuple(r) for r in rows)  # noqa: E731
    assert as_set(fast) == as_set(general), strategy
    got = {(r["case"], r["k"], r["window_start"], r["window_end"]): (r["value"], r["ts"]) for r in general}
    expected = {(n, *wid): v for n, case in enumerate(cases) for wid, v in reference_finals(strategy, case).items()}
    assert got == expected, strategy


@pytest.mark.parametrize("window_fn", WINDOWS, ids=lambda w: w.describe())
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(cases=st.lists(elements_st, min_size=4, max_size=12), trigger=st.sampled_from(TRIGGERS),
       combiner=st.sampled_from(COMBINERS), mode=st.sampled_from(list(AccumulationMode)),
       tc=st.sampled_from(list(TimestampCombiner)))
def test_fast_path_equals_general_path_and_reference(spark, window_fn, cases, trigger, combiner, mode, tc):
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=0, combiner=combiner, timestamp_combiner=tc)
    if not fast_path_applies(strategy):
        strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=AccumulationMode.ACCUMULATING,
                                     allowed_lateness=0, combiner=combiner, timestamp_combiner=tc)
    check_cases(spark, strategy, cases)


# Edges: elements on window bounds, sessions exactly one gap apart (they do not merge:
# [t, t+gap) and [t+gap, ...) do not overlap), one gap minus 1 ms (they do), sliding
# windows whose size is not a multiple of the period, with an offset, negative times.
EDGE_CASES = [
    [("a", 1, 0), ("a", 2, 20 * S), ("a", 4, 40 * S - 1), ("b", 8, 60 * S), ("b", 16, 60 * S - 1)],
    [("a", 1, 7 * S), ("a", 2, 37 * S), ("a", 3, 107 * S), ("a", 5, 106 * S + 999)],
    [("a", 3, -1), ("a", 5, -60 * S), ("a", 7, 0), ("c", -2, 119 * S + 999), ("c", 9, 120 * S)],
    [("a", 1, 0), ("a", 1, 0), ("a", 2, 1)],
]


@pytest.mark.parametrize("window_fn", [Sessions(20 * S), SlidingWindows(100 * S, 30 * S, 7 * S),
                                       FixedWindows(60 * S, 15 * S), SlidingWindows(60 * S, 60 * S)],
                         ids=lambda w: w.describe())
@pytest.mark.parametrize("mode", list(AccumulationMode), ids=lambda m: m.value)
def test_fast_path_pinned_edges(spark, window_fn, mode):
    strategy = WindowingStrategy(window_fn=window_fn, trigger=Default(), accumulation=mode, allowed_lateness=0,
                                 combiner=SumFn(), timestamp_combiner=TimestampCombiner.EARLIEST)
    check_cases(spark, strategy, EDGE_CASES)


def test_the_fast_path_is_the_declared_forms():
    """The fast path applies exactly where the model declares the SQL forms; those are
    the window functions and combiners the property test above draws from."""
    assert {type(c) for c in COMBINERS} == {make for make in BUILT_IN.values() if make.sql_output is not None}
    assert len(COMBINERS) == 4
    for window_fn in WINDOWS:
        declared = window_fn.sql_windows("event_ms") is not None or window_fn.sql_session_gap is not None
        assert declared
        for combiner in BUILT_IN.values():
            strategy = WindowingStrategy(window_fn=window_fn, combiner=combiner())
            assert fast_path_applies(strategy) == (combiner.sql_output is not None), (window_fn, combiner)

    class MySum(SumFn):
        pass

    class Doubled(SumFn):
        def add_input(self, acc, value):
            return acc + 2 * value

    assert fast_path_applies(WindowingStrategy(window_fn=WINDOWS[0], combiner=MySum()))
    assert not fast_path_applies(WindowingStrategy(window_fn=WINDOWS[0], combiner=Doubled()))
