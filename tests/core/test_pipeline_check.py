"""A pipeline over a user's own table, checked before any Spark job: `dataflow check` reads
the table's schema from its Delta log and says each mistake in one line naming the field
and the fix, within a second of starting and without a JVM (java is not even on the PATH)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dataflow_core.api import (
    AfterProcessingTime, AfterWatermark, CountFn, Decimal, FixedWindows, GlobalWindows, HeuristicWatermark, MeanFn,
    MinFn, SumFn, minutes, stage,
)
from dataflow_core.pipelines.check import check_pipeline, check_warnings, resolve
from dataflow_core.pipelines.spec import PipelineSpec
from dataflow_core.pipelines.table_schema import TableSchema

ROOT = Path(__file__).resolve().parents[2]

SHOP_ORDERS = {"order_id": "string", "shop_id": "string", "amount": "decimal(10,2)", "ordered_at": "timestamp",
               "received_at": "timestamp", "order_day": "date"}

GOOD = '''
from dataflow_core.api import FixedWindows, SumFn, AfterWatermark, AfterCount, hours, pipeline, stage

pipeline(
    "shop_revenue", input_table="shop_orders", key="shop_id", value="amount",
    event_time="ordered_at", ingest_time="received_at", event_id="order_id", partition_column="order_day",
    stages=[stage("shop_revenue", FixedWindows(hours(1)), SumFn(), trigger=AfterWatermark(late=AfterCount(1)),
                  accumulation="accumulating", allowed_lateness="1d")],
)
'''

MISTAKES = '''
from dataflow_core.api import (CountFn, FixedWindows, IntervalWindow, GlobalWindows, SumFn, WindowFn, hours,
                               pipeline, stage)


class Shifts(WindowFn):
    """Eight-hour shifts, with no reach declared."""

    def assign(self, ctx):
        start = ctx.timestamp // hours(8) * hours(8)
        return (IntervalWindow(start, start + hours(8)),)


pipeline(
    "shop_mistakes", input_table="shop_orders", key="shop_id", value="amount_usd",
    event_time="ordered_at", ingest_time="received_at", event_id="order_id",
    partition_column="event_date", quality_suite="video_events",
    stages=[
        stage("shop_mistakes", Shifts(), SumFn(), value_type=float),
        stage("shop_mistake_counts", GlobalWindows(), CountFn(), key_columns=("shop_id", "day"),
              from_upstream=lambda pane: [(pane.key, 1)], input_type=int),
    ],
)
'''


def _table(warehouse: Path, name: str, columns: dict[str, str], partitions: list[str]) -> None:
    """A Delta table's log as Delta writes it (commit 0: protocol and metaData), no data."""
    log = warehouse / name / "_delta_log"
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": c, "type": t, "nullable": True, "metadata": {}}
                                           for c, t in columns.items()]}
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": partitions,
                             "configuration": {}, "createdTime": 0}}]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def _dataflow(tmp_path: Path, module: str, source: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The command's result and the CPU seconds it took: the wall clock of a shared machine
    under load says little, and a JVM alone would take several CPU seconds (the wall clock
    is held to a looser bound)."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "DATAFLOW_PIPELINES": module,
           "PATH": os.path.dirname(sys.executable), "JAVA_HOME": str(tmp_path / "no-java")}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dataflow_core", *args, "--warehouse", str(tmp_path / "wh")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    assert wall < 5, wall
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    _table(tmp_path / "wh", "shop_orders", SHOP_ORDERS, ["order_day"])
    return tmp_path


def test_each_mistake_is_one_line_naming_the_field_and_the_fix_within_a_second(shop):
    done, seconds = _dataflow(shop, "shop_mistakes_pipeline", MISTAKES, "check", "--pipeline", "shop_mistakes")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    prefix = "dataflow check: error: pipeline shop_mistakes: "
    assert all(line.startswith(prefix) for line in lines), lines
    assert [line[len(prefix):] for line in lines] == [
        "value: no column amount_usd in shop_orders (did you mean amount?)",
        "partition_column: no column event_date in shop_orders (shop_orders is partitioned by order_day: "
        "partition_column='order_day')",
        "quality_suite: suite video_events checks column(s) event_id, user_id, video_id, event_time, ingest_time, "
        "watch_seconds, device, which shop_orders lacks (write a suite for shop_orders, or quality_suite=None)",
        "stage shop_mistakes: window Shifts() declares no reach (define WindowFn.reach: how far after an element's "
        "time its windows can end; without it no event id is ever forgotten)",
        "stage shop_mistake_counts: from_upstream gives keys of 1 part(s) but key_columns names 2 (shop_id, day): "
        "make them match",
    ]
    assert seconds < 1.0, seconds


