"""Tables by name on real Delta: write, read back (Spark and a non-Spark reader), upsert, SQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable as RustDeltaTable
from deltalake import write_deltalake
import pyarrow as pa

from dataflow_core.errors import DataflowError
from dataflow_core.spark.platform.tables import (
    list_tables,
    merge_upsert,
    read_table,
    register_tables,
    table_path,
    write_table,
)

pytestmark = pytest.mark.integration

SCHEMA = "user_id long, title string, minutes double"


def _rows(df) -> list[tuple]:
    return sorted(tuple(row) for row in df.collect())


def test_written_table_is_a_plain_delta_folder_readable_without_spark(spark, warehouse: Path):
    df = spark.createDataFrame([(1, "intro", 3.5), (2, "outro", None)], SCHEMA)
    result = write_table(spark, df, "plays_roundtrip")

    assert table_path(spark, "plays_roundtrip") == str(warehouse / "plays_roundtrip")
    assert (warehouse / "plays_roundtrip" / "_delta_log").is_dir()
    assert (result.version, result.rows_inserted, result.rows_updated) == (0, 2, 0)
    assert _rows(read_table(spark, "plays_roundtrip")) == [(1, "intro", 3.5), (2, "outro", None)]
    # The delta-rs reader shares no code with Spark: the folder is standard Delta.
    other = RustDeltaTable(str(warehouse / "plays_roundtrip")).to_pyarrow_table().to_pylist()
    assert sorted((r["user_id"], r["title"], r["minutes"]) for r in other) == [
        (1, "intro", 3.5),
        (2, "outro", None),
    ]


def test_overwrite_replaces_and_append_adds(spark):
    write_table(spark, spark.createDataFrame([(1, "a", 1.0)], SCHEMA), "plays_modes")
    write_table(spark, spark.createDataFrame([(2, "b", 2.0)], SCHEMA), "plays_modes")
    assert _rows(read_table(spark, "plays_modes")) == [(2, "b", 2.0)]
    result = write_table(spark, spark.createDataFrame([(3, "c", 3.0)], SCHEMA), "plays_modes", mode="append")
    assert result.version == 2
    assert _rows(read_table(spark, "plays_modes")) == [(2, "b", 2.0), (3, "c", 3.0)]


def test_merge_upsert_updates_matched_inserts_new_and_reruns_without_duplicates(spark):
    first = spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA)
    created = merge_upsert(spark, first, "plays_upsert", keys=["user_id", "title"])
    assert (created.rows_inserted, created.rows_updated) == (2, 0)

    change = spark.createDataFrame([(2, "b", 20.0), (3, "c", 3.0)], SCHEMA)
    merged = merge_upsert(spark, change, "plays_upsert", keys=["user_id", "title"])
    assert (merged.version, merged.rows_inserted, merged.rows_updated) == (1, 1, 1)
    expected = [(1, "a", 1.0), (2, "b", 20.0), (3, "c", 3.0)]
    assert _rows(read_table(spark, "plays_upsert")) == expected

    again = merge_upsert(spark, change, "plays_upsert", keys=["user_id", "title"])
    assert again.rows_inserted == 0
    assert _rows(read_table(spark, "plays_upsert")) == expected


def test_merge_upsert_matches_null_keys_instead_of_duplicating(spark):
    rows = spark.createDataFrame([(None, "x", 1.0)], SCHEMA)
    merge_upsert(spark, rows, "plays_null_key", keys=["user_id", "title"])
    merge_upsert(spark, spark.createDataFrame([(None, "x", 5.0)], SCHEMA), "plays_null_key", keys=["user_id", "title"])
    assert _rows(read_table(spark, "plays_null_key")) == [(None, "x", 5.0)]


def test_merge_upsert_creates_partitioned_table(spark, warehouse: Path):
    df = spark.createDataFrame([(1, "a", 1.0), (2, "b", 2.0)], SCHEMA)
    merge_upsert(spark, df, "plays_partitioned", keys=["user_id"], partition_by=["title"])
    assert (warehouse / "plays_partitioned" / "title=a").is_dir()
    assert RustDeltaTable(str(warehouse / "plays_partitioned")).metadata().partition_columns == ["title"]


def test_tables_are_queryable_by_name_including_ones_written_outside_spark(spark, warehouse: Path):
    write_table(spark, spark.createDataFrame([(7, "z", 7.0)], SCHEMA), "plays_sql")
    write_deltalake(str(warehouse / "devices_external"), pa.table({"device": ["tv", "phone"]}))

    names = register_tables(spark)

    assert {"plays_sql", "devices_external"} <= set(names)
    assert names == list_tables(spark)
    assert spark.sql("SELECT title FROM plays_sql").collect()[0]["title"] == "z"
    devices = spark.sql("SELECT device FROM devices_external ORDER BY device").collect()
    assert [row["device"] for row in devices] == ["phone", "tv"]


def test_missing_table_error_names_the_table_and_the_warehouse(spark, warehouse: Path):
    with pytest.raises(DataflowError) as error:
        read_table(spark, "no_such_table")
    message = str(error.value)
    assert "'no_such_table'" in message and str(warehouse) in message


def test_bad_arguments_are_named(spark):
    df = spark.createDataFrame([(1, "a", 1.0), (1, "a", 2.0)], SCHEMA)
    with pytest.raises(DataflowError, match=r"keys \['session_id'\] not among"):
        merge_upsert(spark, df, "plays_bad", keys=["session_id"])
    with pytest.raises(DataflowError, match="occurs 2 times"):
        merge_upsert(spark, df, "plays_bad", keys=["user_id", "title"])
    with pytest.raises(DataflowError, match="bad table name"):
        write_table(spark, df, "../escape")
    assert "plays_bad" not in list_tables(spark)


def test_merge_with_duplicate_source_keys_gives_one_clear_error(spark):
    merge_upsert(spark, spark.createDataFrame([(1, "a", 1.0)], SCHEMA), "plays_dupes", keys=["user_id"])
    dupes = spark.createDataFrame([(1, "a", 2.0), (1, "a", 3.0)], SCHEMA)
    with pytest.raises(DataflowError, match="same key"):
        merge_upsert(spark, dupes, "plays_dupes", keys=["user_id"])
    assert _rows(read_table(spark, "plays_dupes")) == [(1, "a", 1.0)]


def test_merge_rows_creates_a_clustered_table_by_one_append_then_merges_under_the_key(spark):
    """A missing clustered table: created with its clustering and its rows in one commit
    (CREATE TABLE AS SELECT: Delta ignores the clustering of a plain write to a path); later
    batches MERGE; a retried batch (same idempotent key) changes nothing."""
    from dataflow_core.spark.platform.delta import merge_rows

    rows = spark.sql("SELECT id AS k, timestamp_millis(id * 1000) AS window_end, id AS v, id % 3 = 0 AS _delete "
                     "FROM range(6)")
    assert merge_rows(spark, "clustered_rows", rows, ["k"], True, True, ("t", 0), cluster_by=("window_end",)) == 4
    path = table_path(spark, "clustered_rows")
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    assert detail["clusteringColumns"] == ["window_end"]
    assert [h["operation"] for h in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()] == [
        "CREATE TABLE AS SELECT"]
    change = spark.sql("SELECT id AS k, timestamp_millis(id * 1000) AS window_end, id * 10 AS v, id = 1 AS _delete "
                       "FROM range(1, 8)")
    assert merge_rows(spark, "clustered_rows", change, ["k"], True, True, ("t", 1), cluster_by=("window_end",)) == 7
    assert merge_rows(spark, "clustered_rows", change, ["k"], True, True, ("t", 1), cluster_by=("window_end",)) == 0
    assert _rows(read_table(spark, "clustered_rows").select("k", "v")) == [(k, 10 * k) for k in range(2, 8)]


def test_a_clustered_table_is_made_over_what_a_creation_killed_before_its_commit_left(spark):
    """A process killed while it made a clustered table (CREATE TABLE AS SELECT) leaves its
    folder: a log folder without a version, and data files. The next attempt makes the table
    all the same (a CREATE TABLE AS SELECT alone refuses any folder that exists)."""
    from dataflow_core.spark.platform.delta import merge_rows
    from dataflow_core.spark.platform.tables import path_exists

    path = table_path(spark, "killed_creation")
    spark.range(3).write.parquet(f"{path}/_delta_log")  # a log folder, no version in it
    spark.range(3).write.mode("append").parquet(path)  # data files no version names
    assert path_exists(spark, f"{path}/_delta_log")
    rows = spark.sql("SELECT id AS k, timestamp_millis(id * 1000) AS window_end, id AS v, false AS _delete "
                     "FROM range(4)")
    assert merge_rows(spark, "killed_creation", rows, ["k"], True, True, ("t", 0), cluster_by=("window_end",)) == 4
    assert _rows(read_table(spark, "killed_creation").select("k", "v")) == [(k, k) for k in range(4)]


def test_compact_caps_files_so_a_merge_of_recent_windows_rewrites_only_their_file(spark):
    """OPTIMIZE of a table clustered on `window_end` (a results table), with a file cap as
    `maintain` gives results tables: files hold disjoint ranges of window ends, and a MERGE
    bounded to the last window copies the rows of one small file. Without the cap the same
    rows make one file, which every such MERGE copies whole."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.delta import compact, merge_rows
    from dataflow_core.spark.platform.tables import commit_info, snapshot_version

    def rows(first: int, n: int, value: str = "sha2(CAST(id AS STRING), 256)"):
        return spark.sql(f"SELECT id AS k, timestamp_millis((id DIV 50) * 3600000) AS window_end, "
                         f"{value} AS v, false AS _delete FROM range({first}, {first + n})")

    for name in ("capped", "uncapped"):
        for chunk in range(4):  # four appends: small files to compact
            merge_rows(spark, name, rows(chunk * 1000, 1000), ["k"], True, True, cluster_by=("window_end",))
    small, one = compact(spark, "uncapped")
    assert small >= 4 and one == 1
    removed, added = compact(spark, "capped", max_file_bytes=40_000)
    assert removed == small and added >= 3
    assert spark.conf.get("spark.databricks.delta.optimize.maxFileSize", None) is None, "the cap is for one command"
    ranges = sorted(tuple(r) for r in spark.read.format("delta").load(table_path(spark, "capped"))
                    .groupBy("_metadata.file_path").agg(F.min("window_end"), F.max("window_end"))
                    .drop("file_path").collect())
    assert len(ranges) == added and all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:])), ranges

    copied = {}
    for name in ("capped", "uncapped"):
        merge_rows(spark, name, rows(3950, 50, "'changed'"), ["k"], True, True,
                   target_filter="t.window_end >= timestamp_millis(79 * 3600000)", cluster_by=("window_end",))
        path = table_path(spark, name)
        metrics = commit_info(spark, path, snapshot_version(spark, path))["operationMetrics"]
        assert int(metrics["numTargetRowsUpdated"]) == 50
        copied[name] = int(metrics["numTargetRowsCopied"])
    assert copied["uncapped"] == 3950 and copied["capped"] < 3950 // 2, copied


