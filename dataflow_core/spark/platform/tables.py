"""Delta tables by name: table `x` is the plain Delta table at `<warehouse>/x`.

Any Delta reader can open the folder directly; inside Spark the name is registered in
the session catalog so `spark.sql("SELECT * FROM x")` works.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.spark.platform.session import warehouse_root

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WRITE_MODES = ("overwrite", "append", "error", "errorifexists", "ignore")
_classes: dict[str, tuple[object, Any]] = {}  # full name -> (the JVM view it came from, the class)


def jvm_class(spark: "SparkSession", name: str) -> Any:
    """The JVM class `name` (a full name), looked up once per JVM: py4j resolves
    `spark._jvm.a.b.C` one package at a time, and each package is a failed class lookup
    through every jar on the classpath (hundreds with Spark and Delta)."""
    jvm = spark._jvm
    held = _classes.get(name)
    if held is None or held[0] is not jvm:
        held = _classes[name] = (jvm, getattr(jvm, name))
    return held[1]


@dataclass(frozen=True)
class WriteResult:
    """What one write did, from the Delta commit's own metrics (no extra count job)."""

    table: str
    path: str
    version: int
    rows_inserted: int
    rows_updated: int


def check_table_name(name: str) -> str:
    """Table names are folder names and SQL identifiers: letters, digits, underscores."""
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise DataflowError(
            f"bad table name {name!r}: use letters, digits and underscores, not starting with a digit"
        )
    return name


def table_path(spark: "SparkSession", name: str) -> str:
    """Where table `name` lives: `<warehouse root>/<name>`."""
    return f"{warehouse_root(spark).rstrip('/')}/{check_table_name(name)}"


def table_exists(spark: "SparkSession", name: str) -> bool:
    """True if `<warehouse>/<name>` holds a Delta table. Delta answers from the snapshot it
    cached for the path, so a "no" is checked again with a fresh listing of the table's log:
    another process may have made the table since this one last looked (a long-running
    `--loop`, a test beside the runs it starts)."""
    path = table_path(spark, name)
    delta_table = jvm_class(spark, "io.delta.tables.DeltaTable")
    if delta_table.isDeltaTable(spark._jsparkSession, path):
        return True
    return path_exists(spark, f"{path}/_delta_log") and snapshot_version(spark, path) >= 0


def list_tables(spark: "SparkSession") -> list[str]:
    """Names of the Delta tables (folders with a `_delta_log`) under the warehouse root.

    Uses Hadoop's FileSystem, so it works the same for local paths and `s3a://`.
    """
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    root = path_of(warehouse_root(spark))
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return []
    names = []
    for status in fs.listStatus(root):
        folder = status.getPath()
        if status.isDirectory() and fs.exists(path_of(folder, "_delta_log")):
            if _TABLE_NAME.fullmatch(folder.getName()):
                names.append(folder.getName())
    return sorted(names)


def _missing_table(spark: "SparkSession", name: str) -> DataflowError:
    known = list_tables(spark)
    where = f"warehouse {warehouse_root(spark)}"
    have = f"it has: {', '.join(known)}" if known else "it has no tables yet"
    return DataflowError(
        f"table '{name}' not found: no Delta table at {table_path(spark, name)} ({where}; {have})"
    )


REGISTERED = "spark.dataflow.table."
"""Prefix of the session setting that marks a table this session registered (at a path)."""


def register_table(spark: "SparkSession", name: str) -> None:
    """Make `name` usable in SQL, pointing at `<warehouse>/<name>` (re-pointed if it moved)."""
    path = table_path(spark, name)
    if not table_exists(spark, name):
        raise _missing_table(spark, name)
    registered_key = f"{REGISTERED}{name}"
    if spark.conf.get(registered_key, None) == path:
        return  # registered by this session at this path (`drop_table` forgets it)
    if spark.catalog.tableExists(name):
        if spark.catalog.getTable(name).tableType != "EXTERNAL":
            return  # a managed table someone created; dropping it would delete its data
        spark.sql(f"DROP TABLE `{name}`")  # external: only the catalog entry goes
    spark.catalog.createTable(name, path=path, source="delta")
    spark.conf.set(registered_key, path)


def path_exists(spark: "SparkSession", path: str) -> bool:
    """Whether a file or folder of the warehouse exists (Hadoop's FileSystem: local paths and
    object stores alike)."""
    where = jvm_class(spark, "org.apache.hadoop.fs.Path")(path)
    return bool(where.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(where))


def drop_path(spark: "SparkSession", path: str) -> bool:
    """Delete a folder of the warehouse (a table or a stream checkpoint) with Hadoop's
    FileSystem (local paths and object stores alike); True if there was one."""
    folder = jvm_class(spark, "org.apache.hadoop.fs.Path")(path)
    fs = folder.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.exists(folder) and fs.delete(folder, True))


def drop_table(spark: "SparkSession", name: str) -> bool:
    """Delete table `name` (its folder, and its name in the session catalog); True if it
    existed. Its Delta transaction ids go with it, so a table made again starts afresh."""
    if spark.catalog.tableExists(name) and spark.catalog.getTable(name).tableType == "EXTERNAL":
        spark.sql(f"DROP TABLE `{name}`")
    spark.conf.unset(f"{REGISTERED}{name}")
    return drop_path(spark, table_path(spark, name))


