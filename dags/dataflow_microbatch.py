"""Airflow DAGs `dataflow_microbatch__<pipeline>`, one per registered pipeline.

Every 5 minutes by default (`$DATAFLOW_MICROBATCH_SCHEDULE`, or
`$DATAFLOW_MICROBATCH_SCHEDULE__<PIPELINE>` for one pipeline: a cron expression or preset),
one active run at a time, no catch-up: `microbatch` runs one micro-batch of the pipeline
(`dataflow microbatch --pipeline NAME`), then `gate_output` checks the panes and results of
the windows it touched. Created paused. A run that finds the pipeline busy (exit 75: another
micro-batch or a backfill that is alive and working has it locked) is skipped with that reason. A
run that finds it locked by a run whose process is gone or whose last status is `failed` (exit
76, `PipelineStuck`) *fails*, with one line naming that run and the commands that resume and
abandon it: nothing runs until someone does, so a skip would hide it.

A batch whose late panes changed windows publishes an asset event per results table it
changed (`dataflow_core.airflow.assets`, reason "late data").

The output gate checks the panes the batch wrote (the pane log names them `batch-N`), and
fails if the batch wrote panes but the gate found none to check.

Triggering by hand: Airflow does not run a paused DAG's runs. The trigger dialog's "Unpause
on trigger" box (ticked by default) unpauses the DAG, so the 5-minute schedule starts too;
unticked, the run stays *queued* until someone unpauses the DAG. For one batch only, trigger
`dataflow_microbatch_once` (no schedule, never paused) with the pipeline as its parameter.
Pause again with the DAG's toggle or `airflow dags pause dataflow_microbatch__<pipeline>`.
A manual run while a scheduled one is running waits for it (one active run per DAG); a
micro-batch that still finds the pipeline busy (a live backfill) is skipped, one that finds it
stuck fails, as above.

Live completeness: a batch can leave a processing-time timer pending (billing's early
figures every 10 minutes); the windows it belongs to are incomplete until a batch runs after
it. The `microbatch` task's log says when that is; on the schedule the next batch fires it
(the schedule is shorter than the timer's period), while paused nothing does.
"""

from __future__ import annotations

from typing import Any

import logging

import pendulum
from airflow.sdk import dag, task
from airflow.sdk.exceptions import AirflowFailException

from dataflow_core.airflow import settings
from dataflow_core.airflow.assets import CORRECTIONS
from dataflow_core.airflow.dag_ids import microbatch_dag_id
from dataflow_core.pipelines import all_pipelines

log = logging.getLogger("dataflow")


def make_microbatch_dag(pipeline: str, description: str):
    @dag(
        dag_id=microbatch_dag_id(pipeline),
        description=f"Micro-batches of {pipeline}: {description}",
        schedule=settings.microbatch_schedule(pipeline),
        start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["dataflow", "microbatch", pipeline],
        is_paused_upon_creation=True,
        doc_md=__doc__,
        default_args={"retries": 0},
    )
    def microbatch_dag() -> None:
        @task(outlets=[CORRECTIONS])
        def microbatch(**context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.batch_task import microbatch_task

            return microbatch_task(pipeline, context["outlet_events"])

        @task
        def gate_output(batch: dict[str, Any], **context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.tasks import gate_output as run_gate
            from dataflow_core.errors import DataflowError

            try:
                return run_gate(pipeline, batch["pane_run_ids"], context["run_id"], written=batch["written"])
            except DataflowError as exc:
                log.error(f"FAILED: {exc}")
                raise AirflowFailException(str(exc)) from None

        gate_output(microbatch())

    return microbatch_dag()


for _name, _spec in all_pipelines().items():
    make_microbatch_dag(_name, _spec.description)
