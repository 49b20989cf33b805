"""The body of a DAG task that runs one micro-batch, shared by the scheduled DAG
(`dataflow_microbatch__<pipeline>`) and the one-off DAG (`dataflow_microbatch_once`)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("dataflow")


def microbatch_task(pipeline: str, outlet_events: Any = None) -> dict[str, Any]:
    """One micro-batch of `pipeline`: skipped (not failed) while another run that is working
    has it locked, failed without retries with its one line on a DataflowError: also when the run
    locking it is gone or failed (PipelineStuck, which is no busy pipeline: nothing runs until
    someone resumes or abandons that run, as the line says, so a skip would hide it).
    `outlet_events` (the task's): the windows its late panes changed are published there."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from dataflow_core.airflow.live_tasks import Busy, microbatch as run_microbatch
    from dataflow_core.errors import DataflowError

    try:
        done = run_microbatch(pipeline)
    except Busy as exc:
        log.warning(f"skipped: {exc}")
        raise AirflowSkipException(f"pipeline {pipeline} is already running: {exc}") from None
    except DataflowError as exc:
        log.error(f"FAILED: {exc}")
        raise AirflowFailException(str(exc)) from None
    if outlet_events is not None:
        from dataflow_core.airflow.assets import publish

        publish(outlet_events, done["corrections"])
    return done
