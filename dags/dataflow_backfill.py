"""Airflow DAG `dataflow_backfill`: a pipeline over a range of event-time days, from a form.

Triggered by hand. The trigger form is built from JSON schemas
(`dataflow_core.airflow.requests.backfill_param_schemas`), so a value of the wrong shape is
refused before a run exists. Tasks:

    check_request -> gate_input -> backfill_day (one mapped task per day) -> gate_output -> summary

With "require approval" ticked (batch mode), the days are not run one by one: the range is
planned as one run and waits for a human (`dataflow_core.airflow.approval`):

    check_request -> gate_input -> plan_backfill -> approve_backfill -> apply_plan -> gate_output -> summary
                                                                     \-> reject_plan ----------------> summary

`approve_backfill` (Airflow's human-in-the-loop branch operator) shows the diff's summary and
waits for Approve or Reject; the choice, who made it and when are recorded in dataflow_runs.
A rejected plan changes nothing, and the run ends failed: `summary` fails with its first
line, `REJECTED: plan ... rejected by ...`, so that the run reads as rejected, not as a green
success. An approved run's `summary` names the approver in its first line.

`check_request` makes the checks a schema cannot (end after start, the maximum range, the
input table exists) without Spark; `gate_input` validates the range's input rows with Great
Expectations and quarantines bad rows (locking the pipeline for that write, rescheduled while
another run has it locked); each `backfill_day` runs `dataflow backfill` for one
day (at most "days at once" of them at a time); `gate_output` checks every stage's pane log
and results for the windows the days touched; `summary` says in its first line whether the run
succeeded and how each gate ended (it runs after a failure too), then logs the ledger.

A day (or an applied plan) that changed windows of a results table publishes an asset event
for that table (`dataflow_core.airflow.assets`: which windows, how many, the largest changes,
the run and why); one that changed nothing publishes none. DAGs scheduled on the table's
asset run on it (`dataflow_invoice_corrections`).

Days of one pipeline write one at a time: each day's backfill has the pipeline locked
(`sinks.pipeline_lock`), and a day that finds it locked is rescheduled (the waiting form, as
`--wait` is on the command line) rather than failed. Not an Airflow pool per pipeline: the
lock also fences micro-batches and backfills started outside this DAG, and a pool would
need one pool made per pipeline by hand; "days at once" still bounds how many days of
different pipelines' runs hold workers. A day that fails on every retry keeps its lock
(a re-run resumes it); the waiting days' logs name it and the way out
(`dataflow backfill --pipeline P --abandon RUN_ID`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import Param, dag, task
from airflow.sdk.exceptions import AirflowFailException

from dataflow_core.airflow.approval import PlanApproval
from dataflow_core.airflow.assets import CORRECTIONS, publish
from dataflow_core.airflow.requests import backfill_param_schemas

SLOT_RETRY_S = 15  # a day waiting for "days at once" is rescheduled, not left holding a worker

PARAMS = {
    name: Param(schema.pop("default"), **schema)
    for name, schema in backfill_param_schemas().items()
}


def _fail_on_dataflow_error(function):
    """A DataflowError (bad request, failed gate) fails the task at once, without retries,
    with its one-line message."""
    import functools

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from dataflow_core.errors import DataflowError

        try:
            return function(*args, **kwargs)
        except DataflowError as exc:
            import logging

            logging.getLogger("dataflow").error(f"FAILED: {exc}")
            raise AirflowFailException(str(exc)) from None

    return wrapper


@dag(
    dag_id="dataflow_backfill",
    description="Backfill a pipeline over days of event time; GE gates the input, panes and results.",
    schedule=None,
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
    tags=["dataflow", "backfill", "spark", "delta", "great_expectations"],
    is_paused_upon_creation=False,  # schedule=None: nothing runs until someone triggers it
    doc_md=__doc__,
    default_args={"retries": 0},
)
def dataflow_backfill() -> None:
    @task
    @_fail_on_dataflow_error
    def check_request(**context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.tasks import check_backfill

        return check_backfill(context["params"])

    @task
    @_fail_on_dataflow_error
    def gate_input(plan: dict[str, Any], **context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.tasks import gate_input_range

        # Busy: a run locking the pipeline kept the gate from writing the quarantine (`gate_input`).
        return _rescheduled_when_busy(
            lambda: gate_input_range(plan["pipeline"], plan["start"], plan["end"], context["run_id"]))

    @task
    def days_of(plan: dict[str, Any], gate: dict[str, Any]) -> list[str]:
        return list(plan["days"])

    # Retries: two days written at once may collide on a Delta commit; a day is idempotent.
    # Outlet: the day's changed results tables get an asset event each (`airflow.assets`).
    @task(retries=2, retry_delay=timedelta(seconds=20), max_active_tis_per_dagrun=8,
          map_index_template="{{ day }}", outlets=[CORRECTIONS])
    def backfill_day(day: str, plan: dict[str, Any], **context: Any) -> dict[str, Any]:
        import logging

        import pendulum
        from airflow.sdk.exceptions import AirflowRescheduleException

        from dataflow_core.airflow.tasks import NoSlot, backfill_day as run_day
        from dataflow_core.errors import PipelineBusy

        context["day"] = day  # names the mapped task in the grid (map_index_template)
        try:
            done = run_day(plan["pipeline"], day, plan["replay"], plan["batch_interval"],
                           plan["days_at_once"], f"{context['dag'].dag_id}__{context['run_id']}",
                           wait_for_slot=False)
            publish(context["outlet_events"], done["corrections"])
            return done
        except (NoSlot, PipelineBusy) as busy:
            # Waiting here would hold a worker slot: come back later instead (up_for_reschedule).
            # PipelineBusy: a live micro-batch of the pipeline is running; the day waits for it.
            logging.getLogger("dataflow").info(f"{busy}: trying again in {SLOT_RETRY_S} s")
            raise AirflowRescheduleException(pendulum.now("UTC").add(seconds=SLOT_RETRY_S)) from None

    # After the days, or after an approved plan's apply (the other path is skipped); what they
    # returned is pulled, since a skipped task's value cannot be passed. The request is pulled
    # too: as an argument it would make check_request an upstream, whose success alone would
    # run this gate (a Spark session and its validations) after a rejected plan, which wrote nothing.
    @task(trigger_rule="none_failed_min_one_success")
    @_fail_on_dataflow_error
    def gate_output(**context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.tasks import add_written, as_list, gate_output as run_gate

        ti = context["ti"]
        plan = ti.xcom_pull(task_ids="check_request")
        days = as_list(ti.xcom_pull(task_ids="backfill_day")) + as_list(ti.xcom_pull(task_ids="apply_plan"))
        return run_gate(plan["pipeline"], [d["run_id"] for d in days], context["run_id"], written=add_written(days))

    # all_done: the summary runs after a failure too, and its first line says what failed;
    # it then fails itself, so the run's state is the truth (a rejected plan's run fails too:
    # green would read as applied). What a task returned is pulled, not passed: a failed task
    # returned nothing, which an argument could not express.
    @task(trigger_rule="all_done")
    def summary(**context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.approval import summarize_run
        from dataflow_core.errors import DataflowError

        ti = context["ti"]
        plan = ti.xcom_pull(task_ids="check_request") or dict(context["params"])
        try:
            return summarize_run(plan, lambda task, key="return_value": ti.xcom_pull(task_ids=task, key=key))
        except DataflowError as exc:  # its first line is logged already
            raise AirflowFailException(str(exc)) from None

    @task.branch
    def route(plan: dict[str, Any], gate: dict[str, Any]) -> str:
        return "plan_backfill" if plan.get("require_approval") else "days_of"

    plan = check_request()
    gate = gate_input(plan)
    chosen = route(plan, gate)
    day_list = days_of(plan, gate)
    days = backfill_day.partial(plan=plan).expand(day=day_list)
    planned, applied, rejected = _approval_path(plan)
    chosen >> [day_list, planned]
    checked_output = gate_output()
    [days, applied] >> checked_output
    [checked_output, rejected] >> summary()


def _approval_path(plan: Any) -> tuple[Any, Any, Any]:
    """With "Require approval": plan_backfill -> approve_backfill -> apply_plan | reject_plan
    (see the module docstring), inside the DAG's definition; the first task and the two last."""

    @task
    @_fail_on_dataflow_error
    def plan_backfill(plan: dict[str, Any]) -> dict[str, Any]:
        from dataflow_core.airflow.approval import plan_range

        return _rescheduled_when_busy(lambda: plan_range(plan))

    @task(outlets=[CORRECTIONS])
    @_fail_on_dataflow_error
    def apply_plan(plan: dict[str, Any], planned: dict[str, Any], **context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.approval import DECISION_KEY, apply_approved

        decision = context["ti"].xcom_pull(task_ids="approve_backfill", key=DECISION_KEY) or {}
        applied = _rescheduled_when_busy(lambda: apply_approved(plan, planned["run_id"], decision))
        publish(context["outlet_events"], applied["corrections"])
        return applied

    @task
    @_fail_on_dataflow_error
    def reject_plan(plan: dict[str, Any], planned: dict[str, Any], **context: Any) -> dict[str, Any]:
        from dataflow_core.airflow.approval import DECISION_KEY, reject_planned

        decision = context["ti"].xcom_pull(task_ids="approve_backfill", key=DECISION_KEY) or {}
        return _rescheduled_when_busy(lambda: reject_planned(plan, planned["run_id"], decision))

    planned = plan_backfill(plan)
    approval = PlanApproval(
        task_id="approve_backfill", subject="Apply this backfill's corrections?", apply_task="apply_plan",
        reject_task="reject_plan", body="{{ ti.xcom_pull(task_ids='plan_backfill')['markdown'] }}",
    )
    applied, rejected = apply_plan(plan, planned), reject_plan(plan, planned)
    planned >> approval >> [applied, rejected]
    return planned, applied, rejected


def _rescheduled_when_busy(work):
    """Run `work`; a pipeline locked by another run reschedules the task instead of failing it."""
    import logging

    import pendulum
    from airflow.sdk.exceptions import AirflowRescheduleException

    from dataflow_core.errors import PipelineBusy

    try:
        return work()
    except PipelineBusy as busy:
        logging.getLogger("dataflow").info(f"{busy}: trying again in {SLOT_RETRY_S} s")
        raise AirflowRescheduleException(pendulum.now("UTC").add(seconds=SLOT_RETRY_S)) from None


dataflow_backfill()
