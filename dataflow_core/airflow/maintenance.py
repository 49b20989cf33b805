"""The maintenance DAG's task body: OPTIMIZE and VACUUM a pipeline's tables, and forget
event ids past the duplicate-detection horizon.
"""

from __future__ import annotations

from typing import Any

from dataflow_core.airflow.tasks import Say, log_info, spark_session


def pipeline_tables(spark, pipeline: str) -> list[str]:
    """The pipeline's own tables that exist, by their list (`layout.pipeline_tables`: results,
    pane logs, live state, plans, quarantines, seen ids), never by a name prefix: maintaining
    `billing` leaves `billing_eu`'s tables alone."""
    from dataflow_core.pipelines import get, layout
    from dataflow_core.spark.platform.tables import list_tables

    present = set(list_tables(spark))
    return [t for t in layout.pipeline_tables(get(pipeline)) if t in present]


def retention_hours(pipeline: str) -> int:
    """VACUUM retention: the configured hours, raised to cover the longest allowed lateness of
    the pipeline's stages plus a day (a late correction may need to look back that far)."""
    from dataflow_core.airflow import settings
    from dataflow_core.pipelines import get

    lateness_ms = max(s.strategy.allowed_lateness for s in get(pipeline).stages)
    needed = int(min(lateness_ms, 10 * 365 * 24 * 3600 * 1000) // 3_600_000) + 24
    return max(settings.vacuum_retention_hours(), needed)


def maintain(pipeline: str, say: Say = log_info) -> dict[str, Any]:
    """OPTIMIZE and VACUUM the pipeline's tables (and the micro-batches' `dataflow_batches`;
    OPTIMIZE clusters the state tables by their wake-up columns and the results tables by
    `window_end`, the latter in files of at most `settings.results_file_mb()`, so that a
    later MERGE of recent windows rewrites a small file, not one holding all of history);
    forget event ids past the micro-batches' duplicate-detection horizon
    (`<pipeline>__seen_ids`)."""
    from delta.tables import DeltaTable

    from dataflow_core.airflow import settings
    from dataflow_core.pipelines import get, layout
    from dataflow_core.spark.platform.delta import compact
    from dataflow_core.spark.platform.tables import table_exists, table_path
    from dataflow_core.spark.sinks.seen_ids import expire_seen_ids

    spark = spark_session(f"dataflow-maintenance-{pipeline}")
    hours = retention_hours(pipeline)
    if hours < 168:
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    done: dict[str, Any] = {"retention_hours": hours, "tables": {}}
    spec = get(pipeline)
    results = {layout.results(s) for s in spec.stages}
    results_file_bytes = settings.results_file_mb() * 2**20
    # dataflow_batches gets two one-row commits per micro-batch, and every batch reads it.
    shared = [layout.BATCHES] if table_exists(spark, layout.BATCHES) else []
    tables = pipeline_tables(spark, pipeline)
    if not tables:
        say(f"pipeline {pipeline}: no output or state tables yet")
    for table in tables + shared:
        entry: dict[str, Any] = {}
        if table == layout.seen_ids(spec):
            expired = expire_seen_ids(spark, spec)
            entry["expired_rows_deleted"] = expired
            say(f"{table}: {expired:,} event ids past the duplicate-detection horizon deleted")
        cap = results_file_bytes if table in results else None
        entry["files_removed"], entry["files_added"] = compact(spark, table, cap)
        DeltaTable.forPath(spark, table_path(spark, table)).vacuum(hours)
        capped = f" of at most {cap // 2**20} MiB" if cap else ""
        say(f"{table}: OPTIMIZE compacted {entry['files_removed']} file(s) into {entry['files_added']}{capped}; "
            f"VACUUM kept {hours} h of time travel")
        done["tables"][table] = entry
    return done
