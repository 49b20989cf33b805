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
| `DATAFLOW_UI_URL` | the Airflow UI's address, for the links task logs print | `http://localhost:$AIRFLOW__API__PORT` |
| `DATAFLOW_TIMER_WAIT` | longest a one-off micro-batch waits to fire a pending processing-time timer | `1h` |
| `DATAFLOW_APPROVERS` | who may approve a backfill plan: Airflow user ids and `role:NAME` (simple auth manager), comma-separated | anyone Airflow lets respond |
| `DATAFLOW_ALLOW_SELF_APPROVAL` | `true`: the user who triggered the backfill may approve its plan too | `false` |
| `DATAFLOW_APPROVAL_TIMEOUT` | how long a plan waits for a decision; then it is rejected, nothing applied | `72h` |

The approval settings are read by the `approve_backfill` task when it starts (the worker's
environment); see `dataflow_core.airflow.approval`.
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


DATA_DOCS_ROUTE = "/dataflow-explorer/data-docs"  # the plugin's mount + its data-docs route (app.py)
PLANS_ROUTE = "/dataflow-explorer/plan"  # the plugin's mount + its plan view (app.py)


def ui_url() -> str:
    """The Airflow UI's address as a browser reaches it (links in task logs)."""
    configured = os.environ.get("DATAFLOW_UI_URL") or os.environ.get("AIRFLOW__API__BASE_URL")
    if configured:
        return configured.rstrip("/")
    return f"http://localhost:{os.environ.get('AIRFLOW__API__PORT') or '8080'}"


def plan_url(pipeline: str, run_id: str) -> str:
    """The pane explorer's plan view of a backfill plan (`plugin/app.py`, route `plan`)."""
    from urllib.parse import urlencode

    return f"{ui_url()}{PLANS_ROUTE}?{urlencode({'pipeline': pipeline, 'run_id': run_id})}"


def data_docs_url(page: str | None, warehouse: str | None = None) -> str | None:
    """The URL the plugin serves a Data Docs page at (a file of the site), or None when the
    page is not in this deployment's site."""
    from pathlib import Path

    from dataflow_core.quality.docs import data_docs_root, site_index

    if not page:
        return None
    site = site_index(data_docs_root(warehouse or os.environ.get("DATAFLOW_WAREHOUSE"))).parent
    try:
        relative = Path(page).resolve().relative_to(site.resolve())
    except ValueError:
        return None
    return f"{ui_url()}{DATA_DOCS_ROUTE}/{relative.as_posix()}"


def timer_wait_ms() -> int:
    from dataflow_core.model.time import parse_duration

    raw = os.environ.get("DATAFLOW_TIMER_WAIT", "").strip() or "1h"
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise DataflowError(f"$DATAFLOW_TIMER_WAIT={raw!r}: {exc}") from None


DEFAULT_APPROVAL_TIMEOUT = "72h"


def approvers() -> tuple[str, ...]:
    """`DATAFLOW_APPROVERS`: user ids and `role:NAME` entries, as given (empty: not configured)."""
    raw = os.environ.get("DATAFLOW_APPROVERS", "")
    entries = tuple(e.strip() for e in raw.split(",") if e.strip())
    for entry in entries:
        if entry.startswith("role:") and not entry[5:].strip():
            raise DataflowError(f"$DATAFLOW_APPROVERS={raw!r}: 'role:' needs a role name (e.g. role:admin)")
    return entries


def allow_self_approval() -> bool:
    raw = os.environ.get("DATAFLOW_ALLOW_SELF_APPROVAL", "").strip().lower()
    if raw in ("", "false", "0", "no"):
        return False
    if raw in ("true", "1", "yes"):
        return True
    raise DataflowError(f"$DATAFLOW_ALLOW_SELF_APPROVAL={raw!r}: use true or false")


def approval_timeout() -> dt.timedelta:
    from dataflow_core.model.time import positive_duration

    raw = os.environ.get("DATAFLOW_APPROVAL_TIMEOUT", "").strip() or DEFAULT_APPROVAL_TIMEOUT
    try:
        return dt.timedelta(milliseconds=positive_duration(raw, "$DATAFLOW_APPROVAL_TIMEOUT"))
    except ValueError as exc:
        raise DataflowError(f"$DATAFLOW_APPROVAL_TIMEOUT={raw!r}: {exc}") from None
