"""Deployment settings of the DAGs, from the environment of the Airflow components.

| variable | meaning | default |
| --- | --- | --- |
| `DATAFLOW_BACKFILL_MAX_DAYS` | longest range one `dataflow_backfill` run may cover | 31 |
| `DATAFLOW_BACKFILL_MAX_PARALLEL_DAYS` | highest "days at once" the form offers | 4 |
| `DATAFLOW_MICROBATCH_SCHEDULE` | schedule (cron or preset) of every `dataflow_microbatch__*` DAG | `*/5 * * * *` |
| `DATAFLOW_MICROBATCH_SCHEDULE__<PIPELINE>` | the same for one pipeline (name upper-cased) | - |
| `DATAFLOW_DAILY_START` | first day of the `dataflow_daily__*` DAGs' schedule | 2024-05-01 |
| `DATAFLOW_MAINTENANCE_SCHEDULE` | schedule of `dataflow_maintenance` | `@weekly` |
| `DATAFLOW_VACUUM_RETENTION_HOURS` | VACUUM retention (raised to cover every stage's allowed lateness + 1 day) | 168 |
| `DATAFLOW_RESULTS_FILE_MB` | largest file OPTIMIZE writes in a results table (see `maintain`) | 16 |
"""

from __future__ import annotations

import datetime as dt
import os

from dataflow_core.errors import DataflowError

DEFAULT_MAX_DAYS = 31
DEFAULT_MAX_PARALLEL_DAYS = 4
DEFAULT_MICROBATCH_SCHEDULE = "*/5 * * * *"
DEFAULT_DAILY_START = "2024-05-01"
DEFAULT_MAINTENANCE_SCHEDULE = "@weekly"
DEFAULT_VACUUM_RETENTION_HOURS = 168  # Delta's own minimum without disabling its check
DEFAULT_RESULTS_FILE_MB = 16  # Databricks' smallest tuned size for tables rewritten by MERGE


def _int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise DataflowError(f"${name}={raw!r}: not a whole number") from None
    if value < minimum:
        raise DataflowError(f"${name}={raw!r}: must be at least {minimum}")
    return value


def max_backfill_days() -> int:
    return _int("DATAFLOW_BACKFILL_MAX_DAYS", DEFAULT_MAX_DAYS)


def max_parallel_days() -> int:
    return _int("DATAFLOW_BACKFILL_MAX_PARALLEL_DAYS", DEFAULT_MAX_PARALLEL_DAYS)


def microbatch_schedule(pipeline: str) -> str:
    return (os.environ.get(f"DATAFLOW_MICROBATCH_SCHEDULE__{pipeline.upper()}")
            or os.environ.get("DATAFLOW_MICROBATCH_SCHEDULE") or DEFAULT_MICROBATCH_SCHEDULE)


def daily_start() -> dt.datetime:
    raw = os.environ.get("DATAFLOW_DAILY_START") or DEFAULT_DAILY_START
    try:
        day = dt.date.fromisoformat(raw.strip())
    except ValueError:
        raise DataflowError(f"$DATAFLOW_DAILY_START={raw!r}: not an ISO date (YYYY-MM-DD)") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc)


def maintenance_schedule() -> str:
    return os.environ.get("DATAFLOW_MAINTENANCE_SCHEDULE") or DEFAULT_MAINTENANCE_SCHEDULE


def vacuum_retention_hours() -> int:
    return _int("DATAFLOW_VACUUM_RETENTION_HOURS", DEFAULT_VACUUM_RETENTION_HOURS, minimum=0)


def results_file_mb() -> int:
    return _int("DATAFLOW_RESULTS_FILE_MB", DEFAULT_RESULTS_FILE_MB)
