"""The pane gate (real Spark, Delta and Great Expectations) accepts exactly what the model
emits: a discarding min with early firings whose on-time pane has nothing new carries None
and passes; a null where the combiner's empty pane is not null, or a broken history, fails."""

from __future__ import annotations

import datetime as dt

import pytest

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import MinFn, SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.quality.gates import gate_panes

pytestmark = pytest.mark.integration

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.timezone.utc)
SCHEMA = ("shop_id string, window_start timestamp, window_end timestamp, value bigint, timestamp timestamp, "
          "timing string, pane_index int, on_time_index int, is_first boolean, is_last boolean, "
          "is_retraction boolean, emitted_at timestamp, run_id string, pane_id string")


def stage(output: str, combiner) -> StageSpec:
    strategy = WindowingStrategy(window_fn=FixedWindows(parse_duration("1h")),
                                 trigger=AfterWatermark(early=AfterCount(1)),
                                 accumulation=AccumulationMode.DISCARDING, combiner=combiner)
    return StageSpec(output, strategy, ("shop_id",), "bigint")


def pane(shop, value, timing, index, on_time, emitted_min):
    m = lambda n: T0 + dt.timedelta(minutes=n)  # noqa: E731
    return (shop, m(0), m(60), value, m(60) - dt.timedelta(milliseconds=1), timing, index, on_time, index == 0,
            False, False, m(emitted_min), "r1", f"{shop}-{index}")


@pytest.fixture
def wh(spark, tmp_path):
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "wh"))
    return tmp_path


def write(spark, rows, name):
    from dataflow_core.spark.platform.tables import write_table

    write_table(spark, spark.createDataFrame(rows, SCHEMA), name, mode="overwrite")


def test_a_discarding_mins_empty_on_time_pane_passes_and_a_broken_pane_still_fails(spark, wh):
    # s1: the early pane took the window's only order; the on-time pane has nothing new: None.
    history = [pane("s1", 5, "EARLY", 0, None, 10), pane("s1", None, "ON_TIME", 1, 0, 61)]
    write(spark, history, "shop_min_panes")
    ok = gate_panes(spark, stage("shop_min", MinFn()), None, "g-1", "shop", docs_dir=wh / "docs", build_docs=False)
    assert ok.success and ok.quarantined == 0, ok.lines()

    # s2: a pane index skipped (a broken history) is still caught, the null pane still is not.
    write(spark, history + [pane("s2", 3, "EARLY", 0, None, 5), pane("s2", 4, "ON_TIME", 2, 0, 61)], "shop_min_panes")
    bad = gate_panes(spark, stage("shop_min", MinFn()), None, "g-2", "shop", docs_dir=wh / "docs", build_docs=False)
    assert {o.rule: o.unexpected_count for o in bad.report.failed} == {"pane_index_consecutive": 1}
    assert bad.quarantined == 1


def test_a_null_pane_of_a_sum_fails_the_value_rule(spark, wh):
    """A sum's empty pane is 0: a null is no pane the model emits."""
    write(spark, [pane("s1", 5, "EARLY", 0, None, 10), pane("s1", None, "ON_TIME", 1, 0, 61)], "shop_sum_panes")
    out = gate_panes(spark, stage("shop_sum", SumFn()), None, "g-3", "shop", docs_dir=wh / "docs", build_docs=False)
    assert {o.rule: o.unexpected_count for o in out.report.failed} == {"value_present": 1}
