"""Airflow DAG `dataflow_microbatch_once`: one micro-batch of a pipeline, now, from a form.

Why a DAG of its own: Airflow does not run a paused DAG's runs, so a manual run of the
scheduled `dataflow_microbatch__<pipeline>` with "Unpause on trigger" unticked sits queued
until someone unpauses it (and unpausing starts its schedule too). This DAG has no schedule
and is created unpaused, so a trigger runs one batch whether the schedule is paused or not.

Tasks: `microbatch` (one micro-batch of the chosen pipeline) -> `gate_output` (its panes and
results) -> `fire_due_timer` -> `gate_timer_batch`. A batch can leave a processing-time timer
pending (billing's early figures every 10 minutes): its windows' results are incomplete until
a batch runs after the timer. `fire_due_timer` waits for it without holding a worker
(rescheduled, like a waiting backfill day), then runs the batch that fires it, which
`gate_timer_batch` checks; with no timer pending, or one further off than
`$DATAFLOW_TIMER_WAIT` (1h), or with "fire due timer" off, it says so and is skipped.

One active run at a time; a batch that finds the pipeline locked (by the scheduled DAG's batch
or a backfill) is skipped, not failed.
"""

from __future__ import annotations

from typing import Any

import logging

import pendulum
from airflow.sdk import Param, dag, task
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException

from dataflow_core.airflow.assets import CORRECTIONS
from dataflow_core.airflow.batch_task import microbatch_task
from dataflow_core.airflow.requests import pipeline_names

log = logging.getLogger("dataflow")
TIMER_MARGIN_S = 1  # a timer fires in a batch whose time is after it, not at it


def _names() -> list[str]:
    return pipeline_names()


def _gate(pipeline: str, batch: dict[str, Any], run_id: str) -> dict[str, Any]:
    from dataflow_core.airflow.tasks import gate_output as run_gate
    from dataflow_core.errors import DataflowError

    try:
        return run_gate(pipeline, batch["pane_run_ids"], run_id, written=batch["written"])
    except DataflowError as exc:
        log.error(f"FAILED: {exc}")
        raise AirflowFailException(str(exc)) from None


_NAMES = _names()


@dag(
    dag_id="dataflow_microbatch_once",
    description="One micro-batch of a pipeline now, paused schedule or not; then fires the timer it leaves due.",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "pipeline": Param("billing" if "billing" in _NAMES else (_NAMES[0] if _NAMES else None), type="string",
                          enum=_NAMES, title="Pipeline",
                          description="A registered pipeline (dataflow pipelines lists them)."),
        "fire_due_timer": Param(True, type="boolean", title="Fire the timer it leaves due",
                                description="Wait (without holding a worker) for a processing-time timer the "
                                            "batch leaves pending, then run the batch that fires it."),
    },
    tags=["dataflow", "microbatch"],
    is_paused_upon_creation=False,  # schedule=None: nothing runs until someone triggers it
    doc_md=__doc__,
    default_args={"retries": 0},
)
def dataflow_microbatch_once() -> None:
    @task(outlets=[CORRECTIONS])
    def microbatch(**context: Any) -> dict[str, Any]:
        return microbatch_task(context["params"]["pipeline"], context["outlet_events"])

    @task
    def gate_output(batch: dict[str, Any], **context: Any) -> dict[str, Any]:
        return _gate(context["params"]["pipeline"], batch, context["run_id"])

    @task(outlets=[CORRECTIONS])
    def fire_due_timer(batch: dict[str, Any], gates: dict[str, Any], **context: Any) -> dict[str, Any]:
        import time

        from dataflow_core.airflow import settings
        from dataflow_core.airflow.live_tasks import completeness
        from dataflow_core.model.time import format_instant

        pipeline = context["params"]["pipeline"]
        # The timer the first batch left (not whatever is pending when this task comes back:
        # later batches may have set later ones, and chasing them would never end).
        timer = batch.get("next_timer")
        now = time.time() * 1000
        log.info(completeness(timer, now))
        if not context["params"].get("fire_due_timer", True):
            raise AirflowSkipException("fire due timer is off for this run")
        if timer is None:
            raise AirflowSkipException("no processing-time timer is pending")
        if timer - now > settings.timer_wait_ms():
            raise AirflowSkipException(f"the timer at {format_instant(timer)} is further off than $DATAFLOW_TIMER_WAIT")
        if now <= timer:
            log.info(f"waiting for the timer at {format_instant(timer)}; this task comes back then")
            raise AirflowRescheduleException(pendulum.from_timestamp(timer / 1000 + TIMER_MARGIN_S, tz="UTC"))
        return microbatch_task(pipeline, context["outlet_events"])

    @task
    def gate_timer_batch(batch: dict[str, Any], **context: Any) -> dict[str, Any]:
        return _gate(context["params"]["pipeline"], batch, context["run_id"])

    first = microbatch()
    gate_timer_batch(fire_due_timer(first, gate_output(first)))


dataflow_microbatch_once()
