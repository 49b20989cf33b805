"""Maintenance of one pipeline's Delta tables (`dataflow maintain`, the `dataflow_maintenance`
DAG): forget event ids past the duplicate-detection horizon, OPTIMIZE and VACUUM.

It has the pipeline locked while it works (`jobs.locked_writes`), as reset does: its OPTIMIZE and its
DELETE of expired ids would otherwise conflict with a live batch's MERGE (which then fails or
is skipped), and the RESTORE of an `--abandon` would race them. Held by a working run, it is
busy (its callers, `airflow.maintenance`, wait a bounded time first); locked by a run that is
gone or failed, it stops at once (PipelineStuck, naming that run and how to resume or abandon it).

VACUUM keeps what an `--abandon` could restore: the standing lock's versions of each table
(its own, while it has the pipeline locked; a killed maintenance resumed days later still has the
versions its claim found). A file of version V is removed no earlier than the commit after
V, so VACUUM's retention is raised, where needed, to reach back past that commit's time
(Delta's DESCRIBE HISTORY), and the task log says why.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from dataflow_core.model.time import format_instant
from dataflow_core.pipelines import PipelineSpec, get, layout
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.jobs.locked_writes import locked_writes
from dataflow_core.spark.sinks.fencing import check_lock
from dataflow_core.spark.sinks.pipeline_lock import PipelineLock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]
MAINTAIN = "maintain"
"""The command a maintenance run has the pipeline locked as (`dataflow maintain` resumes it)."""
MARGIN_H = 1.0
"""Hours VACUUM keeps beyond the commit after a restorable version: a commit's removed files
are stamped when its transaction removes them, a little before the commit's own time."""


def maintained_tables(spark: "SparkSession", spec: PipelineSpec) -> list[str]:
    """The pipeline's own tables that exist, by their list (`layout.pipeline_tables`: results,
    pane logs, live state, plans, quarantines, seen ids), never by a name prefix: maintaining
    `billing` leaves `billing_eu`'s tables alone."""
    from dataflow_core.spark.platform.tables import list_tables

    present = set(list_tables(spark))
    return [t for t in layout.pipeline_tables(spec) if t in present]


def maintain(spark: "SparkSession", pipeline: str, hours: float, results_file_bytes: int | None,
             say: Say = lambda _m: None) -> dict[str, Any]:
    """Maintain `pipeline`'s tables locking it (see the module docstring), and the shared
    `dataflow_batches` (two one-row commits per micro-batch, read by every batch): OPTIMIZE
    clusters the state tables by their wake-up columns and the results tables by
    `window_end`, the latter in files of at most `results_file_bytes` (None: Delta's own
    size), so that a later MERGE of recent windows rewrites a small file, not one holding all
    of history. `hours`: VACUUM's retention before what the lock needs. PipelineBusy (before
    anything is written) while a working run has the pipeline locked (callers that wait try again,
    `cli.waiting.until_free`), PipelineStuck when that run is gone or failed."""
    from dataflow_core.spark.platform.tables import table_exists

    spec = get(pipeline)
    done: dict[str, Any] = {"retention_hours": hours, "tables": {}}
    with locked_writes(spark, spec, MAINTAIN, say) as lock:
        say(f"run {lock.run.run_id} has locked pipeline {spec.name} for maintenance")
        tables = maintained_tables(spark, spec)
        if not tables:
            say(f"pipeline {pipeline}: no output or state tables yet")
        shared = [layout.BATCHES] if table_exists(spark, layout.BATCHES) else []
        for table in tables + shared:
            cap = results_file_bytes if table in {layout.results(s) for s in spec.stages} else None
            done["tables"][table] = _maintain_table(spark, spec, lock, table, hours, cap, say)
    return done


def _maintain_table(spark: "SparkSession", spec: PipelineSpec, lock: PipelineLock, table: str, hours: float,
                    cap: int | None, say: Say) -> dict[str, Any]:
    """One table: expired ids deleted (the seen ids), OPTIMIZE, VACUUM keeping what the lock
    could restore; each command only while the lock stands."""
    from dataflow_core.spark.platform.delta import compact
    from dataflow_core.spark.platform.tables import table_path
    from dataflow_core.spark.sinks.seen_ids import expire_seen_ids

    entry: dict[str, Any] = {}
    if table == layout.seen_ids(spec):
        check_lock(spark, spec, lock)
        expired = expire_seen_ids(spark, spec)
        entry["expired_rows_deleted"] = expired
        say(f"{table}: {expired:,} event ids past the duplicate-detection horizon deleted")
    check_lock(spark, spec, lock)
    entry["files_removed"], entry["files_added"] = compact(spark, table, cap)
    kept, why = vacuum_hours(spark, table, lock.record.versions.get(table, -1), hours, lock.run.run_id)
    check_lock(spark, spec, lock)
    vacuum(spark, table_path(spark, table), kept)
    crash_point(f"maintenance-vacuumed-{table}")
    entry["vacuum_hours"] = kept
    capped = f" of at most {cap // 2**20} MiB" if cap else ""
    say(f"{table}: OPTIMIZE compacted {entry['files_removed']} file(s) into {entry['files_added']}{capped}; "
        f"VACUUM kept {_hours(kept)} h of time travel{why}")
    return entry


def vacuum(spark: "SparkSession", path: str, hours: float) -> None:
    """VACUUM the table at `path` keeping `hours` of removed files. Delta 4 ignores a
    retention other than 0 h unless told not to (it keeps the table's
    `delta.deletedFileRetentionDuration` instead, a week by default), and refuses one below
    that week unless its check is off: both are set for this command only, so that the
    retention computed here is the one VACUUM keeps."""
    from delta.tables import DeltaTable

    from dataflow_core.spark.platform.delta import session_settings

    honoured = {"spark.databricks.delta.vacuum.retentionWindowIgnore.enabled": "false"}
    if hours < 168:
        honoured["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    with session_settings(spark, honoured):
        DeltaTable.forPath(spark, path).vacuum(hours)


def vacuum_hours(spark: "SparkSession", table: str, restorable: int, hours: float, run_id: str,
                 now_s: float | None = None) -> tuple[float, str]:
    """VACUUM's retention for `table` keeping the files of version `restorable` (what an
    abandon of run `run_id` restores it to; -1: nothing, it empties the table): `hours`, or
    more when the commit after that version is older than `hours` less the margin; and in
    words why it was raised (empty when it was not)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import table_path

    if restorable < 0:
        return hours, ""
    history = DeltaTable.forPath(spark, table_path(spark, table)).history()
    after = history.where(F.col("version") == restorable + 1).select(F.col("timestamp").cast("double").alias("s")).collect()
    if not after:
        return hours, ""  # `restorable` is the table's version: VACUUM never removes the current files
    replaced_s = after[0]["s"]
    needed = ((time.time() if now_s is None else now_s) - replaced_s) / 3600 + MARGIN_H
    if needed <= hours:
        return hours, ""
    return needed, (f" (not {_hours(hours)} h: `dataflow backfill --abandon {run_id}` restores version "
                    f"{restorable}, whose files were replaced at {format_instant(int(replaced_s * 1000))})")


def _hours(hours: float) -> str:
    return f"{hours:.0f}" if float(hours).is_integer() else f"{hours:.1f}"
