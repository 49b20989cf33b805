"""Approval that means something (issue 64, finding 7): who may approve a backfill plan in
Airflow's `approve_backfill` task, and an approval page no key can rewrite.

The rule is read from the settings the task reads when it starts (`settings.approvers` and
the others); Airflow's own configuration (`[core] auth_manager`, its users) from the
environment, as Airflow reads it. The page is the Markdown the task gives Airflow, rendered
by a CommonMark renderer with tables, as Airflow's UI renders it (GitHub-flavoured Markdown).
"""

from __future__ import annotations

import datetime as dt

import pytest

from dataflow_core.diagram.plan_table import StageDiff, WindowChange
from dataflow_core.errors import DataflowError

HOSTILE = ["ad-$\\frac$", "x | y", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))",
           "**bold** _it_", "line\nbreak", "&lt;b&gt;", "`code`", "<script>alert(1)</script>"]


@pytest.fixture
def settings(monkeypatch):
    for name in ("DATAFLOW_APPROVERS", "DATAFLOW_ALLOW_SELF_APPROVAL", "DATAFLOW_APPROVAL_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__AUTH_MANAGER",
                       "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,ops1:op,ops2:op,viewer:viewer")
    return monkeypatch


def test_the_requester_is_not_an_approver_unless_configured(settings):
    from dataflow_core.airflow.approval import APPROVE, REJECT, approval_rule

    rule = approval_rule("alice")  # nothing configured: whoever Airflow lets respond, but not alice
    assert rule.assigned == []
    refused = rule.refusal(APPROVE, {"id": "alice", "name": "alice"})
    assert refused and refused.startswith("approval by alice refused") and "DATAFLOW_ALLOW_SELF_APPROVAL" in refused
    assert rule.refusal(APPROVE, {"id": "bob", "name": "bob"}) is None
    assert rule.refusal(REJECT, {"id": "alice", "name": "alice"}) is None  # withdrawing one's request
    assert rule.refusal(APPROVE, {}) is not None  # a response naming no user approves nothing
    settings.setenv("DATAFLOW_ALLOW_SELF_APPROVAL", "true")
    assert approval_rule("alice").refusal(APPROVE, {"id": "alice", "name": "alice"}) is None
    settings.setenv("DATAFLOW_ALLOW_SELF_APPROVAL", "maybe")
    with pytest.raises(DataflowError, match="DATAFLOW_ALLOW_SELF_APPROVAL='maybe'"):
        approval_rule("alice")


def test_approvers_by_user_and_by_role_are_assigned_and_no_one_else_approves(settings):
    from dataflow_core.airflow.approval import APPROVE, approval_rule

    settings.setenv("DATAFLOW_APPROVERS", "carol, role:op")
    rule = approval_rule("ops1")  # an approver by role asked: the others approve
    assert rule.assigned == ["carol", "ops2"]
    assert "not ops1 who asked for it" in rule.describe()
    assert rule.refusal(APPROVE, {"id": "ops1", "name": "ops1"}).startswith("approval by ops1 refused")
    assert "not among the approvers (carol, ops2" in rule.refusal(APPROVE, {"id": "viewer", "name": "viewer"})
    assert rule.refusal(APPROVE, {"id": "ops2", "name": "ops2"}) is None
    settings.setenv("DATAFLOW_APPROVERS", "ops1")
    with pytest.raises(DataflowError, match="names no one else"):
        approval_rule("ops1")  # could never be approved: refused before anyone waits
    settings.setenv("AIRFLOW__CORE__AUTH_MANAGER", "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager")
    settings.setenv("DATAFLOW_APPROVERS", "role:op")
    with pytest.raises(DataflowError, match="role:op cannot be resolved"):
        approval_rule("ops1")


def test_a_request_times_out_after_the_configured_time(settings):
    from dataflow_core.airflow import settings as dataflow_settings
    from dataflow_core.airflow.approval import REJECT, PlanApproval

    assert dataflow_settings.approval_timeout() == dt.timedelta(hours=72)
    settings.setenv("DATAFLOW_APPROVAL_TIMEOUT", "90m")
    assert dataflow_settings.approval_timeout() == dt.timedelta(minutes=90)
    settings.setenv("DATAFLOW_APPROVAL_TIMEOUT", "soon")
    with pytest.raises(DataflowError, match="DATAFLOW_APPROVAL_TIMEOUT='soon'"):
        dataflow_settings.approval_timeout()
    task = PlanApproval(task_id="approve", subject="s", body="b", apply_task="a", reject_task="r")
    assert task.defaults == [REJECT]  # what Airflow chooses when the time is up: nothing applied


