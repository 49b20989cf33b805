"""Combiner lifting on Spark (`spark/execute/lifting.py`): the SQL forms the model declares
equal its Python rules (`WindowFn.sql_window` == `assign`, `CombineFn.sql_partial` ==
`add_input` element by element), and a stage run lifted gives exactly the output rows of
the same stage run element by element, which equal the reference runner's panes: one
stage and two, over random strategies and histories (tiny data, the shared session)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN
from dataflow_core.model.lifting import lifts
from dataflow_core.model.pane_codec import pane_from_row
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.time import parse_duration as d
from dataflow_core.model.windows import AssignContext, FixedWindows, GlobalWindows, Sessions
from dataflow_core.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
from dataflow_core.pipelines.spec import StageSpec
from dataflow_core.runners.schedule import HoldSpan, Schedule, Step, downstream_schedule
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.execute.lifting import lift_arrivals
from dataflow_core.spark.input.upstream import elements_from_panes
from tests.core.histories import START, histories
from tests.core.test_keyed import reference
from tests.core.test_lifting import COMBINERS, LATENESS, LIFTED_TRIGGERS, LIFTED_WINDOWS, make

pytestmark = pytest.mark.integration

SPARK_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])

# Input value types per combiner; floating point only where the partial is exact for it.
INPUT_TYPES = {
    "sum": ["decimal(18,3)", "bigint"], "count": ["bigint", "double"], "mean": ["bigint"],
    "min": ["bigint", "double", "decimal(18,3)"], "max": ["bigint", "double"], "list": ["bigint", "double"],
    "distinct_count": ["bigint", "double"],
}


def output_type(combiner: str, input_type: str) -> str:
    return {"count": "bigint", "distinct_count": "bigint", "mean": "double",
            "list": f"array<{input_type}>"}.get(combiner, "decimal(28,3)" if input_type.startswith("decimal") else input_type)


def python_value(v, input_type: str):
    return Decimal(v) if input_type.startswith("decimal") else float(v) if input_type == "double" else int(v)


@settings(max_examples=5, **SPARK_SETTINGS)
@given(times=st.lists(st.integers(-10**13, 10**13) | st.integers(-5000, 5000), min_size=1, max_size=40),
       size=st.integers(1, 10**8), offset=st.integers(0, 10**6))
def test_sql_window_equals_assign(spark, times, size, offset):
    for wfn in (FixedWindows(size, offset), GlobalWindows(), FixedWindows(d("1h"))):
        start, end = wfn.sql_window("event_ms")
        df = spark.createDataFrame([(t,) for t in times], "event_ms bigint")
        got = {r[0]: (r[1], r[2]) for r in df.selectExpr("event_ms", f"{start}", f"{end}").collect()}
        for t in times:
            (w,) = wfn.assign(AssignContext("k", None, t))
            want = (None, None) if isinstance(wfn, GlobalWindows) else (w.start, w.end)
            assert got[t] == want, (wfn.describe(), t)


@settings(max_examples=4, **SPARK_SETTINGS)
@given(values=st.lists(st.integers(-50, 50), min_size=1, max_size=30), data=st.data())
def test_sql_partial_equals_adding_inputs(spark, values, data):
    for name, types in INPUT_TYPES.items():
        c = BUILT_IN[name]()
        t = data.draw(st.sampled_from(types))
        df = spark.createDataFrame([(python_value(v, t),) for v in values], f"value {t}")
        [row] = df.selectExpr(*[f"{sql} AS `{field}`" for field, sql in c.sql_partial]).collect()
        want = c.add_inputs(c.create_accumulator(), [python_value(v, t) for v in values])
        assert c.from_partial(row.asDict()) == want, name


def schedule_and_rows(history, input_type: str, key_col: str = "k"):
    steps, rows, wm = [], [], START
    for n, h in enumerate(history):
        if h.watermark is not None:
            wm = max(wm, h.watermark)
        steps.append(Step((n,), h.at, wm))
        rows += [(key, python_value(v, input_type), t, False, [n], h.at) for key, v, t in h.add]
    return Schedule(steps, START), rows


def arrivals_frame(spark, rows, input_type: str):
    schema = f"k string, value {input_type}, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"
    return spark.createDataFrame(rows, schema)


def normalized(value):
    if isinstance(value, list):
        return tuple(sorted(normalized(v) for v in value))
    return Decimal(value) if isinstance(value, int) and not isinstance(value, bool) else value


def spark_panes(out_rows, key_of=lambda r: r["k"]) -> Counter:
    return Counter(
        (lambda p: (p.key, p.window, normalized(p.value), p.timestamp, p.timing, p.index, p.on_time_index,
                    p.first, p.last, p.retraction, p.emitted_at))(pane_from_row(key_of(r), r.asDict()))
        for r in out_rows if r["kind"] == "pane"
    )


def reference_panes(panes) -> Counter:
    return Counter((p.key, p.window, normalized(p.value), p.timestamp, p.timing, p.index, p.on_time_index,
                    p.first, p.last, p.retraction, p.emitted_at) for p in panes)


def as_rows(out) -> list[tuple]:
    return sorted((repr(tuple(r)) for r in out.collect()))


@settings(max_examples=8, **SPARK_SETTINGS)
@given(history=histories(), window_fn=LIFTED_WINDOWS, trigger=LIFTED_TRIGGERS,
       mode=st.sampled_from(list(AccumulationMode)), lateness=LATENESS, combiner=COMBINERS, data=st.data())
def test_one_stage_lifted_equals_unlifted_and_reference(spark, history, window_fn, trigger, mode, lateness,
                                                        combiner, data):
    strategy = make(window_fn, trigger, mode, lateness, combiner)
    input_type = data.draw(st.sampled_from(INPUT_TYPES[combiner]))
    schedule, rows = schedule_and_rows(history, input_type)
    if not rows:
        return
    df = arrivals_frame(spark, rows, input_type)
    assert lift_arrivals(df, strategy, ("k",)).count() <= len(rows)
    vt = output_type(combiner, input_type)
    lifted = run_stage(df, strategy, schedule, KeyCodec(("k",)), vt, lift=True).collect()
    plain = run_stage(df, strategy, schedule, KeyCodec(("k",)), vt, lift=False).collect()
    assert sorted(map(repr, lifted)) == sorted(map(repr, plain))
    ref = reference(Pipeline.of(Stage("s", strategy)), history)
    assert spark_panes(lifted) == reference_panes(ref.outputs[0])
    assert sum(r["dropped_elements"] for r in lifted if r["kind"] == "stats") == sum(
        ks.dropped_elements for ks in ref.stages[0].keys.values())


KEYS = (("u1", "ad1"), ("u2", "ad1"), ("u1", "ad2"))


@settings(max_examples=6, **SPARK_SETTINGS)
@given(history=histories(keys=KEYS), trigger=LIFTED_TRIGGERS, mode=st.sampled_from(list(AccumulationMode)),
       combiner=COMBINERS, first=st.sampled_from([FixedWindows(d("2m")), Sessions(d("30s"))]),
       second=LIFTED_WINDOWS)
def test_two_stages_lifted_equal_unlifted_and_reference(spark, history, trigger, mode, combiner, first, second):
    """Stage 1 counts (lifted when fixed) feed stage 2 per ad, retractions included."""
    per_ad = lambda pane: [(pane.key[1], pane.value)]  # noqa: E731 - shipped to executors by value
    one = make(first, AfterWatermark(early=AfterProcessingTime(d("1m")), late=AfterCount(1)), mode, d("2m"), "count")
    two = make(second, trigger, AccumulationMode.ACCUMULATING, d("1m"), combiner)
    s1 = StageSpec("one", one, ("u", "ad"), "bigint")
    s2 = StageSpec("two", two, ("ad",), output_type(combiner, "bigint"), from_upstream=per_ad, input_type="bigint")
    schedule, rows = schedule_and_rows(history, "bigint")
    if not rows:
        return
    schema = "u string, ad string, value bigint, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"
    df = spark.createDataFrame([(k[0], k[1], *rest) for k, *rest in rows], schema)
    ref = reference(Pipeline.of(Stage("one", one), Stage("two", two, per_ad)), history)
    outputs = {}
    for lift in (False, True):
        out1 = run_stage(df, one, schedule, KeyCodec(s1.key_columns), "bigint", lift=lift and lifts(one)).persist()
        spans = [HoldSpan(tuple(r["sub"]), r["hold_time"], None if r["hold_end"] is None else tuple(r["hold_end"]),
                          r["hold_end_time"], r["hold"]) for r in out1.where("kind = 'hold'").collect()]
        panes = out1.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn("at_ms", out1["emitted_at"])
        mapped = elements_from_panes(panes, s1, s2, passthrough=("seq", "at_ms"))
        out2 = run_stage(mapped, two, downstream_schedule(schedule, spans), KeyCodec(s2.key_columns),
                         s2.value_type, lift=lift, track_holds=False)
        r1, r2 = out1.collect(), out2.collect()
        out1.unpersist()
        assert spark_panes(r1, lambda r: (r["u"], r["ad"])) == reference_panes(ref.outputs[0]), f"stage 1, lift={lift}"
        assert spark_panes(r2, lambda r: r["ad"]) == reference_panes(ref.outputs[1]), f"stage 2, lift={lift}"
        outputs[lift] = (sorted(map(repr, r1)), sorted(map(repr, r2)))
    assert outputs[True] == outputs[False]
