"""Airflow DAGs `dataflow_daily__<pipeline>`, one per registered pipeline.

Scheduled daily; each run's data interval is one day of event time (UTC midnight to
midnight), so Airflow's own Backfill (the UI's "Backfill" dialog, `airflow backfill create
--dag-id dataflow_daily__billing --from-date 2024-05-01 --to-date 2024-05-07`) recomputes any
range of days. Tasks: gate the day's input -> backfill the day -> gate panes and results ->
summary. A day that changed windows publishes an asset event per changed results table
(`dataflow_core.airflow.assets`); one that changed nothing, none. Created paused: unpause the pipelines you want kept up to date every night.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import CronDataIntervalTimetable, dag, task
from airflow.sdk.exceptions import AirflowFailException

from dataflow_core.airflow import settings
from dataflow_core.airflow.assets import CORRECTIONS
from dataflow_core.airflow.dag_ids import daily_dag_id
from dataflow_core.pipelines import all_pipelines
from dataflow_core.model.windows import GlobalWindows


def _day(context: dict[str, Any]) -> tuple[str, str]:
    return (context["data_interval_start"].date().isoformat(),
            context["data_interval_end"].date().isoformat())


def _run(function, *args: Any) -> Any:
    from dataflow_core.errors import DataflowError

    try:
        return function(*args)
    except DataflowError as exc:
        import logging

        logging.getLogger("dataflow").error(f"FAILED: {exc}")
        raise AirflowFailException(str(exc)) from None


def make_daily_dag(pipeline: str, description: str):
    @dag(
        dag_id=daily_dag_id(pipeline),
        description=f"Daily backfill of {pipeline}: {description}",
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
        start_date=settings.daily_start(),
        catchup=False,
        max_active_runs=1,
        tags=["dataflow", "daily", pipeline],
        is_paused_upon_creation=True,
        doc_md=__doc__,
        default_args={"retries": 0},
    )
    def daily() -> None:
        @task
        def gate_input(**context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.tasks import gate_input_range

            start, end = _day(context)
            return _run(gate_input_range, pipeline, start, end, context["run_id"])

        @task(retries=1, outlets=[CORRECTIONS])
        def backfill(gate: dict[str, Any], **context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.assets import publish
            from dataflow_core.airflow.tasks import backfill_day

            start, _ = _day(context)
            done = _run(backfill_day, pipeline, start, False, "1m", 1, f"{pipeline}__{context['run_id']}")
            publish(context["outlet_events"], done["corrections"])
            return done

        @task
        def gate_output(day: dict[str, Any], **context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.tasks import gate_output as run_gate

            from dataflow_core.airflow.tasks import add_written

            return _run(lambda: run_gate(pipeline, [day["run_id"]], context["run_id"], written=add_written([day])))

        # all_done: runs after a failure too and says in its first line what failed (see
        # dataflow_backfill's summary), then fails itself.
        @task(trigger_rule="all_done")
        def summary(**context: Any) -> dict[str, Any]:
            from dataflow_core.airflow.tasks import as_list, summarize

            ti = context["ti"]
            start, end = _day(context)
            plan = {"pipeline": pipeline, "start": start, "end": end, "replay": False, "days": [start]}
            result = summarize(plan, as_list(ti.xcom_pull(task_ids="backfill")), ti.xcom_pull(task_ids="gate_output"),
                               input_gate=ti.xcom_pull(task_ids="gate_input"))
            if not result["succeeded"]:
                raise AirflowFailException("the day's backfill failed: see the first line of this log")
            return result

        day = backfill(gate_input())
        gate_output(day) >> summary()

    return daily()


for _name, _spec in all_pipelines().items():
    if not isinstance(_spec.stages[0].strategy.window_fn, GlobalWindows):  # no day owns a global window
        make_daily_dag(_name, _spec.description)
