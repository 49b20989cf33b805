"""`--loop` over an input table that gains a column: Delta's streaming source stops its query
at the schema change; the loop starts the stream again and counts the rows written with the
new column (a bad one quarantined with it), instead of dying."""

from __future__ import annotations

import datetime as dt
import threading
import time

from dataflow_core.pipelines import register
from dataflow_core.spark.jobs.microbatch import run_loop
from dataflow_core.spark.platform.session import WAREHOUSE_CONF
from dataflow_core.spark.platform.tables import table_path
from tests.integration.test_definitions import orders_pipeline, write_orders

H = 3_600_000


def test_a_loop_carries_on_after_a_column_is_added_to_its_input(spark):
    spec = register(orders_pipeline("t_loop_schema", H))
    writer = spark.newSession()  # the loop's session has idempotent-write settings of its own
    writer.conf.set(WAREHOUSE_CONF, spark.conf.get(WAREHOUSE_CONF))
    write_orders(writer, spec.input_table, [1, 2])
    results, errors, said, stop = [], [], [], threading.Event()

    def run() -> None:
        try:
            run_loop(spark, spec.name, 0.5, progress=said.append, on_result=results.append, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    def wait_for(read: int) -> None:
        deadline = time.monotonic() + 240
        while sum(r.ledger["read"] for r in results) < read:
            assert not errors, errors
            assert thread.is_alive(), f"the loop stopped by itself: {said[-3:]}"
            assert time.monotonic() < deadline, f"{read} rows not read after 240 s: {said[-3:]}"
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(2)
        day = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
        widened = writer.createDataFrame(
            [("o3", "s1", 13, day + dt.timedelta(minutes=3), day + dt.timedelta(minutes=3, seconds=5), "web"),
             ("o4", "s1", None, day + dt.timedelta(minutes=4), day + dt.timedelta(minutes=4, seconds=5), "app")],
            "order_no string, shop string, amount bigint, placed_at timestamp, arrived_at timestamp, channel string")
        widened.write.format("delta").mode("append").option("mergeSchema", "true").save(
            table_path(writer, spec.input_table))
        wait_for(4)
    finally:
        stop.set()
        thread.join(180)
    assert not errors, errors
    assert sum(r.ledger["quarantined"] for r in results) == 1, results
