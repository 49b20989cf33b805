"""Batch execution on Spark: the fast path (Spark SQL) equals the general path (the model
key by key in executors), and both equal the reference runner's last pane per window."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, MaxFn, MinFn, SumFn
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime, Default, Repeatedly
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.runners.reference import ReferenceRunner
from dataflow_core.spark.execute.batch import fast_path_applies, final_values

pytestmark = pytest.mark.integration

WINDOWS = [FixedWindows(60_000), FixedWindows(60_000, 15_000), SlidingWindows(90_000, 30_000),
           Sessions(20_000), GlobalWindows()]
TRIGGERS = [Default(), Repeatedly(AfterCount(2)),
            AfterWatermark(early=AlignedProcessingTime(60_000), late=AfterCount(1))]
COMBINERS = [SumFn(), CountFn(), MinFn(), MaxFn()]
NOW = 10**12

elements_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-50, 50),
              st.builds(lambda s, ms: s * 1000 + ms, st.integers(0, 300), st.sampled_from([0, 1, 999]))),
    min_size=1, max_size=25,
)


def reference_finals(strategy: WindowingStrategy, elements) -> dict:
    """Last non-retraction pane per (key, window) (discarding: panes merged)."""
    runner = ReferenceRunner(strategy, -END_OF_TIME)
    runner.advance_processing_time(NOW)
    panes = runner.add([(k, Decimal(v), t) for k, v, t in elements])
    panes += runner.advance_watermark(END_OF_TIME)
    finals: dict = {}
    merge = {SumFn: lambda a, b: a + b, CountFn: lambda a, b: a + b, MinFn: min, MaxFn: max}[type(strategy.combiner)]
    by_window = defaultdict(list)
    for p in panes:
        by_window[(p.key, p.window)].append(p)
    for (key, w), ps in by_window.items():
        glob = w.end >= END_OF_TIME
        wid = (key, None if glob else w.start, None if glob else w.end)
        if strategy.accumulation is AccumulationMode.DISCARDING:
            value = ps[0].value
            for p in ps[1:]:
                value = merge(value, p.value)
            finals[wid] = Decimal(value)
        elif not ps[-1].retraction:
            ts = ps[-1].timestamp
            finals[wid] = (Decimal(ps[-1].value), None if ts >= END_OF_TIME - 1 else ts)
    return finals


@pytest.mark.parametrize("window_fn", WINDOWS, ids=lambda w: w.describe())
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(elements=elements_st, trigger=st.sampled_from(TRIGGERS), combiner=st.sampled_from(COMBINERS),
       mode=st.sampled_from(list(AccumulationMode)), tc=st.sampled_from(list(TimestampCombiner)))
def test_fast_path_equals_general_path_and_reference(spark, window_fn, elements, trigger, combiner, mode, tc):
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=0, combiner=combiner, timestamp_combiner=tc)
    if not fast_path_applies(strategy):
        return
    df = spark.createDataFrame([(k, Decimal(v), t) for k, v, t in elements],
                               "k string, value decimal(18,3), event_ms bigint")
    fast = final_values(df, strategy, ("k",), "decimal(28,3)", NOW, fast=True).collect()
    general = final_values(df, strategy, ("k",), "decimal(28,3)", NOW, fast=False).collect()
    as_set = lambda rows: sorted(tuple(r) for r in rows)  # noqa: E731
    assert as_set(fast) == as_set(general)
    expected = reference_finals(strategy, elements)
    got = {(r["k"], r["window_start"], r["window_end"]): r for r in general}
    assert set(got) == set(expected)
    for wid, exp in expected.items():
        if mode is AccumulationMode.DISCARDING:
            assert got[wid]["value"] == exp
        else:
            assert (got[wid]["value"], got[wid]["ts"]) == exp
