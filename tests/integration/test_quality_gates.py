"""Quality gates (dataflow_core.quality.gates) through real Spark, Delta and Great Expectations,
on small hand-made pane logs and results tables and on a generated input sample."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import get
from dataflow_core.quality.gates import GateFailed, gate_input, gate_outputs, gate_panes, gate_results, input_rules
from dataflow_core.quality.docs import site_index

pytestmark = pytest.mark.integration

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.timezone.utc)
SESSIONS = get("ad_sessions").stage("ad_sessions")  # retracting count over sessions
BILLING = get("billing").stage("billing")  # accumulating sum over hourly windows

PANE_SCHEMA = (
    "user_id string, ad_id string, window_start timestamp, window_end timestamp, value bigint, "
    "timestamp timestamp, timing string, pane_index int, on_time_index int, is_first boolean, "
    "is_last boolean, is_retraction boolean, emitted_at timestamp, run_id string, pane_id string"
)
RESULT_SCHEMA = (
    "user_id string, ad_id string, window_start timestamp, window_end timestamp, value bigint, "
    "timestamp timestamp, timing string, pane_index int, on_time_index int, updated_at timestamp, "
    "pane_id string, run_id string"
)


def minutes(n: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=n)


def pane(user, ad, start, end, value, timing, index, on_time, retraction=False, emitted=0.0, run="r1"):
    return (user, ad, minutes(start), minutes(end), value, minutes(end) - dt.timedelta(milliseconds=1),
            timing, index, on_time, index == 0, False, retraction, minutes(emitted), run,
            f"{user}-{ad}-{start}-{index}-{retraction}")


def good_session_panes():
    """u1/a1: a session [0, 35) early 1, on time 2; then a late view merges it into [0, 50):
    the old session is retracted and the merged one emitted (retracting mode)."""
    return [
        pane("u1", "a1", 0, 35, 1, "EARLY", 0, None, emitted=2),
        pane("u1", "a1", 0, 35, 2, "ON_TIME", 1, 0, emitted=36),
        pane("u1", "a1", 0, 35, 2, "ON_TIME", 1, 0, retraction=True, emitted=60, run="r2"),
        pane("u1", "a1", 0, 50, 3, "LATE", 0, 0, emitted=60, run="r2"),
        pane("u2", "a1", 5, 40, 4, "ON_TIME", 0, 0, emitted=41),
    ]


def result(user, ad, start, end, value, run="r1"):
    return (user, ad, minutes(start), minutes(end), value, minutes(end), "ON_TIME", 0, 0,
            minutes(70), "p", run)


GOOD_RESULTS = [result("u1", "a1", 0, 50, 3, "r2"), result("u2", "a1", 5, 40, 4)]


@pytest.fixture
def wh(spark, tmp_path):
    """A fresh warehouse for this test (the shared session is pointed back afterwards)."""
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    spark.conf.set(WAREHOUSE_CONF, str(tmp_path / "wh"))
    return tmp_path


def write(spark, rows, schema, name):
    from dataflow_core.spark.platform.tables import write_table

    write_table(spark, spark.createDataFrame(rows, schema), name, mode="overwrite")


def test_consistent_pane_log_and_results_pass_and_build_data_docs(spark, wh):
    write(spark, good_session_panes(), PANE_SCHEMA, "ad_sessions_panes")
    write(spark, GOOD_RESULTS, RESULT_SCHEMA, "ad_sessions")
    docs = wh / "docs"

    panes = gate_panes(spark, SESSIONS, ["r2"], "gate-1", "ad_sessions", docs_dir=docs)
    results = gate_results(spark, SESSIONS, ["r2"], "gate-1", "ad_sessions", docs_dir=docs)

    assert panes.success, panes.lines()
    assert results.success, results.lines()
    assert panes.rows == 4  # the windows r2 touched: u1's two sessions, all their panes
    assert results.rows == 1  # [0, 35) nets to nothing (retracted) and has no row: only [0, 50)
    assert panes.quarantined == results.quarantined == 0
    index = Path(panes.report.docs_index)
    assert index == site_index(docs) and index.is_file()
    html = index.read_text()
    assert "ad_sessions_panes" in html and "ad_sessions_results" in html
    assert any(line.startswith("  Data Docs: ") for line in panes.lines())


def test_a_gate_over_every_stage_updates_data_docs_once_with_a_page_for_each_validation(spark, wh):
    """`gate_outputs` stores each validation's result and builds the site after the last:
    every outcome links the index, which lists them all, and each has its own page."""
    write(spark, good_session_panes(), PANE_SCHEMA, "ad_sessions_panes")
    write(spark, GOOD_RESULTS, RESULT_SCHEMA, "ad_sessions")
    docs, said = wh / "docs", []

    outcomes = gate_outputs(spark, "ad_sessions", ["r2"], "gate-all", docs_dir=docs, say=said.append)

    assert [o.gate for o in outcomes] == ["panes", "results"] and all(o.success for o in outcomes)
    assert {o.report.docs_index for o in outcomes} == {str(site_index(docs))}
    assert said.count(f"Data Docs: {site_index(docs)}") == 1
    pages = [p.relative_to(site_index(docs).parent / "validations") for p in
             (site_index(docs).parent / "validations").rglob("*.html")]
    assert sorted(p.parts[0] for p in pages) == ["ad_sessions_panes", "ad_sessions_results"], pages
    html = site_index(docs).read_text()
    assert "gate-all:panes:ad_sessions" in html and "gate-all:results:ad_sessions" in html


def test_pane_gate_fails_on_a_retraction_of_a_pane_that_never_stood(spark, wh):
    from dataflow_core.spark.platform.tables import read_table

    rows = good_session_panes()
    # u2's window gets a retraction of value 9 at index 0: no pane 0 of value 9 ever stood.
    rows.append(pane("u2", "a1", 5, 40, 9, "ON_TIME", 0, 0, retraction=True, emitted=61, run="r2"))
    write(spark, rows, PANE_SCHEMA, "ad_sessions_panes")

    outcome = gate_panes(spark, SESSIONS, ["r2"], "gate-2", "ad_sessions", docs_dir=wh / "docs")

    assert not outcome.success
    assert outcome.report.failed_rules == ("retraction_of_standing_pane",)
    with pytest.raises(GateFailed) as caught:
        outcome.raise_if_failed()
    message = str(caught.value)
    assert "panes gate on ad_sessions_panes FAILED" in message
    assert "retraction_of_standing_pane (1 of 6 rows)" in message
    assert "1 rows quarantined in ad_sessions_panes_quarantine" in message
    (bad,) = read_table(spark, "ad_sessions_panes_quarantine").collect()
    assert (bad["user_id"], bad["value"], bad["is_retraction"]) == ("u2", 9, True)
    assert bad["quarantine_reason"] == "retraction_of_standing_pane"
    assert bad["gate_run_id"] == "gate-2"


def test_pane_gate_catches_gaps_double_on_time_double_retraction_and_bad_flags(spark, wh):
    rows = [
        pane("u1", "a1", 0, 35, 1, "EARLY", 0, None, emitted=1),
        pane("u1", "a1", 0, 35, 2, "ON_TIME", 2, 0, emitted=36),  # index 1 skipped
        pane("u3", "a2", 0, 30, 1, "ON_TIME", 0, 0, emitted=31),
        pane("u3", "a2", 0, 30, 2, "ON_TIME", 1, 1, emitted=40),  # second ON_TIME
        pane("u3", "a2", 0, 30, 2, "ON_TIME", 1, 1, retraction=True, emitted=50),
        pane("u3", "a2", 0, 30, 2, "ON_TIME", 1, 1, retraction=True, emitted=55),  # retracted twice
        pane("u4", "a2", 0, 30, -1, "EARLY", 0, 0, emitted=5),  # EARLY with on_time_index; count < 0
    ]
    write(spark, rows, PANE_SCHEMA, "ad_sessions_panes")
    outcome = gate_panes(spark, SESSIONS, None, "gate-3", "ad_sessions", docs_dir=wh / "docs")
    failed = {o.rule: o.unexpected_count for o in outcome.report.failed}
    assert failed == {
        "pane_index_consecutive": 1,
        "retraction_of_standing_pane": 1,
        "at_most_one_on_time_pane": 1,  # the second ON_TIME pane breaks the history, not the first
        "on_time_index_matches_timing": 1,
        "value_possible": 1,
    }
    assert outcome.quarantined == 4


def test_results_gate_fails_when_the_table_differs_from_what_the_panes_net_to(spark, wh):
    from dataflow_core.spark.platform.tables import read_table

    write(spark, good_session_panes(), PANE_SCHEMA, "ad_sessions_panes")
    stale = [
        result("u1", "a1", 0, 35, 2),  # the retracted session is still there
        result("u1", "a1", 0, 50, 7, "r2"),  # wrong value
        # u2's window [5, 40) is missing
    ]
    write(spark, stale, RESULT_SCHEMA, "ad_sessions")
    outcome = gate_results(spark, SESSIONS, None, "gate-4", "ad_sessions", docs_dir=wh / "docs")
    assert {o.rule: o.unexpected_count for o in outcome.report.failed} == {
        "result_backed_by_panes": 1, "result_present": 1, "result_value_matches_panes": 1,
    }
    reasons = {(r["user_id"], r["window_end"]): r["quarantine_reason"]
               for r in read_table(spark, "ad_sessions_results_quarantine").collect()}
    naive = lambda n: minutes(n).replace(tzinfo=None)  # noqa: E731 (Spark returns UTC, naive)
    assert reasons == {
        ("u1", naive(35)): "result_backed_by_panes",
        ("u1", naive(50)): "result_value_matches_panes",
        ("u2", naive(40)): "result_present",
    }


def test_results_gate_of_an_accumulating_sum(spark, wh):
    schema = PANE_SCHEMA.replace("user_id string, ", "").replace("value bigint", "value decimal(28,3)")
    rows = [
        ("a1", minutes(0), minutes(60), Decimal("1.5"), minutes(59), "EARLY", 0, None, True, False, False, minutes(10), "r1", "p0"),
        ("a1", minutes(0), minutes(60), Decimal("4.0"), minutes(59), "ON_TIME", 1, 0, False, False, False, minutes(62), "r1", "p1"),
        ("a1", minutes(0), minutes(60), Decimal("5.25"), minutes(59), "LATE", 2, 1, False, False, False, minutes(80), "r1", "p2"),
    ]
    write(spark, rows, schema, "billing_panes")
    res_schema = RESULT_SCHEMA.replace("user_id string, ", "").replace("value bigint", "value decimal(28,3)")
    write(spark, [("a1", minutes(0), minutes(60), Decimal("5.25"), minutes(59), "LATE", 2, 1, minutes(80), "p2", "r1")],
          res_schema, "billing")
    assert gate_panes(spark, BILLING, ["r1"], "g", "billing", docs_dir=wh / "docs").success
    assert gate_results(spark, BILLING, ["r1"], "g", "billing", docs_dir=wh / "docs").success


def sample(spark, **overrides):
    from dataflow_core.sample import SampleConfig
    from dataflow_core.sample.write import write_sample

    config = SampleConfig(**{"rows": 1500, "seed": 5, "span_hours": 24, **overrides})
    write_sample(spark, config, table="video_events", progress=lambda _m: None)


def test_input_gate_passes_a_normal_sample_and_quarantines_its_bad_rows(spark, wh):
    from dataflow_core.spark.platform.tables import read_table

    sample(spark, rows=3000, malformed_share=0.015)
    outcome = gate_input(spark, "billing", "2024-05-01", "2024-05-02", "gate-5", docs_dir=wh / "docs")
    assert outcome.success, outcome.lines()
    assert outcome.rows > 100
    assert outcome.report.failed_rules == ()
    assert 0 < outcome.quarantined < 0.02 * outcome.rows  # bad rows go, the gate still passes
    quarantine = read_table(spark, "billing__quarantine")
    assert quarantine.count() == outcome.quarantined
    assert set(quarantine.columns) >= {"quarantine_reason", "pipeline", "run_id", "quarantined_at", "row_id"}
    # The same gate again finds the rows already quarantined (same row ids): nothing added.
    again = gate_input(spark, "billing", "2024-05-01", "2024-05-02", "gate-6", docs_dir=wh / "docs")
    assert read_table(spark, "billing__quarantine").count() == outcome.quarantined == again.quarantined


def test_input_gate_fails_a_bad_input_with_the_summary(spark, wh):
    from dataflow_core.spark.platform.tables import read_table

    sample(spark, malformed_share=0.2)
    outcome = gate_input(spark, "billing", "2024-05-01", "2024-05-02", "gate-7", docs_dir=wh / "docs")
    assert not outcome.success
    failed = set(outcome.report.failed_rules)
    assert {"user_id_not_null", "watch_seconds_non_negative"} <= failed
    assert "event_time_is_timestamp" not in failed
    summary = outcome.summary()
    assert "input gate on video_events FAILED" in summary and "rows quarantined in billing__quarantine" in summary
    assert outcome.quarantined > 0.1 * outcome.rows
    reasons = {r["quarantine_reason"] for r in read_table(spark, "billing__quarantine").collect()}
    assert "watch_seconds_non_negative" in reasons


def test_input_rules_carry_the_pipeline_settings():
    rules = input_rules(get("billing"), max_bad_share=0.1, max_duplicate_share=0.2)
    assert rules.name == "billing_input"
    # the row rules are the model's (one name for the gate and the quarantine), on the gate's columns
    assert rules.rule("event_time_beyond_skew").kwargs["column"] == "dataflow_passes_event_time_beyond_skew"
    assert rules.rule("key_ad_id_not_null").mostly == 0.9
    assert rules.rule("value_invalid").row_level
    assert rules.rule("duplicate_share_under_threshold").kwargs["min_value"] == 0.8
    assert rules.rule("watch_seconds_non_negative").mostly == 0.9  # the table's own suite, tolerant
    assert not rules.rule("duplicate_share_under_threshold").row_level


def test_input_gate_on_a_missing_table_is_one_line(spark, wh):
    with pytest.raises(DataflowError, match="table 'video_events' not found"):
        gate_input(spark, "billing", "2024-05-01", "2024-05-02", "g", docs_dir=wh / "docs")