def register_tables(spark: "SparkSession") -> list[str]:
    """Register every Delta table under the warehouse root by its folder name."""
    names = list_tables(spark)
    for name in names:
        register_table(spark, name)
    return names


def read_table(spark: "SparkSession", name: str) -> "DataFrame":
    """The current version of table `name`; a clear error naming it if it does not exist."""
    if not table_exists(spark, name):
        raise _missing_table(spark, name)
    return spark.read.format("delta").load(table_path(spark, name))


def write_table(
    spark: "SparkSession",
    df: "DataFrame",
    name: str,
    mode: str = "overwrite",
    partition_by: Sequence[str] | None = None,
) -> WriteResult:
    """Write `df` as table `name` (`mode`: overwrite, append, error, ignore) and register it."""
    if mode not in _WRITE_MODES:
        raise DataflowError(f"bad write mode {mode!r} for table '{name}': use one of {_WRITE_MODES}")
    _check_columns(df, name, "partition_by", partition_by or ())
    writer = df.write.format("delta").mode(mode)
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(table_path(spark, name))
    register_table(spark, name)
    return _last_commit(spark, name)


def merge_upsert(
    spark: "SparkSession",
    df: "DataFrame",
    name: str,
    keys: Sequence[str],
    partition_by: Sequence[str] | None = None,
) -> WriteResult:
    """Upsert `df` into table `name` on `keys`: update matched rows, insert new ones.

    Creates the table (partitioned by `partition_by`) if it does not exist, so re-running
    the same input leaves the table unchanged instead of duplicating rows. Keys compare
    null-safely; each key must occur at most once in `df`.
    """
    from delta.tables import DeltaTable
    from pyspark.errors import PySparkException

    if isinstance(keys, str) or not keys:
        raise DataflowError(f"merge into '{name}': keys must be a non-empty list of column names")
    _check_columns(df, name, "keys", keys)
    if not table_exists(spark, name):
        _check_unique_keys(df, name, keys)
        return write_table(spark, df, name, mode="overwrite", partition_by=partition_by)
    condition = " AND ".join(f"t.`{key}` <=> s.`{key}`" for key in keys)
    target = DeltaTable.forPath(spark, table_path(spark, name))
    try:
        (
            target.alias("t")
            .merge(df.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    except PySparkException as exc:
        if "MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW" in str(exc):
            raise DataflowError(
                f"merge into '{name}': several input rows have the same key {list(keys)}; "
                "deduplicate them before the upsert"
            ) from exc
        raise
    register_table(spark, name)
    return _last_commit(spark, name)


def _check_columns(df: "DataFrame", name: str, parameter: str, columns: Sequence[str]) -> None:
    missing = [column for column in columns if column not in df.columns]
    if missing:
        raise DataflowError(
            f"table '{name}': {parameter} {missing} not among the data's columns {df.columns}"
        )


def _check_unique_keys(df: "DataFrame", name: str, keys: Sequence[str]) -> None:
    """On first write Delta cannot catch duplicate keys; later merges would then fail."""
    duplicate = df.groupBy(*keys).count().where("count > 1").limit(1).collect()
    if duplicate:
        values = {key: duplicate[0][key] for key in keys}
        raise DataflowError(
            f"merge into '{name}': key {values} occurs {duplicate[0]['count']} times in the "
            "input; each key must be unique"
        )


def snapshot_version(spark: "SparkSession", path: str) -> int:
    """The latest version of the Delta table at `path`, from its log's fresh snapshot: a
    listing of `_delta_log`, no Spark job (`history()` costs a query)."""
    return int(latest_snapshot(spark, path).version())


def snapshot_identity(spark: "SparkSession", path: str) -> tuple[str, int]:
    """(table id, latest version) of the Delta table at `path`, as `snapshot_version` reads
    it. A version names the same contents only within one life of a table: one deleted and
    created again at the same path gets a new id."""
    snapshot = latest_snapshot(spark, path)
    return str(snapshot.metadata().id()), int(snapshot.version())


def commit_info(spark: "SparkSession", path: str, version: int) -> dict:
    """The `commitInfo` action of commit `version` of the table at `path` (operation,
    operationMetrics): what `history(1)` says, without a query (`driver_delta.commit_actions`)."""
    from dataflow_core.spark.platform.driver_delta import commit_actions

    return next((a["commitInfo"] for a in commit_actions(path, version) if "commitInfo" in a), {})


def latest_snapshot(spark: "SparkSession", path: str):
    """Delta's snapshot (JVM) of the latest version of the table at `path`, brought up to date
    by a listing of its `_delta_log`; Delta keeps one per path and version in the JVM, with its
    state once computed (`snapshot_warming`). Version -1 where there is no table."""
    none = jvm_class(spark, "scala.Option").empty()
    return _delta_log(spark, path).update(False, none, none)


def _delta_log(spark: "SparkSession", path: str):
    return jvm_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)


def _last_commit(spark: "SparkSession", name: str) -> WriteResult:
    path = table_path(spark, name)
    version = snapshot_version(spark, path)
    info = commit_info(spark, path, version)
    metrics = info.get("operationMetrics") or {}
    if info.get("operation") == "MERGE":
        inserted = int(metrics.get("numTargetRowsInserted", 0))
        updated = int(metrics.get("numTargetRowsUpdated", 0))
    else:
        inserted, updated = int(metrics.get("numOutputRows", 0)), 0
    return WriteResult(name, path, version, inserted, updated)
