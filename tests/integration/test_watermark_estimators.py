"""The watermark estimators the Spark runners feed (docs/model.md, "Watermark estimators"),
on a pipeline with its own column names: a percentile watermark live in micro-batches, a
perfect watermark in an arrival-order replay, each equal to the reference runner fed the
same batches; and the per-batch summary Spark aggregates equals the model's."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark
from dataflow_core.model.watermarks import (
    BEGINNING_OF_TIME, PercentileWatermark, PerfectWatermark, WatermarkEstimator, summarize,
)
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.runners.reference import ReferencePipelineRunner, reference_watermarks
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.jobs.observe import summary_columns, summary_of
from dataflow_core.spark.platform.tables import read_table, write_table
from tests.integration.test_backfill import DAY0, M, expected, ms, ts

_names = itertools.count()
SCHEMA = "order_id string, shop_id string, amount bigint, ordered_at timestamp, received_at timestamp"
INTERVAL = 4 * M
# (shop, amount, ordered at s, received after s), in five 4-minute batches by receipt. Batch 2
# brings a straggler from minute 0; batch 4 an order of minute 8 after window [0, 10) closed.
ORDERS = [("s1", 5, 60, 10), ("s2", 7, 120, 10), ("s1", 1, 180, 10),
          ("s1", 2, 300, 10), ("s2", 4, 360, 10), ("s1", 3, 420, 10), ("s2", 9, 30, 420),
          ("s1", 6, 540, 10), ("s2", 1, 630, 10), ("s1", 8, 660, 10),
          ("s1", 2, 780, 10), ("s2", 3, 840, 10), ("s1", 4, 480, 460),
          ("s2", 5, 1140, 30)]


def orders_pipeline(name: str, estimator: WatermarkEstimator) -> PipelineSpec:
    """Sums per shop in 10-minute windows, an on-time pane at the watermark and a late pane
    per late order, over a table of its own column names."""
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key="shop_id", value="amount", watermark=estimator,
        event_time="ordered_at", ingest_time="received_at", event_id="order_id",
        stages=(StageSpec(f"{name}_sums", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(late=AfterCount(1)), AccumulationMode.ACCUMULATING,
            parse_duration("1h"), SumFn()), value_type="bigint"),),
    ))


def rows_of(orders) -> list[tuple]:
    return [(f"o{n}", shop, amount, DAY0 + at * 1000, DAY0 + (at + delay) * 1000)
            for n, (shop, amount, at, delay) in enumerate(orders)]


def write_orders(spark, table: str, rows: list[tuple], mode: str) -> None:
    df = spark.createDataFrame([(o, s, a, ts(e), ts(i)) for o, s, a, e, i in rows], SCHEMA)
    write_table(spark, df, table, mode=mode)


def batches_of(rows: list[tuple]) -> list[tuple[int, list[tuple]]]:
    """The replay's batches of receipt time: (its end, its rows), empty ones included."""
    t0 = min(r[4] for r in rows)
    t0 -= t0 % INTERVAL
    last = (max(r[4] for r in rows) - t0) // INTERVAL
    return [(t0 + (b + 1) * INTERVAL, [r for r in rows if (r[4] - t0) // INTERVAL == b]) for b in range(last + 1)]


def reference(spec: PipelineSpec, batches, bounded: bool):
    """The reference runner over the same batches, its watermark the estimator fed every
    event time (`reference_watermarks`). Returns its first stage's panes and the watermarks."""
    runner = ReferencePipelineRunner(Pipeline.of(*(Stage(s.output, s.strategy) for s in spec.stages)),
                                     BEGINNING_OF_TIME)
    wms = reference_watermarks(spec.watermark(), [(at, [r[3] for r in b]) for at, b in batches],
                               spec.max_skew, bounded=bounded)
    for (at, batch), wm in zip(batches, wms):
        runner.advance_processing_time(at)
        if batch:
            runner.add([(shop, amount, event) for _, shop, amount, event, _ in batch])
        runner.advance_watermark(wm)
    return runner.outputs[0], wms


def pane_log(spark, spec: PipelineSpec) -> Counter:
    rows = read_table(spark, f"{spec.stages[0].output}_panes").collect()
    return Counter(((r["shop_id"],), ms(r["window_start"]), ms(r["window_end"]), int(r["value"]), r["timing"],
                    r["pane_index"], r["on_time_index"], r["is_retraction"], ms(r["emitted_at"])) for r in rows)


def test_a_percentile_watermark_live_fires_on_time_panes_equal_to_the_reference_runners(spark):
    spec = orders_pipeline(f"t_pct_{next(_names)}", PercentileWatermark(0.5))
    batches = batches_of(rows_of(ORDERS))
    recorded = []
    for n, (end, batch) in enumerate(batches):
        if batch:
            write_orders(spark, spec.input_table, batch, "overwrite" if n == 0 else "append")
        assert run_microbatch(spark, spec.name, now=format_instant(end)).ledger_ok
    for r in read_table(spark, "dataflow_batches").where(f"pipeline = '{spec.name}' AND status = 'finished'") \
            .orderBy("batch").collect():
        recorded.append(json.loads(r["watermarks"])["input"])
    panes, wms = reference(spec, batches, bounded=False)
    assert recorded == wms
    assert wms[0] == DAY0 + 120_000  # the median of minutes 1, 2, 3: the percentile moved it
    got = pane_log(spark, spec)
    assert got == expected(spec, panes, 0)
    timings = Counter(p[4] for p in got.elements())
    assert timings["ON_TIME"] >= 2 and timings["LATE"] >= 1, timings


def test_a_perfect_watermark_replayed_on_spark_equals_the_reference_runners(spark):
    """A bounded replay feeds PENDING (the least event time still to replay): no order is
    late, and the last batch ends the watermark."""
    spec = orders_pipeline(f"t_perfect_{next(_names)}", PerfectWatermark())
    rows = rows_of(ORDERS)
    write_orders(spark, spec.input_table, rows, "overwrite")
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", replay=True, batch_interval="4m")
    panes, _ = reference(spec, batches_of(rows), bounded=True)
    got = pane_log(spark, spec)
    assert got == expected(spec, panes, 0)
    assert {p[4] for p in got} == {"ON_TIME"}
    assert result.ledger_ok


def test_the_summary_spark_aggregates_per_batch_equals_the_models(spark):
    rng = random.Random(7)
    rows = [(rng.randrange(4), DAY0 + rng.randrange(-M, 10 * M)) for _ in range(60)]
    estimator = PercentileWatermark(0.07)  # 0.07 * n is not exact in floating point
    df = spark.createDataFrame(rows, "batch int, event_ms bigint")
    got = {r["batch"]: summary_of(r, estimator)
           for r in df.groupBy("batch").agg(*summary_columns(estimator)).collect()}
    want = {b: summarize([t for bb, t in rows if bb == b], estimator.quantiles) for b in {b for b, _ in rows}}
    assert got == want
    empty = df.where("batch < 0").agg(*summary_columns(estimator)).first()
    assert summary_of(empty, estimator) == summarize([], estimator.quantiles)
