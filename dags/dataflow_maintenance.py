"""Airflow DAG `dataflow_maintenance`: keeps every pipeline's Delta tables lean.

Weekly by default (`$DATAFLOW_MAINTENANCE_SCHEDULE`), one task per registered pipeline:
forget event ids past the micro-batches' duplicate-detection horizon
(`<pipeline>__seen_ids`, see dataflow_core/spark/microbatch.py), `OPTIMIZE` (compact small files) and `VACUUM` every output and
state table. VACUUM keeps `$DATAFLOW_VACUUM_RETENTION_HOURS` (168) of time travel, raised to
the pipeline's longest allowed lateness plus a day, so a late correction can still read
the versions it needs, and longer where an `--abandon` of the run locking the pipeline could
restore an older version. Each task locks its pipeline while it works, as `dataflow reset`
does (a live micro-batch due meanwhile is busy, skipped, instead of failing on a conflict with
OPTIMIZE, and runs at its next turn); it waits up to
an hour for a run working on the pipeline, and fails (never skips) when the pipeline stays
held or its holder is gone or failed, with the line naming that run. `dataflow maintain
--pipeline P` does the same from the command line. Created paused.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import dag, task

from dataflow_core.airflow import settings
from dataflow_core.pipelines import all_pipelines


@dag(
    dag_id="dataflow_maintenance",
    description="OPTIMIZE and VACUUM the pipelines' tables; expire duplicate-detection state.",
    schedule=settings.maintenance_schedule(),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["dataflow", "maintenance", "delta"],
    is_paused_upon_creation=True,
    doc_md=__doc__,
)
def dataflow_maintenance() -> None:
    for name in all_pipelines():

        @task(task_id=f"maintain__{name}", max_active_tis_per_dag=1)
        def maintain(pipeline: str = name) -> dict[str, Any]:
            from dataflow_core.airflow.maintenance import maintenance_task

            return maintenance_task(pipeline)

        maintain()


dataflow_maintenance()