def test_a_hostile_key_renders_escaped_on_the_approval_page():
    from markdown_it import MarkdownIt

    from dataflow_core.airflow.approval import approval_markdown

    diff = StageDiff("billing_hostile", ("ad_id",), [
        WindowChange((key,), 0, 600_000, i, i + 1, 1, 0) for i, key in enumerate(HOSTILE)])
    markdown = approval_markdown("plan <b>r1</b> of pipeline [p](javascript:x): planned", "r1`; rm -rf /", [diff],
                                 "http://localhost:8080/dataflow-explorer/plan?pipeline=p&run_id=r1")
    page = MarkdownIt("commonmark").enable("table").render(markdown)
    for tag in ("<img", "<script", "<b>", "<strong>bold", "<em>", "<code>", 'href="javascript'):
        assert tag not in page, (tag, page)
    assert page.count("<a ") == 1  # the plan view's link, ours
    first = page.split("<tbody>")[1].split("</tbody>")[0]  # the windows table: one row per key, 7 cells each
    rows = first.split("<tr>")[1:]
    assert len(rows) == len(HOSTILE) and all(r.count("<td>") == 7 for r in rows), first
    import html

    cells = [html.unescape(r.split("<td>")[1].split("</td>")[0]) for r in rows]
    assert cells == [" ".join(k.splitlines()) for k in HOSTILE], cells


def test_summary_says_how_the_plan_was_decided_and_a_rejected_run_fails():
    """`summary` of a run that waited for approval (issue 66): an approved plan's first line
    names the approver; a rejected plan's says REJECTED and the task fails, so that the run
    does not read as a green success; a refused approval is a failed run."""
    from dataflow_core.airflow.approval import APPROVE, DECISION_KEY, REJECT, summarize_run

    plan = {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02", "replay": False,
            "days": ["2024-05-01"], "require_approval": True}
    applied = {"day": "2024-05-01 to 2024-05-02", "run_id": "backfill-p1", "ledger_ok": True, "ledger": {"read": 9}}
    returned = {("gate_input", "return_value"): {"rows": 9, "quarantined": 0},
                ("approve_backfill", DECISION_KEY): {"option": APPROVE, "user": "ops2", "at": "2026-12-02T05:00:00"},
                ("apply_plan", "return_value"): applied,
                ("gate_output", "return_value"): {"rows": 4, "checked": ["panes:billing_panes"]}}

    def pulls(values):
        return lambda task, key="return_value": values.get((task, key))

    said: list[str] = []
    result = summarize_run(plan, pulls(returned), said.append)
    assert said[0].startswith("SUCCEEDED: input gate passed, plan approved by ops2 at 2026-12-02T05:00:00, "
                              "1 of 1 day(s) done, output gate passed | "), said[0]
    assert result["succeeded"] and result["approval"].startswith("plan approved by ops2")

    said.clear()
    rejected = {("gate_input", "return_value"): returned[("gate_input", "return_value")],
                ("approve_backfill", DECISION_KEY): {"option": REJECT, "user": "ops2", "at": "2026-12-02T05:00:00"},
                ("reject_plan", "return_value"): {"run_id": "backfill-p1", "rejected_by": "ops2",
                                                  "at": "2026-12-02T05:00:00"}}
    with pytest.raises(DataflowError) as failed:
        summarize_run(plan, pulls(rejected), said.append)
    assert said == [str(failed.value)] and said[0] == (
        "REJECTED: plan backfill-p1 of billing over [2024-05-01, 2024-05-02) rejected by ops2 at "
        "2026-12-02T05:00:00; no table of the pipeline was changed")

    said.clear()
    refused = {("gate_input", "return_value"): returned[("gate_input", "return_value")]}  # approve_backfill failed
    with pytest.raises(DataflowError, match="the backfill failed"):
        summarize_run(plan, pulls(refused), said.append)
    assert said[0].startswith("FAILED: input gate passed, plan not approved (approve_backfill failed or did not run), "
                              "0 of 1 day(s) done, output gate did not run"), said[0]
