"""The maintenance DAG's task body: `spark.jobs.maintenance` (OPTIMIZE and VACUUM a
pipeline's tables, forget event ids past the duplicate-detection horizon, all locking the
pipeline) in the task's Spark session. A task that cannot run fails, never skips: a pipeline
locked by a run that is gone or failed fails it at once with the line naming that run and the
commands that resume and abandon it; one locked by a working run is waited for (at most
`MAINTENANCE_WAIT`), then fails with the busy line.
"""

from __future__ import annotations

import logging
from typing import Any

from dataflow_core.airflow.tasks import Say, log_info, spark_session

MAINTENANCE_WAIT = "1h"
"""How long a maintenance task waits for a working run that holds its pipeline."""


def retention_hours(pipeline: str) -> int:
    """VACUUM retention: the configured hours, raised to cover the longest allowed lateness of
    the pipeline's stages plus a day (a late correction may need to look back that far)."""
    from dataflow_core.airflow import settings
    from dataflow_core.pipelines import get

    lateness_ms = max(s.strategy.allowed_lateness for s in get(pipeline).stages)
    needed = int(min(lateness_ms, 10 * 365 * 24 * 3600 * 1000) // 3_600_000) + 24
    return max(settings.vacuum_retention_hours(), needed)


def maintain_in(spark: Any, pipeline: str, say: Say, wait_s: float | None) -> dict[str, Any]:
    """`spark.jobs.maintenance.maintain` with the deployment's settings, waiting at most
    `wait_s` seconds (None: not at all) for a working run that has the pipeline locked: the task's
    body and `dataflow maintain`'s."""
    from dataflow_core.airflow import settings
    from dataflow_core.cli.waiting import until_free
    from dataflow_core.spark.jobs.maintenance import maintain as run

    hours, cap = retention_hours(pipeline), settings.results_file_mb() * 2**20
    return until_free(lambda: run(spark, pipeline, hours, cap, say), wait_s, say)


def maintain(pipeline: str, say: Say = log_info, wait: str | None = MAINTENANCE_WAIT) -> dict[str, Any]:
    """Maintain `pipeline` (see the module docstring); PipelineBusy or PipelineStuck when it
    could not take the pipeline within `wait` (None: at once)."""
    from dataflow_core.cli.waiting import wait_seconds

    return maintain_in(spark_session(f"dataflow-maintenance-{pipeline}"), pipeline, say, wait_seconds(wait))


def maintenance_task(pipeline: str, wait: str | None = MAINTENANCE_WAIT) -> dict[str, Any]:
    """The DAG's task: `maintain`, a DataflowError (busy and stuck included) failing the task
    without retries, with its one line."""
    from airflow.sdk.exceptions import AirflowFailException

    from dataflow_core.errors import DataflowError

    try:
        return maintain(pipeline, wait=wait)
    except DataflowError as exc:
        logging.getLogger("dataflow").error(f"FAILED: {exc}")
        raise AirflowFailException(str(exc)) from None