def test_a_pipeline_over_its_own_table_needs_one_import_and_infers_its_value_type(shop):
    done, seconds = _dataflow(shop, "shop_pipeline", GOOD, "check", "--pipeline", "shop_revenue")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pipeline shop_revenue fits table shop_orders (value types: shop_revenue decimal(20,2))"
    assert seconds < 1.0, seconds


def test_backfill_refuses_a_mistaken_pipeline_before_spark(shop):
    done, seconds = _dataflow(shop, "shop_mistakes_pipeline", MISTAKES, "backfill", "--pipeline", "shop_mistakes",
                              "--start", "2024-05-01", "--end", "2024-05-02")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 5, done.stderr
    assert "starting Spark" not in done.stdout
    assert seconds < 1.0, seconds


# --- what each combiner takes and gives, asked of the combiner (no process: check_pipeline) --

ORDERS = TableSchema("shop_orders", {**SHOP_ORDERS, "amount_long": "long", "paid": "boolean"}, ("order_day",))


def orders_pipeline(combiner, value="amount", value_type=None, later=None, then=()) -> PipelineSpec:
    """A one-stage pipeline over `ORDERS`, and a later stage given (combiner, input_type),
    then the stages `then`."""
    stages = [stage("s", FixedWindows(minutes(60)), combiner, accumulation="discarding", value_type=value_type)]
    if later is not None:
        stages.append(stage("t", FixedWindows(minutes(60)), later[0], accumulation="discarding",
                            key_columns=("shop_id",), from_upstream=lambda pane: [(pane.key, pane.value)],
                            input_type=later[1]))
    return PipelineSpec(name="orders", input_table="shop_orders", key="shop_id", value=value,
                        stages=(*stages, *then), watermark=HeuristicWatermark(bound=minutes(2)),
                        event_time="ordered_at", ingest_time="received_at", event_id="order_id")


@pytest.mark.parametrize("value_type, declared", [(bool, "boolean"), (str, "string"), (int, "bigint")])
def test_a_value_type_that_cannot_hold_a_decimal_sum_is_refused_naming_both_types(value_type, declared):
    """An int would drop the cents; a boolean or text is no sum at all."""
    assert check_pipeline(orders_pipeline(SumFn(), value_type=value_type), ORDERS) == [
        f"stage s: value_type {declared} cannot hold sum over value amount (decimal(10,2)), which is "
        "decimal(20,2): value_type='decimal(20,2)' (or leave value_type out to infer it)"]


@pytest.mark.parametrize("value_type", [Decimal, "decimal(20,2)", "decimal(30,4)", float, None])
def test_a_value_type_that_holds_a_decimal_sum_fits(value_type):
    spec = orders_pipeline(SumFn(), value_type=value_type)
    assert check_pipeline(spec, ORDERS) == []
    assert resolve(spec, ORDERS).stages[0].value_type == (spec.stages[0].value_type or "decimal(20,2)")


def test_a_sum_over_a_text_column_is_refused_even_given_a_value_type():
    assert check_pipeline(orders_pipeline(SumFn(), value="shop_id", value_type=int), ORDERS) == [
        "stage s: sum cannot take value shop_id (string): give a value it takes (e.g. a numeric column or a cast), "
        "or a combiner that takes string (count, distinct_count, list, max, min)"]


def test_booleans_are_not_numbers_to_a_sum():
    (line,) = check_pipeline(orders_pipeline(SumFn(), value="paid"), ORDERS)
    assert line.startswith("stage s: sum cannot take value paid (boolean)")


def test_a_count_over_text_fits_and_a_mean_over_text_is_refused():
    assert check_pipeline(orders_pipeline(CountFn(), value="shop_id"), ORDERS) == []
    (line,) = check_pipeline(orders_pipeline(MeanFn(), value="shop_id"), ORDERS)
    assert line.startswith("stage s: mean cannot take value shop_id (string): ")
    assert check_pipeline(orders_pipeline(MinFn(), value="shop_id"), ORDERS) == []


def test_a_later_stage_is_asked_the_same_over_its_input_type():
    assert check_pipeline(orders_pipeline(SumFn(), later=(CountFn(), str)), ORDERS) == []
    assert check_pipeline(orders_pipeline(SumFn(), later=(MeanFn(), str)), ORDERS) == [
        "stage t: mean cannot take input_type string: give a value it takes (e.g. a numeric column or a cast), or a "
        "combiner that takes string (count, distinct_count, list, max, min)"]
    spec = orders_pipeline(SumFn(), later=(MeanFn(), "decimal(20,2)"))
    assert [s.value_type for s in resolve(spec, ORDERS).stages] == ["decimal(20,2)", "double"]


def test_types_are_inferred_from_a_delta_logs_type_names():
    spec = resolve(orders_pipeline(SumFn(), value="amount_long"), ORDERS)  # the log says "long"
    assert spec.stages[0].value_type == "bigint"


