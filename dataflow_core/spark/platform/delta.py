"""Delta's own means for exactly-once writes: MERGE under an idempotent key, table
versions and time travel.

Delta skips a commit whose (application id, version) is not above the last one committed
under that id, so a retried batch writes nothing twice. Writers pass the key as writer
options (`txnAppId`/`txnVersion`); a MERGE cannot take writer options, so it gets the
session settings, unset right after.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Callable, ContextManager, Iterator, Sequence

from dataflow_core.spark.platform import driver_delta
from dataflow_core.spark.platform.driver_delta import Txn
from dataflow_core.spark.platform.tables import (
    commit_info, drop_path, register_table, snapshot_version, table_exists, table_path,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession



@contextmanager
def session_settings(spark: "SparkSession", settings: dict[str, str]) -> Iterator[None]:
    """Spark session settings for the commands run inside, restored afterwards (unset when
    they were unset), so that no other command inherits them."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def settings_unless_configured(spark: "SparkSession", settings: dict[str, str]) -> ContextManager[None]:
    """These session settings for what runs inside (`session.MICRO_BATCH_SQL` for a
    micro-batch; `session.COMPILED_SQL` around a query over a table that grows with the
    pipeline's history), except those the user's Spark configuration gives: theirs win."""
    from dataflow_core.spark.platform.session import unless_configured

    return session_settings(spark, unless_configured(spark, settings))


_COMMIT_CHECKS: ContextVar[tuple[Callable[[str], None], ...]] = ContextVar("dataflow_commit_checks", default=())
"""The checks of the run in whose context a commit is made: a context variable, so that one
run's fence never checks another's commits in the same process (a test's threads, an Airflow
worker's), while the writes a run starts in threads of their own carry its context along
(`concurrent_writes` runs each in a copy of the caller's)."""


@contextmanager
def checked_commits(check: Callable[[str], None]) -> Iterator[None]:
    """While inside, `check(table name)` runs before each commit made through `append_rows`
    or `merge_rows` in this context (this thread, and the writes it starts; see
    `_COMMIT_CHECKS`), and raises to stop it: a locked run's fence (`sinks.fencing.fenced_commits`)."""
    token = _COMMIT_CHECKS.set((*_COMMIT_CHECKS.get(), check))
    try:
        yield
    finally:
        _COMMIT_CHECKS.reset(token)


def _before_commit(name: str) -> None:
    for check in _COMMIT_CHECKS.get():
        check(name)


@contextmanager
def idempotent(spark: "SparkSession", txn: Txn | None) -> Iterator[None]:
    """Delta's session settings for an idempotent MERGE (or CREATE TABLE AS SELECT) under
    `txn` (none when None). Delta reads the key from the session, so commands under a key
    in one session take turns (`concurrent_writes` gives each write a session of its own,
    but a CREATE TABLE AS SELECT runs in its rows' session)."""
    if txn is None:
        yield
        return
    keys = {"spark.databricks.delta.write.txnAppId": txn[0], "spark.databricks.delta.write.txnVersion": str(txn[1])}
    with _session_lock(spark), session_settings(spark, keys):
        yield


_LOCKS = tuple(threading.Lock() for _ in range(64))
"""Striped: a session's lock is chosen by its JVM identity, so however many Python objects
wrap one session they share it, and the sessions a long `--loop` clones leave nothing
behind (two sessions sharing a stripe only take turns when they need not)."""


def _session_lock(spark: "SparkSession") -> threading.Lock:
    """The lock of this Spark session (see `_LOCKS`)."""
    return _LOCKS[int(spark.sparkContext._jvm.System.identityHashCode(spark._jsparkSession)) % len(_LOCKS)]


def idempotent_writer(writer: "DataFrameWriter", txn: Txn | None) -> "DataFrameWriter":
    """`writer` with Delta's idempotent-write options for `txn` (unchanged when None)."""
    return writer if txn is None else writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])


def append_rows(
    spark: "SparkSession", name: str, rows: "DataFrame", txn: Txn | None = None, note: str | None = None,
    partition_by: Sequence[str] = (),
) -> None:
    """Append `rows` to table `name` (created on first write, partitioned by `partition_by`;
    a table that exists keeps its own layout), under `txn` when given; `note` goes into the
    commit's `userMetadata` (its log entry, readable without a query)."""
    _before_commit(name)
    writer = rows.write.format("delta").mode("append").option("mergeSchema", "true")
    if partition_by and not table_exists(spark, name):
        writer = writer.partitionBy(*partition_by)
    writer = idempotent_writer(writer, txn)
    if note is not None:
        writer = writer.option("userMetadata", note)
    writer.save(table_path(spark, name))
    register_table(spark, name)


