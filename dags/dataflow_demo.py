"""Airflow DAG `dataflow_demo`: run the demo job (generate, validate, window, MERGE into Delta).

Triggered by hand: the UI renders a form from the Params below, and `airflow dags test
dataflow_demo --conf '{"rows": 2000}'` overrides them from the command line. Parsing this
file must stay cheap (the dag-processor re-reads it every few seconds), so Spark is imported
only when the task runs (the job module itself imports it lazily).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import pendulum
from airflow.sdk import Param, dag, task

# Cheap: the job module imports Spark only inside its functions. The form shows its defaults.
from jobs.demo_job import DEFAULT_ROWS, DEFAULT_SEED, DEFAULT_WINDOW

PARAMS = {
    "rows": Param(
        DEFAULT_ROWS,
        type="integer",
        minimum=1,
        title="Rows",
        description="How many sample events to generate.",
    ),
    "seed": Param(
        DEFAULT_SEED,
        type="integer",
        title="Seed",
        description="Random seed of the generator: the same seed gives the same events.",
    ),
    "window": Param(
        DEFAULT_WINDOW,
        type="string",
        minLength=1,
        title="Window",
        description="Fixed event-time window size: a whole number and a unit (500ms, 30s, 10m, 1h, 1d).",
    ),
    "master": Param(
        os.environ.get("DATAFLOW_SPARK_MASTER", "local[*]"),
        type="string",
        minLength=1,
        title="Spark master",
        description=(
            "Where Spark runs: local[*], spark://host:7077, yarn, k8s://... "
            "Defaults to $DATAFLOW_SPARK_MASTER of the Airflow worker."
        ),
    ),
    "warehouse": Param(
        os.environ.get("DATAFLOW_WAREHOUSE", ""),
        type="string",
        title="Warehouse",
        description=(
            "Root directory or URI (file:/..., s3a://bucket/prefix) of the Delta tables. "
            "Empty: $DATAFLOW_WAREHOUSE of the Airflow worker, else ./warehouse."
        ),
    ),
}


def job_argv(params: Mapping[str, Any]) -> list[str]:
    """Turn the run's params into the demo job's command line (empty values are left out)."""
    argv: list[str] = []
    for name in ("rows", "seed", "window", "master", "warehouse"):
        value = params.get(name)
        if value is None or value == "":
            continue
        argv += [f"--{name}", str(value)]
    return argv


@dag(
    dag_id="dataflow_demo",
    description="Sample events -> Great Expectations -> windowed counts MERGEd into Delta.",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["dataflow", "demo", "spark", "delta"],
    is_paused_upon_creation=False,  # schedule=None: nothing runs until someone triggers it
    doc_md=__doc__,
)
def dataflow_demo() -> None:
    @task(task_id="run_demo_job")
    def run_demo_job(**context: Any) -> list[str]:
        """Run `jobs.demo_job.main` in the worker; a non-zero exit fails the task."""
        from jobs.demo_job import main

        argv = job_argv(context["params"])
        print("running jobs.demo_job " + " ".join(argv), flush=True)
        status = main(argv)
        if status:  # 2: bad parameter (the job printed which), 1: the count ledger is off
            raise RuntimeError(f"jobs.demo_job exited with status {status} (argv: {argv})")
        return argv

    run_demo_job()


dataflow_demo()