def test_over_an_expression_a_value_type_no_such_combiner_gives_is_refused():
    """The input's type is not known without Spark; what a sum or a count can give is."""
    assert check_pipeline(orders_pipeline(SumFn(), value="amount * 100", value_type="decimal(28,2)"), ORDERS) == []
    assert check_pipeline(orders_pipeline(SumFn(), value="amount * 100", value_type=bool), ORDERS) == [
        "stage s: value_type boolean is no type sum gives: give the type of its output (e.g. 'double', 'bigint' or "
        "'decimal(28,3)' for a number), or leave it out"]
    (line,) = check_pipeline(orders_pipeline(CountFn(), value="lower(shop_id)", value_type=str), ORDERS)
    assert line.startswith("stage s: value_type string is no type count gives")


def global_stage(trigger=None, accumulation="accumulating"):
    return stage("g", GlobalWindows(), CountFn(), trigger=trigger, accumulation=accumulation, key_columns=("shop_id",),
                 from_upstream=lambda pane: [(pane.key, 1)], input_type=int)


def test_a_global_window_stage_that_fires_only_at_the_end_of_input_is_a_warning_not_a_mistake():
    spec = orders_pipeline(SumFn(), then=[global_stage()])
    assert check_pipeline(spec, ORDERS) == []
    assert check_warnings(spec) == [
        "stage g: global windows with trigger Repeatedly(AfterWatermark()) fire only at the end of input, so live runs "
        "never update it: give early firings (e.g. trigger=AfterWatermark(early=AfterProcessingTime(minutes(1))) and "
        "an accumulation mode) or finite windows"]
    early = orders_pipeline(SumFn(), then=[global_stage(AfterWatermark(early=AfterProcessingTime(minutes(1))))])
    assert check_warnings(early) == [] and check_warnings(orders_pipeline(SumFn())) == []


SECOND_STAGE = GOOD.replace(
    "allowed_lateness=\"1d\")],",
    "allowed_lateness=\"1d\"),\n            stage(\"shop_totals\", GlobalWindows(), SumFn(),\n"
    "                  key_columns=(\"shop_id\",),\n"
    "                  from_upstream=lambda pane: [(pane.key, pane.value)], input_type=\"decimal(20,2)\")],",
).replace("import FixedWindows,", "import FixedWindows, GlobalWindows,")


def test_check_warns_of_a_stage_that_never_fires_live_and_still_fits(shop):
    """The doc's "A second stage" shape (global windows, default trigger): it fits, and the
    check says in one line that it never updates live."""
    done, _ = _dataflow(shop, "shop_second_pipeline", SECOND_STAGE, "check", "--pipeline", "shop_revenue")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("pipeline shop_revenue fits table shop_orders (value types: shop_revenue "
                                   "decimal(20,2), shop_totals decimal(30,2))")
    (warning,) = done.stderr.splitlines()
    assert warning.startswith("dataflow check: warning: pipeline shop_revenue: stage shop_totals: global windows with "
                              "trigger Repeatedly(AfterWatermark()) fire only at the end of input")


def test_a_mismatched_value_type_is_one_line_before_spark(shop):
    source = GOOD.replace('allowed_lateness="1d")', 'allowed_lateness="1d", value_type=int)')
    done, _ = _dataflow(shop, "shop_int_pipeline", source, "backfill", "--pipeline", "shop_revenue",
                        "--start", "2024-05-01", "--end", "2024-05-02")
    assert done.returncode == 2 and "starting Spark" not in done.stdout
    assert done.stderr.splitlines() == [
        "dataflow backfill: error: pipeline shop_revenue: stage shop_revenue: value_type bigint cannot hold sum over "
        "value amount (decimal(10,2)), which is decimal(20,2): value_type='decimal(20,2)' (or leave value_type out "
        "to infer it)"]


def test_a_cast_value_has_the_type_it_is_cast_to():
    spec = orders_pipeline(SumFn(), value="CAST(amount AS double)")
    assert check_pipeline(spec, ORDERS) == [] and resolve(spec, ORDERS).stages[0].value_type == "double"
    assert resolve(orders_pipeline(SumFn(), value="try_cast(amount as decimal(12, 2))"), ORDERS).stages[0].value_type \
        == "decimal(22,2)"
    (line,) = check_pipeline(orders_pipeline(SumFn(), value="cast(amount as string)"), ORDERS)
    assert line.startswith("stage s: sum cannot take value cast(amount as string) (string)")
    # Casts inside an expression do not say its type.
    (line,) = check_pipeline(orders_pipeline(SumFn(), value="cast(amount as int) / cast(amount as int)"), ORDERS)
    assert line.startswith("stage s: value_type: cannot infer the type of sum over value cast(amount as int) /")
