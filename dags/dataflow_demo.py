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
from dataflow_core.examples.jobs.demo_job import DEFAULT_ROWS, DEFAULT_SEED, DEFAULT_WINDOW, OUTPUT_TABLE

# A positive whole number and one unit of the model's durations: the form refuses `abc` or
# `0m` before a run exists (the job would only fail after starting).
WINDOW_PATTERN = r"^[1-9][0-9]*(ms|s|m|h|d)$"

PARAMS = {
    # exclusiveMinimum, not minimum: the form's number box clamps to `minimum` silently (a
    # typed -5 became 1); with exclusiveMinimum a bad value is refused with the reason.
    "rows": Param(
        DEFAULT_ROWS,
        type="integer",
        exclusiveMinimum=0,
        title="Rows",
        description="How many sample events to generate (a whole number, at least 1).",
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
        pattern=WINDOW_PATTERN,
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
        os.environ.get("DATAFLOW_WAREHOUSE") or None,
        type=["null", "string"],  # optional: the form accepts it empty
        title="Warehouse",
        description=(
            "Root directory or URI (file:/..., s3a://bucket/prefix) of the Delta tables. "
            "Empty: $DATAFLOW_WAREHOUSE of the Airflow worker, else ./warehouse."
        ),
    ),
}


def clear_previous_output(params: Mapping[str, Any]) -> None:
    """Each run regenerates the input table, so the output must describe this run only: rows
    MERGEd by an earlier run (perhaps with another window size) are deleted first, as a Delta
    DELETE (the earlier version stays readable by time travel)."""
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import table_exists, table_path

    spark = get_spark("dataflow-demo", master=params.get("master") or None,
                      warehouse=params.get("warehouse") or None)
    if table_exists(spark, OUTPUT_TABLE):
        from delta.tables import DeltaTable

        DeltaTable.forPath(spark, table_path(spark, OUTPUT_TABLE)).delete()
        print(f"cleared {OUTPUT_TABLE}: this run's windows replace the previous run's", flush=True)


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
        """Run `dataflow_core.examples.jobs.demo_job.main` in the worker; a non-zero exit fails the task."""
        from dataflow_core.errors import DataflowError
        from dataflow_core.examples.jobs.demo_job import main, parse_window

        params = context["params"]
        argv = job_argv(params)
        try:  # the job's own checks, before clearing anything
            from dataflow_core.sample.config import SampleConfig

            parse_window(str(params.get("window") or DEFAULT_WINDOW))
            SampleConfig(rows=int(params["rows"]), seed=int(params["seed"]))
        except DataflowError as exc:
            raise RuntimeError(f"dataflow_core.examples.jobs.demo_job would refuse its parameters: {exc}") from None
        clear_previous_output(params)
        print("running dataflow_core.examples.jobs.demo_job " + " ".join(argv), flush=True)
        status = main(argv)
        if status:  # 2: bad parameter (the job printed which), 1: the count ledger is off
            raise RuntimeError(f"dataflow_core.examples.jobs.demo_job exited with status {status} (argv: {argv})")
        return argv

    run_demo_job()


dataflow_demo()
