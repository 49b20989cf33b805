"""A results table is created with Delta's change data feed on: a downstream reader that asks
Delta what changed since the version it last read gets exactly the corrected windows' rows,
with Delta's own `readChangeFeed` (docs/spark-runner.md, "What changed since I last read")."""

from __future__ import annotations

import itertools
from decimal import Decimal

from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.platform.delta import table_version
from tests.integration.test_input_rules import GOOD, T, orders_pipeline, write_orders

_names = itertools.count()


def test_a_reader_of_the_change_feed_sees_the_corrected_window_only(spark):
    spec = orders_pipeline(f"t_change_feed_{next(_names)}")
    output = spec.stages[0].output
    write_orders(spark, spec.input_table, GOOD + [("g4", "shop/8", 1.0, T + 11 * 60_000, T + 11 * 60_000)])
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    read_up_to = table_version(spark, output)
    write_orders(spark, spec.input_table, [("late", "shop/7", 0.5, T, T + 3_600_000)], mode="append")
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T13:00:00Z")
    changes = (spark.read.format("delta").option("readChangeFeed", "true")
               .option("startingVersion", read_up_to + 1).table(output).collect())
    assert sorted((r["shop"], r["_change_type"], r["value"]) for r in changes) == [
        ("7", "update_postimage", Decimal("4.250")), ("7", "update_preimage", Decimal("3.750"))]
