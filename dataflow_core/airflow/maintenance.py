"""The maintenance DAG's task body: `spark.jobs.maintenance` (OPTIMIZE and VACUUM a
pipeline's tables, forget event ids past the duplicate-detection horizon, all holding the
pipeline) in the task's Spark session. A task that cannot run fails, never skips: a pipeline
held by a run that is gone or failed fails it at once with the line naming that run and the
commands that resume and abandon it; one held by a working run is waited for (at most
`MAINTENANCE_WAIT`), then fails with the busy line.
"""

from __future__ import annotations

import logging
from typing import Any

from dataflow_core.airflow.tasks import Say, log_info, spark_session

MAINTENANCE_WAIT = "1h"
"""How long a maintenance task waits for a working run that holds its pipeline."""


def maintain(pipeline: str, say: Say = log_info, wait: str | None = MAINTENANCE_WAIT) -> dict[str, Any]:
    """Maintain `pipeline` (see the module docstring); PipelineBusy or PipelineStuck when it
    could not take the pipeline within `wait` (None: at once)."""
    from dataflow_core.cli.waiting import wait_seconds
    from dataflow_core.spark.jobs.maintenance import maintain as run

    spark = spark_session(f"dataflow-maintenance-{pipeline}")
    return run(spark, pipeline, say, wait_seconds(wait))


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
