"""The output gates apply the model's rules: the pane gate flags exactly the panes (so the
histories) `model.panes.pane_breaks` / `history_breaks` flags, whatever order the pane log's
rows come in; the results gate nets panes by `CombineFn.output_merge`, so a user's
`class MySum(SumFn)` passes every gate as `SumFn` does.

Many random histories run as one Spark job per example (a window per history)."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.panes import (
    HISTORY_RULES, OnTime, Pane, PaneHistory, PaneTiming, describe_next_pane, history_after, pane_breaks,
    history_breaks,
)
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.windows import FixedWindows, IntervalWindow
from dataflow_core.pipelines import StageSpec
from dataflow_core.quality.gates import gate_panes, gate_results, pane_checks

pytestmark = pytest.mark.integration

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
STAGE = StageSpec("gate_rules", WindowingStrategy(combiner=SumFn()), ("k",), "bigint")
SCHEMA = (
    "k string, window_start timestamp, window_end timestamp, value bigint, timestamp timestamp, "
    "timing string, pane_index int, on_time_index int, is_first boolean, is_last boolean, "
    "is_retraction boolean, emitted_at timestamp, run_id string, pane_id string"
)
FIELDS = ("value", "timing", "index", "on_time_index", "first", "last", "retraction")


def at(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


@st.composite
def window_history(draw, window: IntervalWindow) -> list[Pane]:
    """A history the model would write (panes as `describe_next_pane` describes them,
    retractions of the standing pane), then up to two fields of its panes changed."""
    history, standing, panes = PaneHistory(on_time=OnTime.BEFORE), None, []
    emitted = window.start
    for _ in range(draw(st.integers(1, 6))):
        emitted += draw(st.integers(1, 400))
        if standing is not None and draw(st.integers(0, 3)) == 0:
            panes.append(standing.retracted_at(emitted))
            standing = None
            continue
        if history.ended:
            break
        watermark = emitted - 100
        if history.on_time is OnTime.BEFORE and watermark >= window.end:
            history = PaneHistory(history.next_index, history.next_on_time_index, OnTime.OWED)
        info = describe_next_pane(history, window.end, watermark, last=draw(st.integers(0, 7)) == 0)
        standing = Pane(None, window, draw(st.integers(0, 9)), window.end - 1, info.timing, info.index,
                        info.on_time_index, info.first, info.last, emitted)
        panes.append(standing)
        history = history_after(history, info)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(panes) - 1))
        field = draw(st.sampled_from(FIELDS))
        changed = {
            "value": lambda: draw(st.integers(0, 9)),
            "timing": lambda: draw(st.sampled_from(list(PaneTiming))),
            "index": lambda: draw(st.integers(0, 4)),
            "on_time_index": lambda: draw(st.sampled_from([None, 0, 1, 2])),
            "first": lambda: not panes[i].first,
            "last": lambda: not panes[i].last,
            "retraction": lambda: not panes[i].retraction,
        }[field]()
        panes[i] = Pane(**{**panes[i].__dict__, field: changed})
    return panes


def row(pane: Pane, n: int) -> tuple:
    return ("k", at(pane.window.start), at(pane.window.end), pane.value, at(pane.timestamp), pane.timing.value,
            pane.index, pane.on_time_index, pane.first, pane.last, pane.retraction, at(pane.emitted_at), "r1",
            f"p{n}")


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])
@given(data=st.data(), windows=st.integers(8, 24), seed=st.integers(0, 2**16))
def test_pane_gate_flags_exactly_what_the_model_flags(spark, data, windows, seed):
    histories = [data.draw(window_history(IntervalWindow(i * 10_000, i * 10_000 + 1000))) for i in range(windows)]
    rows = [row(p, n) for n, p in enumerate(p for h in histories for p in h)]
    random.Random(seed).shuffle(rows)  # the gate finds the emission order itself
    checked = pane_checks(spark.createDataFrame(rows, SCHEMA), STAGE).collect()

    got: dict[tuple, list[str]] = {}
    for r in checked:
        broken = sorted(rule for rule in HISTORY_RULES if r[f"gate_{rule}"] is False)
        got.setdefault((r["window_start"], r["emitted_at"], r["pane_index"], r["is_retraction"]), []).extend(broken)
    expected: dict[tuple, list[str]] = {}
    for h in histories:
        for p, broken in zip(h, pane_breaks(h)):
            naive = lambda ms: at(ms).replace(tzinfo=None)  # noqa: E731 (Spark returns UTC, naive)
            expected.setdefault((naive(p.window.start), naive(p.emitted_at), p.index, p.retraction), []).extend(
                sorted(rule for rule, _ in broken))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in expected.items()}
    flagged = {r["window_start"] for r in checked if any(r[f"gate_{rule}"] is False for rule in HISTORY_RULES)}
    assert len(flagged) == sum(1 for h in histories if history_breaks(h))


class MySum(SumFn):
    """A user's combiner: a sum by another name (shipped to executors by value: they cannot
    import a test module)."""


def _ship_this_module_by_value() -> None:
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


_ship_this_module_by_value()


@pytest.fixture
def wh(spark, tmp_path):
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "wh"))
    return tmp_path


def test_a_sum_subclass_passes_every_gate(spark, wh):
    """Discarding panes net by the combiner's `output_merge`, not by its name."""
    mode = AccumulationMode.DISCARDING
    from dataflow_core.spark.platform.tables import write_table

    stage = StageSpec("my_sums", WindowingStrategy(FixedWindows(1000), accumulation=mode, combiner=MySum()),
                      ("k",), "bigint")
    w = IntervalWindow(0, 1000)
    panes = [Pane("k", w, 2, 999, PaneTiming.EARLY, 0, None, True, False, 500),
             Pane("k", w, 3, 999, PaneTiming.ON_TIME, 1, 0, False, False, 1500)]
    write_table(spark, spark.createDataFrame([row(p, n) for n, p in enumerate(panes)], SCHEMA), "my_sums_panes",
                mode="overwrite")
    results = [("k", at(0), at(1000), 5, at(999), "ON_TIME", 1, 0, at(1500), "p1", "r1")]
    write_table(spark, spark.createDataFrame(results, (
        "k string, window_start timestamp, window_end timestamp, value bigint, timestamp timestamp, timing string, "
        "pane_index int, on_time_index int, updated_at timestamp, pane_id string, run_id string")), "my_sums",
        mode="overwrite")
    for gate in (gate_panes, gate_results):
        outcome = gate(spark, stage, None, "g", "mine", docs_dir=wh / "docs", build_docs=False)
        assert outcome.success, outcome.lines()
