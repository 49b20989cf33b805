"""A pipeline edited between runs is refused, not carried on: a stage's window made 30
minutes after its live state and pane log were written under 1 hour stops the next
micro-batch, backfill and plan with one line naming the change, and nothing is written;
starting over (`reset --drop-outputs`) lets the new definition run."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import replace

import pytest

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.triggers import AfterCount, AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.pipelines.registry import replace_registered
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.jobs.reset import reset_pipeline
from dataflow_core.spark.platform.tables import read_table, snapshot_version, table_path, write_table
from dataflow_core.spark.sinks.definitions import PROPERTY, DefinitionChanged, stage_tables

H, M = 3_600_000, 60_000
DAY0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
_names = itertools.count()


def orders_pipeline(name: str, window: int) -> PipelineSpec:
    return PipelineSpec(
        name=name, input_table=f"{name}_orders", key={"shop": "shop"}, value="amount",
        event_time="placed_at", ingest_time="arrived_at", event_id="order_no",
        watermark=lambda: HeuristicWatermark(bound=M),
        stages=(StageSpec(f"{name}_revenue", WindowingStrategy(
            FixedWindows(window), AfterWatermark(late=AfterCount(1)), AccumulationMode.ACCUMULATING, H, SumFn()),
            value_type="bigint"),),
    )


def write_orders(spark, table: str, minutes: list[int], day: dt.datetime = DAY0) -> None:
    rows = [(f"o{m}", "s1", 10 + m, day + dt.timedelta(minutes=m), day + dt.timedelta(minutes=m, seconds=5))
            for m in minutes]
    df = spark.createDataFrame(rows, "order_no string, shop string, amount bigint, placed_at timestamp, "
                                     "arrived_at timestamp")
    write_table(spark, df, table, mode="append")


def recorded(spark, name: str) -> str | None:
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.`{table_path(spark, name)}`").collect()
    return next((r["value"] for r in rows if r["key"] == PROPERTY), None)


def test_an_edited_window_is_refused_until_the_pipeline_starts_over(spark):
    name = f"t_defn_{next(_names)}"
    hourly = register(orders_pipeline(name, H))
    stage = hourly.stages[0]
    write_orders(spark, hourly.input_table, [5, 20, 50, 70])
    run_microbatch(spark, name, now=(DAY0 + dt.timedelta(hours=3)).isoformat())
    for table in stage_tables(stage):
        assert '"window": "FixedWindows(1h)"' in (recorded(spark, table) or ""), table

    replace_registered(replace(hourly, stages=(replace(stage, strategy=replace(stage.strategy,
                                                                               window_fn=FixedWindows(30 * M))),)))
    write_orders(spark, hourly.input_table, [100])
    versions = {t: snapshot_version(spark, table_path(spark, t)) for t in stage_tables(stage)}
    with pytest.raises(DefinitionChanged) as refused:
        run_microbatch(spark, name, now=(DAY0 + dt.timedelta(hours=4)).isoformat())
    line = str(refused.value)
    assert "\n" not in line and "window FixedWindows(1h) -> FixedWindows(30m)" in line
    assert f"dataflow reset --pipeline {name} --drop-outputs" in line
    with pytest.raises(DefinitionChanged):
        run_backfill(spark, name, "2024-05-01", "2024-05-02")
    assert {t: snapshot_version(spark, table_path(spark, t)) for t in stage_tables(stage)} == versions, \
        "a refused run writes nothing"

    reset_pipeline(spark, name, drop_outputs=True)
    run_microbatch(spark, name, now=(DAY0 + dt.timedelta(hours=5)).isoformat())
    sizes = {(r["window_end"] - r["window_start"]) for r in read_table(spark, stage.output).collect()}
    assert sizes == {dt.timedelta(minutes=30)}, "after starting over only the new definition's windows"
    assert '"window": "FixedWindows(30m)"' in recorded(spark, stage.output)
