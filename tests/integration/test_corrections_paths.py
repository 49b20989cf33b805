"""A backfill's corrections without live state: the windows the results do not have yet,
restated in Spark SQL from the model's `fresh_correction`, equal what the model emits for
them key by key in executors, beside windows that do have a standing pane, for every
accumulation mode and a watermark at the end of time or inside the windows."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import MaxFn, SumFn
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime
from dataflow_core.model.windows import FixedWindows
from dataflow_core.spark.execute.corrections import CORRECTION_COLUMNS, run_corrections
from dataflow_core.spark.execute.keyed_stage import KeyCodec

pytestmark = pytest.mark.integration

M = 60_000
AT = 10**12
SCHEMA = ("k string, window_start bigint, window_end bigint, present boolean, value decimal(28,3), ts bigint, "
          "s_value decimal(28,3), s_ts bigint, s_timing string, s_pane_index int, s_on_time_index int, "
          "s_emitted_at bigint")

window_st = st.tuples(
    st.sampled_from(["a", "b", "c"]), st.integers(0, 9),  # key, window number (10-minute windows)
    st.booleans(),  # present
    st.integers(-50, 50),  # recomputed value
    st.one_of(st.none(), st.sampled_from(["EARLY", "ON_TIME", "LATE"])),  # the standing pane's timing (None: fresh)
)


def fixes_rows(drawn) -> list[tuple]:
    rows, seen = [], set()
    for k, n, present, v, timing in drawn:
        if (k, n) in seen:
            continue
        seen.add((k, n))
        start, end = n * 10 * M, (n + 1) * 10 * M
        if timing is None:
            present = True  # a window neither side has is no correction
            standing = (None,) * 6
        else:
            index = 0 if timing != "LATE" else 1
            standing = (Decimal(v + 7), end - 1, timing, index, None if timing == "EARLY" else index - (timing == "LATE"), 5)
        rows.append((k, start, end, present, Decimal(v) if present else None, end - 1 if present else None, *standing))
    return rows


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(drawn=st.lists(window_st, min_size=1, max_size=20), mode=st.sampled_from(list(AccumulationMode)),
       watermark=st.sampled_from([END_OF_TIME, 30 * M, 35 * M, 0]), combiner=st.sampled_from([SumFn(), MaxFn()]))
def test_fresh_windows_in_sql_equal_the_model_key_by_key(spark, drawn, mode, watermark, combiner):
    strategy = WindowingStrategy(FixedWindows(10 * M), AfterWatermark(early=AlignedProcessingTime(M), late=AfterCount(1)),
                                 mode, 0, combiner, TimestampCombiner.END_OF_WINDOW)
    fixes = spark.createDataFrame(fixes_rows(drawn), SCHEMA).select("k", *CORRECTION_COLUMNS)
    codec = KeyCodec(("k",))

    def rows(fresh_in_sql: bool, only=None, all_fresh: bool = False) -> list[dict]:
        out = run_corrections(fixes if only is None else fixes.where(only), strategy, codec, "decimal(28,3)", AT,
                              watermark, fresh_in_sql=fresh_in_sql, all_fresh=all_fresh)
        return sorted((r.asDict() for r in out.drop("ordinal").collect()), key=repr)

    in_sql = rows(True)
    assert in_sql == rows(False), (mode, watermark)
    fresh = {(r[0], r[1]) for r in fixes.collect() if r["s_pane_index"] is None}
    for kind in ("pane", "result"):
        assert {(r["k"], r["window_start"]) for r in in_sql if r["kind"] == kind} >= fresh, kind
    # a first backfill's windows (none in the results) skip the executors altogether
    new = "s_pane_index IS NULL"
    assert rows(True, new, all_fresh=True) == rows(False, new), (mode, watermark)
