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
