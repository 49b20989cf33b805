"""The pre-flight check reads a Delta table's schema from its log as Spark sees it, also once
the log has a checkpoint and the schema changed after it."""

from __future__ import annotations

import pytest

from dataflow_core.pipelines.table_schema import read_schema

pytestmark = pytest.mark.integration


def test_the_schema_from_the_log_is_sparks_after_a_checkpoint_and_a_new_column(spark, tmp_path):
    path = tmp_path / "wh" / "orders"
    rows = spark.createDataFrame([("o1", "s1", "12.50", "2024-05-01")], "order_id string, shop_id string, "
                                 "amount string, order_day string").selectExpr(
        "order_id", "shop_id", "CAST(amount AS DECIMAL(10,2)) AS amount", "CAST(order_day AS DATE) AS order_day")
    rows.write.format("delta").partitionBy("order_day").save(str(path))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for _ in range(3):
        rows.write.format("delta").mode("append").save(str(path))
    assert list((path / "_delta_log").glob("*.checkpoint*.parquet"))
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (received_at TIMESTAMP)")

    schema = read_schema(str(tmp_path / "wh"), "orders")

    expected = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(str(path)).schema}
    assert schema.columns == expected
    assert schema.columns["amount"] == "decimal(10,2)" and schema.partition_columns == ("order_day",)
