"""A backfill that waits for a human: `dataflow_backfill` with "require approval".

    plan_backfill -> approve_backfill (Approve / Reject) -> apply_plan | reject_plan

`plan_backfill` plans the whole range as one run (`--plan-only`: its corrections stored,
nothing applied, the pipeline released) and logs the diff; `approve_backfill` is Airflow's
human-in-the-loop branch operator (standard provider), whose page ("Required actions")
shows the diff's summary as Markdown and waits; its choice runs `apply_plan` (the stored
plan, once, refused when stale) or `reject_plan` (the plan discarded, no table changed).
Who chose and when come from the operator's response and are recorded in `dataflow_runs`
by the task that acts on it. Only an approver decides (`PlanApproval`: `$DATAFLOW_APPROVERS`,
never the requester unless `$DATAFLOW_ALLOW_SELF_APPROVAL`), a request nobody decides is
rejected after `$DATAFLOW_APPROVAL_TIMEOUT`, and the page escapes every string from data. One run for the whole range, not one per day: one plan is
one decision, and a window belongs to the range its start falls in either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from airflow.providers.standard.operators.hitl import HITLBranchOperator

from dataflow_core.airflow.tasks import Say, checked, ledger_counts, log_info, spark_session, written_per_stage

APPROVE, REJECT = "Approve", "Reject"
DECISION_KEY = "decision"
"""The XCom key under which `PlanApproval` leaves the choice, who made it and when."""
SHOWN_WINDOWS = 20  # per stage in the approval page; `dataflow plan show` and the explorer list all


class PlanApproval(HITLBranchOperator):
    """Approve or Reject, branching to the task that acts on it, decided only by an approver.

    Who may decide (`approval_rule`, read when the task starts): the users of
    `$DATAFLOW_APPROVERS` (user ids and `role:NAME`), given to Airflow as the request's
    assigned users so that its UI and API let no one else respond; unconfigured, whoever
    Airflow lets respond. The user who triggered the run is not an approver unless
    `$DATAFLOW_ALLOW_SELF_APPROVAL` is true: their Approve is refused (`refusal`), the task
    fails with one line and nothing is applied. After `$DATAFLOW_APPROVAL_TIMEOUT` without
    a decision the request is rejected (Airflow's timeout default), the plan discarded.

    The response's user and time are pushed (key `decision`) before branching: the branch's
    own return value says which task runs, not who decided, and the decision must be
    recorded by who made it."""

    def __init__(self, *, apply_task: str, reject_task: str, **kwargs: Any) -> None:
        super().__init__(options=[APPROVE, REJECT], options_mapping={APPROVE: apply_task, REJECT: reject_task},
                         defaults=[REJECT], **kwargs)

    def execute(self, context: Any) -> Any:
        from dataflow_core.airflow import settings

        from airflow.sdk.exceptions import AirflowFailException

        from dataflow_core.errors import DataflowError

        try:
            rule = approval_rule(_requester(context))
        except DataflowError as exc:
            self.log.error(f"FAILED: {exc}")
            raise AirflowFailException(str(exc)) from None
        self.assigned_users = [{"id": u, "name": u} for u in rule.assigned] or None
        self.response_timeout = settings.approval_timeout()
        self.log.info(rule.describe() + f"; rejected if nobody decides within {self.response_timeout}")
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from airflow.sdk.exceptions import AirflowFailException

        if "error" not in event:
            user = event.get("responded_by_user") or {}
            at = event.get("responded_at")
            option = (event.get("chosen_options") or [None])[0]
            if event.get("timedout"):
                who = TIMED_OUT
                self.log.info(f"REJECTED: nobody decided within {self.response_timeout}: the plan is discarded, "
                              "nothing applied")
            else:
                who = user.get("name") or user.get("id") or "unknown"
                refused = approval_rule(_requester(context)).refusal(option, user)
                if refused:
                    self.log.error(f"FAILED: {refused}")
                    raise AirflowFailException(refused)
            context["ti"].xcom_push(key=DECISION_KEY, value={
                "option": option, "user": who,
                "at": at.isoformat() if hasattr(at, "isoformat") else str(at),
            })
        return super().execute_complete(context=context, event=event)


TIMED_OUT = "nobody (approval timed out)"
"""`decided_by` of a plan rejected because no approver decided in time."""


def _requester(context: Any) -> str | None:
    run = context.get("dag_run")
    return getattr(run, "triggering_user_name", None) or None


@dataclass(frozen=True)
class ApprovalRule:
    """Who may approve one request: `approvers` (None: whoever Airflow lets respond), less the
    requester unless `allow_self`."""

    requester: str | None
    approvers: frozenset[str] | None
    allow_self: bool

    @property
    def assigned(self) -> list[str]:
        """The users to assign the request to in Airflow (empty: not restricted)."""
        if self.approvers is None:
            return []
        return sorted(u for u in self.approvers if self.allow_self or u != self.requester)

    def describe(self) -> str:
        who = ", ".join(self.assigned) if self.approvers is not None else "any user Airflow lets respond"
        self_part = "" if self.allow_self or not self.requester else f", not {self.requester} who asked for it"
        return f"waiting for approval by {who}{self_part}"

    def refusal(self, option: str | None, user: Mapping[str, Any]) -> str | None:
        """Why this user's choice does not count (None: it does). Only an Approve is checked:
        rejecting discards a plan, which anyone allowed to respond may do."""
        if option != APPROVE:
            return None
        names = {str(v) for v in (user.get("id"), user.get("name")) if v}
        if not names:
            return "approval by an unknown user refused: Airflow's response names no user; nothing was applied"
        if self.requester and self.requester in names and not self.allow_self:
            return (f"approval by {self.requester} refused: they asked for this backfill, and the requester is not "
                    "an approver (set DATAFLOW_ALLOW_SELF_APPROVAL=true to allow it); nothing was applied")
        if self.approvers is not None and not names & set(self.assigned):
            return (f"approval by {', '.join(sorted(names)) or 'an unknown user'} refused: not among the approvers "
                    f"({', '.join(self.assigned) or 'none'}, $DATAFLOW_APPROVERS); nothing was applied")
        return None


def approval_rule(requester: str | None) -> ApprovalRule:
    """The rule for a request by `requester` from the settings (`settings.approvers`, ...);
    `role:NAME` entries become the role's users. DataflowError when the approvers leave no
    one but the requester: such a request could never be approved."""
    from dataflow_core.airflow import settings
    from dataflow_core.errors import DataflowError

    entries = settings.approvers()
    allow_self = settings.allow_self_approval()
    if not entries:
        return ApprovalRule(requester, None, allow_self)
    users = frozenset(u for e in entries for u in (role_users(e[5:].strip()) if e.startswith("role:") else [e]))
    rule = ApprovalRule(requester, users, allow_self)
    if not rule.assigned:
        raise DataflowError(f"no approver for a backfill requested by {requester}: $DATAFLOW_APPROVERS="
                            f"{','.join(entries)!r} names no one else (add an approver, or set "
                            "DATAFLOW_ALLOW_SELF_APPROVAL=true)")
    return rule


def role_users(role: str) -> list[str]:
    """The users of an Airflow role, where the auth manager can list them (the simple auth
    manager's `[core] simple_auth_manager_users`); others refuse in one line, since a role the
    product cannot resolve must not silently mean nobody or everybody."""
    from airflow.configuration import conf

    from dataflow_core.errors import DataflowError

    manager = conf.get("core", "auth_manager", fallback="") or ""
    if not manager.endswith("SimpleAuthManager"):
        raise DataflowError(f"$DATAFLOW_APPROVERS: role:{role} cannot be resolved with auth manager {manager!r} "
                            "(only the simple auth manager lists its users): name the approvers' user ids")
    users = [u.split(":") for u in conf.getlist("core", "simple_auth_manager_users", fallback="")]
    return [u[0] for u in users if len(u) > 1 and u[1].strip().lower() == role.lower()]


def plan_range(plan: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """Plan the request's whole range (`dataflow backfill --plan-only`); log the diff and
    return the run id and the approval page's Markdown."""
    from dataflow_core.airflow.settings import plan_url
    from dataflow_core.cli.plan import plan_lines
    from dataflow_core.diagram.plan_table import headline
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.jobs.plan_diff import plan_diff, plan_record

    pipeline = plan["pipeline"]
    spark = spark_session(f"dataflow-plan-{pipeline}")
    checked(spark, pipeline)
    say(f"planning backfill {pipeline} [{plan['start']}, {plan['end']}); nothing will be applied before approval")
    result = run_backfill(spark, pipeline, plan["start"], plan["end"], plan_only=True, progress=lambda m: say("  " + m))
    state, diffs = plan_diff(spark, result.run_id, pipeline)
    for line in plan_lines(plan_record(state), diffs, limit=None):
        say(line)
    url = plan_url(pipeline, result.run_id)
    say(f"the plan in the browser: {url}")
    markdown = approval_markdown(headline(plan_record(state), diffs), result.run_id, diffs, url)
    return {"run_id": result.run_id, "markdown": markdown, "ledger": ledger_counts(result.ledger),
            "ledger_ok": result.ledger_ok}


def approval_markdown(head: str, run_id: str, diffs: list[Any], explorer_url: str | None = None) -> str:
    """The approval page's body: the plan's headline, per stage its first windows as a
    table and the sum of its changes per key, and where the full diff is. Every string that
    comes from data or a request (keys, values, names, the headline) is escaped (`md_text`):
    a key must not rewrite the page an approver reads."""
    from dataflow_core.diagram.plan_table import key_rows, stage_rows

    out = [f"**{md_text(head)}**", ""]
    for diff in diffs:
        out.append(f"#### {md_text(diff.stage)}: {len(diff.changes):,} window(s) change")
        if diff.changes:
            out += _md_table(*stage_rows(diff, SHOWN_WINDOWS))
            if len(diff.changes) > SHOWN_WINDOWS:
                out.append(f"\n... and {len(diff.changes) - SHOWN_WINDOWS:,} more (see the full diff)")
            columns, rows = key_rows(diff)
            if rows:
                out += ["", "Sum of changes per key:", ""] + _md_table(columns, rows)
        out.append("")
    where = f"[the pane explorer's plan view](<{_md_url(explorer_url)}>), or " if explorer_url else ""
    out.append(f"Full diff: {where}dataflow plan show {md_text(run_id)}. Approve applies exactly this plan "
               "(refused if the input or an output changed since); Reject discards it.")
    return "\n".join(out)


_MD_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def md_text(value: Any) -> str:
    """`value` as literal Markdown text: each ASCII punctuation character backslash-escaped
    (CommonMark renders an escaped one as itself, so no emphasis, link, image, HTML tag,
    entity or table cell boundary can start), line breaks as spaces."""
    text = " ".join(str(value).splitlines())
    return _MD_PUNCTUATION.sub(r"\\\1", text)


def _md_url(url: str) -> str:
    """A link destination in `<...>`: nothing in it may close the brackets or break the line."""
    return "".join(c if c not in "<>\n\r" else "%{:02X}".format(ord(c)) for c in url)


def _md_table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return "" if v is None else md_text(v)

    return ["| " + " | ".join(md_text(c) for c in columns) + " |", "|" + "---|" * len(columns),
            *["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]]


def apply_approved(plan: Mapping[str, Any], run_id: str, decision: Mapping[str, Any], say: Say = log_info) -> dict[str, Any]:
    """Apply the approved plan (`--apply`), recorded as decided by the approver; the run as
    `summary` and `gate_output` read a day's. DataflowError for a stale plan (recorded)."""
    from dataflow_core.errors import DataflowError
    from dataflow_core.spark.jobs.plans import apply_plan, decided
    from dataflow_core.spark.sinks.runs import PlanState

    from dataflow_core.airflow.assets import results_versions, run_corrections
    from dataflow_core.airflow.lineage import report_lineage

    pipeline = plan["pipeline"]
    spark = spark_session(f"dataflow-apply-{pipeline}")
    before = results_versions(pipeline)
    say(f"{decision.get('user')} approved plan {run_id} at {decision.get('at')}; applying it")
    result = apply_plan(spark, pipeline, run_id, decision.get("user"), say=lambda m: say("  " + m))
    if isinstance(result, PlanState):
        raise DataflowError(decided(result))
    ledger = ledger_counts(result.ledger)
    say(f"run {run_id} applied: " + ", ".join(f"{k} {v:,}" for k, v in ledger.items()))
    report_lineage(pipeline)
    return {"day": range_label(plan), "run_id": run_id, "ledger": ledger, "ledger_ok": result.ledger_ok,
            "written": written_per_stage(result.ledger), "corrections": run_corrections(pipeline, [run_id], before)}


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


Pull = Callable[..., Any]
"""What a task returned, by task id (and XCom key): `ti.xcom_pull` (None: it failed or did not run)."""


def summarize_run(plan: Mapping[str, Any], pull: Pull, say: Say = log_info) -> dict[str, Any]:
    """`summary` of a `dataflow_backfill` run: the days' ledgers (`tasks.summarize`), or for a
    run that waited for approval how it was decided and the applied plan's ledger. Its first
    line says how the run ended; DataflowError (the task, and so the run, fails) when it did not
    succeed, a rejected plan included: green would read as corrections applied."""
    from dataflow_core.airflow.tasks import as_list, summarize
    from dataflow_core.errors import DataflowError

    rejected = pull("reject_plan")
    if rejected:
        line = rejected_line(plan, rejected)
        say(line)
        raise DataflowError(line)
    days, approval = as_list(pull("backfill_day")), None
    if plan.get("require_approval"):  # one run for the range: the applied plan
        approval = approval_verdict(pull("approve_backfill", DECISION_KEY))
        plan, days = dict(plan, days=[range_label(plan)]), as_list(pull("apply_plan"))
    result = summarize(plan, days, pull("gate_output"), say=say, input_gate=pull("gate_input"), approval=approval)
    if not result["succeeded"]:
        raise DataflowError("the backfill failed: see the first line of this log")
    return result


def approval_verdict(decision: Mapping[str, Any] | None) -> str:
    """How the approval ended, for `summary`'s first line, from `PlanApproval`'s decision
    (None: `approve_backfill` failed, e.g. a refused self-approval, or did not run)."""
    if not decision:
        return "plan not approved (approve_backfill failed or did not run)"
    verb = "approved" if decision.get("option") == APPROVE else "rejected"
    return f"plan {verb} by {decision.get('user')}{_at(decision.get('at'))}"


def rejected_line(plan: Mapping[str, Any], rejected: Mapping[str, Any]) -> str:
    """`summary`'s first line for a rejected plan: nothing was applied (and the run fails,
    so that it reads as rejected, not as a success)."""
    return (f"REJECTED: plan {rejected.get('run_id')} of {plan.get('pipeline')} over [{plan.get('start')}, "
            f"{plan.get('end')}) rejected by {rejected.get('rejected_by')}{_at(rejected.get('at'))}; no table of the "
            "pipeline was changed")


def _at(when: Any) -> str:
    return "" if when in (None, "", "None") else f" at {when}"
