"""A backfill that waits for a human: `dataflow_backfill` with "require approval".

    plan_backfill -> approve_backfill (Approve / Reject) -> apply_plan | reject_plan

`plan_backfill` plans the whole range as one run (`--plan-only`: its corrections stored,
nothing applied, the pipeline released) and logs the diff; `approve_backfill` is Airflow's
human-in-the-loop branch operator (standard provider), whose page ("Required actions")
shows the diff's summary as Markdown and waits; its choice runs `apply_plan` (the stored
plan, once, refused when stale) or `reject_plan` (the plan discarded, no table changed).
Who chose and when come from the operator's response and are recorded in `dataflow_runs`
by the task that acts on it. One run for the whole range, not one per day: one plan is
one decision, and a window belongs to the range its start falls in either way.
"""

from __future__ import annotations

from typing import Any, Mapping

from airflow.providers.standard.operators.hitl import HITLBranchOperator

from dataflow_core.airflow.tasks import Say, checked, ledger_counts, log_info, spark_session, written_per_stage

APPROVE, REJECT = "Approve", "Reject"
DECISION_KEY = "decision"
"""The XCom key under which `PlanApproval` leaves the choice, who made it and when."""
SHOWN_WINDOWS = 20  # per stage in the approval page; `dataflow plan show` and the explorer list all


class PlanApproval(HITLBranchOperator):
    """Approve or Reject, branching to the task that acts on it. The response's user and
    time are pushed (key `decision`) before branching: the branch's own return value says
    which task runs, not who decided, and the decision must be recorded by who made it."""

    def __init__(self, *, apply_task: str, reject_task: str, **kwargs: Any) -> None:
        super().__init__(options=[APPROVE, REJECT], options_mapping={APPROVE: apply_task, REJECT: reject_task},
                         **kwargs)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if "error" not in event:
            user = event.get("responded_by_user") or {}
            at = event.get("responded_at")
            context["ti"].xcom_push(key=DECISION_KEY, value={
                "option": (event.get("chosen_options") or [None])[0],
                "user": user.get("name") or user.get("id") or "unknown",
                "at": at.isoformat() if hasattr(at, "isoformat") else str(at),
            })
        return super().execute_complete(context=context, event=event)


def plan_range(plan: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """Plan the request's whole range (`dataflow backfill --plan-only`); log the diff and
    return the run id and the approval page's Markdown."""
    from dataflow_core.airflow.settings import plan_url
    from dataflow_core.cli.plan import plan_lines
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.jobs.plan_diff import plan_diff

    pipeline = plan["pipeline"]
    spark = spark_session(f"dataflow-plan-{pipeline}")
    checked(spark, pipeline)
    say(f"planning backfill {pipeline} [{plan['start']}, {plan['end']}); nothing will be applied before approval")
    result = run_backfill(spark, pipeline, plan["start"], plan["end"], plan_only=True, progress=lambda m: say("  " + m))
    for line in plan_lines(spark, result.run_id, pipeline, limit=None):
        say(line)
    state, diffs = plan_diff(spark, result.run_id, pipeline)
    url = plan_url(pipeline, result.run_id)
    say(f"the plan in the browser: {url}")
    return {"run_id": result.run_id, "markdown": approval_markdown(state, diffs, url),
            "ledger": ledger_counts(result.ledger), "ledger_ok": result.ledger_ok}


def approval_markdown(state: Any, diffs: list[Any], explorer_url: str | None = None) -> str:
    """The approval page's body: the plan's headline, per stage its first windows as a
    table and the sum of its changes per key, and where the full diff is."""
    from dataflow_core.diagram.plan_table import key_rows, stage_rows
    from dataflow_core.spark.jobs.plan_diff import headline

    out = [f"**{headline(state, diffs)}**", ""]
    for diff in diffs:
        out.append(f"#### {diff.stage}: {len(diff.changes):,} window(s) change")
        if diff.changes:
            out += _md_table(*stage_rows(diff, SHOWN_WINDOWS))
            if len(diff.changes) > SHOWN_WINDOWS:
                out.append(f"\n... and {len(diff.changes) - SHOWN_WINDOWS:,} more (see the full diff)")
            columns, rows = key_rows(diff)
            if rows:
                out += ["", "Sum of changes per key:", ""] + _md_table(columns, rows)
        out.append("")
    where = f"[the pane explorer's plan view]({explorer_url}), or " if explorer_url else ""
    out.append(f"Full diff: {where}`dataflow plan show {state.run.run_id}`. Approve applies exactly this plan "
               "(refused if the input or an output changed since); Reject discards it.")
    return "\n".join(out)


def _md_table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return "" if v is None else str(v).replace("|", "\\|")

    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]]


def apply_approved(plan: Mapping[str, Any], run_id: str, decision: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """Apply the approved plan (`--apply`), recorded as decided by the approver; the run as
    `summary` and `gate_output` read a day's. DataflowError for a stale plan (recorded)."""
    from dataflow_core.errors import DataflowError
    from dataflow_core.spark.jobs.plans import apply_plan, decided
    from dataflow_core.spark.sinks.runs import PlanState

    pipeline = plan["pipeline"]
    spark = spark_session(f"dataflow-apply-{pipeline}")
    say(f"{decision.get('user')} approved plan {run_id} at {decision.get('at')}; applying it")
    result = apply_plan(spark, pipeline, run_id, decision.get("user"), say=lambda m: say("  " + m))
    if isinstance(result, PlanState):
        raise DataflowError(decided(result))
    ledger = ledger_counts(result.ledger)
    say(f"run {run_id} applied: " + ", ".join(f"{k} {v:,}" for k, v in ledger.items()))
    return {"day": range_label(plan), "run_id": run_id, "ledger": ledger, "ledger_ok": result.ledger_ok,
            "written": written_per_stage(result.ledger)}


def reject_planned(plan: Mapping[str, Any], run_id: str, decision: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """Discard the rejected plan (`--reject`), recorded as decided by whoever rejected it."""
    from dataflow_core.spark.jobs.plans import decided, reject_plan

    spark = spark_session(f"dataflow-reject-{plan['pipeline']}")
    state = reject_plan(spark, plan["pipeline"], run_id, decision.get("user"), say)
    if state is not None:
        say(decided(state))
    return {"run_id": run_id, "rejected_by": decision.get("user"), "at": decision.get("at")}


def range_label(plan: Mapping[str, Any]) -> str:
    return f"{plan['start']} to {plan['end']}"


def rejected_line(plan: Mapping[str, Any], rejected: Mapping[str, Any]) -> str:
    """`summary`'s first line for a rejected plan: nothing was applied, which is a success."""
    return (f"REJECTED: plan {rejected.get('run_id')} of {plan.get('pipeline')} over [{plan.get('start')}, "
            f"{plan.get('end')}) rejected by {rejected.get('rejected_by')} at {rejected.get('at')}; no table of the "
            "pipeline was changed")