def append_control_rows(
    spark: "SparkSession", name: str, rows: Sequence[Sequence], schema: str, txn: Txn | None = None,
    note: str | None = None,
) -> int | None:
    """Append a few rows made on the driver (values in `schema`'s column order) to table
    `name` through delta-rs (`driver_delta`: one commit, no Spark job), under `txn` when given,
    `note` as the commit's `userMetadata`; the table is made first when missing. Returns the
    version committed, None when `txn` was committed before. For control tables only: rows of
    the pipeline's data are written by executors."""
    path = table_path(spark, name)
    try:
        return driver_delta.append(path, rows, schema, txn, note)
    except driver_delta.NoTable:
        create_table(spark, name, schema)
        return driver_delta.append(path, rows, schema, txn, note)


def create_table(spark: "SparkSession", name: str, schema: str) -> None:
    """Make control table `name` empty with this schema unless it exists, through delta-rs
    (`driver_delta`: one commit, no Spark job), with the table properties a table Spark
    creates in this session would get (`spark.databricks.delta.properties.defaults.*`). Two
    processes making it at once both go on: Delta commits version 0 once."""
    prefix = "spark.databricks.delta.properties.defaults."
    given = {**dict(spark.sparkContext.getConf().getAll()), **spark.conf.getAll}  # the session's settings win
    properties = {f"delta.{k[len(prefix):]}": v for k, v in given.items() if k.startswith(prefix)}
    driver_delta.create(table_path(spark, name), schema, properties)
    register_table(spark, name)


UNREADABLE = ("DELTA_VERSION_NOT_FOUND", "VersionNotFound", "Cannot time travel", "FileNotFoundException",
              "FILE_NOT_EXIST", "DELTA_FILE_NOT_FOUND", "DELTA_LOG_FILE_NOT_FOUND")
"""What Spark and Delta say when a version or a data file of a table is gone (log cleaned, VACUUM)."""


def gone_cause(exc: BaseException) -> str | None:
    """When `exc` says a version or data file of a table is gone (`UNREADABLE`): the first
    line of what it says, to quote in a one-line error; None for any other error."""
    if not any(m in f"{type(exc).__name__}: {exc}" for m in UNREADABLE):
        return None
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)[:200]


def table_version(spark: "SparkSession", name: str) -> int:
    """The table's latest version (-1 when it does not exist), without a query
    (`tables.snapshot_version`)."""
    if not table_exists(spark, name):
        return -1
    return snapshot_version(spark, table_path(spark, name))


def read_as_of(spark: "SparkSession", name: str, version: int) -> "DataFrame | None":
    """The table as it was at `version` (time travel); None for a table not yet created."""
    if version < 0:
        return None
    return spark.read.format("delta").option("versionAsOf", version).load(table_path(spark, name))


def add_columns(spark: "SparkSession", name: str, columns: dict[str, str]) -> None:
    """Add to table `name` those of `columns` (name: SQL type) it lacks, nullable: the rows
    it has read them as null. One commit, and only when a column is missing, so running it
    again (a retried run) changes nothing."""
    path = table_path(spark, name)
    have = set(spark.read.format("delta").load(path).columns)
    missing = ", ".join(f"`{c}` {t}" for c, t in columns.items() if c not in have)
    if missing:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({missing})")


