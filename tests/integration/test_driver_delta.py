"""Commits from the driver through delta-rs (`platform.driver_delta`), as `dataflow_batches` is
written, keep Delta's exactly-once rules with Spark on the same table: an idempotent key either
writer committed is skipped by both, and two writers committing one key at once do not both
land. (Spark and delta-rs racing on one table, on S3 and a local folder, each a driver of its
own: tests/integration/test_s3_warehouse.py.)"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from dataflow_core.spark.platform import driver_delta
from dataflow_core.spark.platform.delta import append_rows, create_table
from dataflow_core.spark.platform.tables import read_table, table_path
from dataflow_core.spark.sinks.batch_records import BATCHES_SCHEMA, BATCHES_TABLE

pytestmark = pytest.mark.integration

SCHEMA = "tag string, n bigint"


def _tags(spark, name: str) -> list[tuple]:
    return sorted((r["tag"], r["n"]) for r in read_table(spark, name).collect())


def test_an_idempotent_key_committed_by_either_writer_is_skipped_by_both(spark):
    create_table(spark, "driver_keys", SCHEMA)
    path = table_path(spark, "driver_keys")

    first = driver_delta.append(path, [("rs", 1)], SCHEMA, ("app", 1), note="run-1")
    assert first == 1 and driver_delta.identity(driver_delta.open_table(path))[1] == 1
    assert driver_delta.append(path, [("rs", 1)], SCHEMA, ("app", 1)) is None  # a retry
    assert driver_delta.append(path, [("rs", 0)], SCHEMA, ("app", 0)) is None  # an older key
    append_rows(spark, "driver_keys", spark.createDataFrame([("spark", 1)], SCHEMA), ("app", 1))  # Spark skips it
    append_rows(spark, "driver_keys", spark.createDataFrame([("spark", 2)], SCHEMA), ("app", 2))
    assert driver_delta.append(path, [("rs", 2)], SCHEMA, ("app", 2)) is None  # delta-rs skips Spark's
    assert _tags(spark, "driver_keys") == [("rs", 1), ("spark", 2)]

    actions = driver_delta.commit_actions(path, first)
    assert {"appId": "app", "version": 1} in [a["txn"] for a in actions if "txn" in a]
    assert next(a["commitInfo"] for a in actions if "commitInfo" in a)["userMetadata"] == "run-1"


def test_two_writers_committing_one_key_from_one_version_do_not_both_land(spark):
    create_table(spark, "driver_race", SCHEMA)
    path = table_path(spark, "driver_race")
    rows = pa.table({"tag": ["x"], "n": pa.array([1], pa.int64())})
    both = [DeltaTable(path), DeltaTable(path)]  # both read version 0, then commit key ("app", 1)
    key = CommitProperties(app_transactions=[Transaction("app", 1)])
    write_deltalake(both[0], rows, mode="append", commit_properties=key)
    with pytest.raises(CommitFailedError):
        write_deltalake(both[1], rows, mode="append", commit_properties=key)
    assert _tags(spark, "driver_race") == [("x", 1)]


def test_a_control_table_made_on_the_driver_is_the_table_spark_would_make(spark):
    """`create_table` (delta-rs) gives the columns, types and table properties a Spark write of
    the same schema in this session gives, and making it again changes nothing."""
    create_table(spark, BATCHES_TABLE, BATCHES_SCHEMA)
    made = DeltaTable(table_path(spark, BATCHES_TABLE)).version()
    create_table(spark, BATCHES_TABLE, BATCHES_SCHEMA)
    by_spark = table_path(spark, "batches_by_spark")
    spark.createDataFrame([], BATCHES_SCHEMA).write.format("delta").save(by_spark)
    ours, theirs = DeltaTable(table_path(spark, BATCHES_TABLE)), DeltaTable(by_spark)
    assert ours.version() == made
    assert pa.schema(ours.schema().to_arrow()).equals(pa.schema(theirs.schema().to_arrow()))
    assert ours.metadata().configuration == theirs.metadata().configuration
    assert ours.metadata().configuration.get("delta.checkpointInterval") == "50"  # the session's default
    assert spark.read.format("delta").load(table_path(spark, BATCHES_TABLE)).columns == list(
        driver_delta.arrow_schema(BATCHES_SCHEMA).names)