def test_a_warmed_table_takes_its_next_idempotent_write_without_computing_its_state(spark):
    """Delta computes a new snapshot's state (files, idempotent-write ids) with Spark jobs
    the first time a write under `txnAppId` asks; `snapshot_warming.warm` computes it ahead,
    so the write itself runs fewer jobs than the same write on an unwarmed twin table."""
    from dataflow_core.spark.platform.snapshot_warming import warm

    tracker = spark.sparkContext.statusTracker()

    def idempotent_append(name: str, version: int) -> None:
        spark.range(3).write.format("delta").mode("append").option("txnAppId", "warm-test") \
            .option("txnVersion", version).save(table_path(spark, name))

    def jobs_of_append(name: str) -> int:
        group = f"warm-test-{name}"
        spark.sparkContext.setJobGroup(group, group)
        try:
            idempotent_append(name, 2)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        return len(tracker.getJobIdsForGroup(group))

    for name in ("warm_cold", "warm_warmed"):
        idempotent_append(name, 0)
        idempotent_append(name, 1)  # a new snapshot, its state not yet computed
    warm(spark, ["warm_warmed", "warm_no_such_table"]).join(60)
    warmed, cold = jobs_of_append("warm_warmed"), jobs_of_append("warm_cold")
    assert warmed < cold, (warmed, cold)
    assert spark.read.format("delta").load(table_path(spark, "warm_warmed")).count() == 9
