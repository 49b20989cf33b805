"""`summary`'s first line (issue 51, fault 7): the run's status and every gate's outcome,
verdicts first, also when a task failed (it returned nothing). Pure: no Airflow, no Spark."""

from __future__ import annotations

from dataflow_core.airflow.tasks import as_list, headline, summarize

PLAN = {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-03", "replay": False,
        "days": ["2024-05-01", "2024-05-02"]}
DAYS = [{"day": "2024-05-01", "run_id": "backfill-a", "ledger_ok": True, "ledger": {"read": 3}},
        {"day": "2024-05-02", "run_id": "backfill-b", "ledger_ok": True, "ledger": {"read": 4}}]
INPUT = {"rows": 7, "quarantined": 1}
OUTPUT = {"rows": 5, "checked": ["panes:billing_panes", "results:billing"]}


def test_every_gate_passed():
    ok, line = headline(PLAN, DAYS, INPUT, OUTPUT)
    assert ok and line.startswith("SUCCEEDED: input gate passed, 2 of 2 day(s) done, output gate passed | ")
    assert "input: 7 rows, 1 quarantined" in line and "panes:billing_panes, results:billing" in line


def test_a_failed_input_gate_is_named_first():
    ok, line = headline(PLAN, [], None, None)
    assert not ok and line.startswith("FAILED: input gate FAILED or did not run, 0 of 2 day(s) done, "
                                      "output gate did not run | ")


def test_a_failed_output_gate_and_a_missing_day():
    assert headline(PLAN, DAYS, INPUT, None)[1].startswith("FAILED: input gate passed, 2 of 2 day(s) done, output gate FAILED")
    assert headline(PLAN, DAYS[:1], INPUT, None)[1].startswith("FAILED: input gate passed, 1 of 2 day(s) done, "
                                                               "output gate did not run")
    unbalanced = [dict(DAYS[0], ledger_ok=False), DAYS[1]]
    ok, line = headline(PLAN, unbalanced, INPUT, OUTPUT)
    assert not ok and "(a ledger DOES NOT balance)" in line


def test_summary_logs_the_headline_first_and_returns_the_status():
    said: list[str] = []
    result = summarize(PLAN, as_list(DAYS), OUTPUT, say=said.append, input_gate=INPUT)
    assert said[0].startswith("SUCCEEDED: ") and result["succeeded"] and result["read"] == 7
    assert as_list(None) == [] and as_list(DAYS[0]) == [DAYS[0]] and as_list([None, DAYS[1]]) == [DAYS[1]]


def test_completeness_says_when_live_results_are_complete():
    from dataflow_core.airflow.live_tasks import completeness
    from dataflow_core.model.time import parse_instant

    timer = parse_instant("2026-11-28T17:00:00Z")
    assert completeness(None, timer).startswith("no processing-time timer is pending")
    assert completeness(timer, timer - 1) == ("a processing-time timer is due at 2026-11-28T17:00:00.000Z: the results "
                                              "of its windows are incomplete until a batch runs after it")
    assert "the next batch fires it" in completeness(timer, timer + 1)