def merge_rows(
    spark: "SparkSession", name: str, rows: "DataFrame", keys: Sequence[str], delete: bool, update: bool,
    txn: Txn | None = None, target_filter: str | None = None, cluster_by: Sequence[str] = (),
    update_set: dict[str, str] | None = None,
) -> int:
    """MERGE `rows` into table `name` on `keys` (null-safe). A missing table is created by
    a plain write of the rows (`_created_with`), with Delta's liquid clustering on
    `cluster_by` when given. Rows with `_delete` delete
    their match (when `delete`); others update it (when `update`; `update_set` overrides
    the value of some columns with SQL over target `t` and source `s`) or are inserted.
    `target_filter` is a condition on `t` that every match meets, so Delta skips files.
    Columns the table lacks are added (schema evolution). Returns rows changed."""
    from delta.tables import DeltaTable

    _before_commit(name)
    if not table_exists(spark, name):
        created = _created_with(spark, name, rows, txn, cluster_by)
        if created is not None:
            return created
    path = table_path(spark, name)
    target = DeltaTable.forPath(spark, path)
    version = snapshot_version(spark, path)
    cond = " AND ".join([f"t.`{k}` <=> s.`{k}`" for k in keys] + ([target_filter] if target_filter else []))
    columns = [c for c in rows.columns if c != "_delete"]
    values = {f"`{c}`": f"s.`{c}`" for c in columns}
    m = target.alias("t").merge(rows.alias("s"), cond).withSchemaEvolution()
    if delete:
        m = m.whenMatchedDelete("s._delete")
        if update:
            m = m.whenMatchedUpdate("NOT s._delete", set={**values, **(update_set or {})})
        m = m.whenNotMatchedInsert("NOT s._delete", values=values)
    else:
        m = m.whenNotMatchedInsert(values=values)
    with idempotent(spark, txn):
        m.execute()
    register_table(spark, name)
    after = snapshot_version(spark, path)
    if after == version:
        return 0  # nothing to change (or skipped under `txn`): no commit
    metrics = commit_info(spark, path, after).get("operationMetrics") or {}
    return sum(int(metrics.get(k, 0)) for k in ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted"))


def _created_with(
    spark: "SparkSession", name: str, rows: "DataFrame", txn: Txn | None, cluster_by: Sequence[str] = (),
    again: bool = False,
) -> int | None:
    """A missing table made by one write of what a MERGE into nothing would insert (every
    row not marked `_delete`), so its first rows cost no join and no second pass; clustered
    on `cluster_by` (Delta's liquid clustering) when given. One commit either way: a commit
    is about half a second of Delta's own jobs, and a first backfill writes several tables.
    Returns the rows written; None when another run created the table first (the caller
    then merges).

    A CREATE TABLE AS SELECT refuses a folder that exists, and a process killed while it
    made the table leaves one (its log folder, data files) with no version committed: every
    retry would fail. Such a folder holds nothing readable, and the run writing it has the
    pipeline locked, so it is removed and the table made once more (`again`)."""
    from pyspark.sql import functions as F

    if "_delete" in rows.columns:
        rows = rows.where(~F.col("_delete")).drop("_delete")
    path = table_path(spark, name)
    try:
        if cluster_by:
            # Delta ignores the clustering of a plain write to a path; CREATE TABLE AS SELECT
            # keeps it (its columns nullable, as a plain write makes them), under `txn` too.
            # Run in the rows' own session (a stream's batch has one of its own).
            columns, session = ", ".join(f"`{c}`" for c in cluster_by), rows.sparkSession
            with idempotent(session, txn):
                session.sql(f"CREATE TABLE delta.`{path}` USING delta CLUSTER BY ({columns}) AS SELECT * FROM {{rows}}",
                            rows=rows)
        else:
            idempotent_writer(rows.write.format("delta").mode("errorifexists"), txn).save(path)
    except Exception as exc:
        if table_exists(spark, name):
            return None
        if cluster_by and not again and "TABLE_OR_VIEW_ALREADY_EXISTS" in str(exc) and drop_path(spark, path):
            return _created_with(spark, name, rows, txn, cluster_by, again=True)
        raise
    register_table(spark, name)
    metrics = commit_info(spark, path, 0).get("operationMetrics") or {}
    return int(metrics.get("numOutputRows", 0))


def compact(spark: "SparkSession", name: str, max_file_bytes: int | None = None) -> tuple[int, int]:
    """OPTIMIZE table `name` (on a clustered table, Delta's liquid clustering lays the rows
    out by its clustering columns); returns (files removed, files added). `max_file_bytes`
    caps the files it writes (Delta's `optimize.maxFileSize`, 1 GiB by default, set for this
    command only): a table that later MERGEs touch in one range of its clustering column
    keeps that range in small files, so a MERGE rewrites those and skips the rest."""
    from delta.tables import DeltaTable

    cap = {} if max_file_bytes is None else {"spark.databricks.delta.optimize.maxFileSize": str(max_file_bytes)}
    with session_settings(spark, cap):
        metrics = DeltaTable.forPath(spark, table_path(spark, name)).optimize().executeCompaction().collect()
    done = metrics[0]["metrics"] if metrics else None
    return (int(done["numFilesRemoved"]), int(done["numFilesAdded"])) if done else (0, 0)
