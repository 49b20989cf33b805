"""What an asset event says of a run's corrections (`airflow.corrections`: change-feed rows
in, the event's `extra` out), and what a task reports as lineage (`airflow.lineage`), without
Airflow's scheduler, Spark or Delta."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from dataflow_core.airflow.corrections import (
    BACKFILL, INPUT_CORRECTION, LATE_DATA, MAX_SPANS, change_summary, changed_spans, run_commits, window_changes,
)
from dataflow_core.airflow.lineage import lineage_uris, report_lineage, table_location
from dataflow_core.pipelines import get

UTC = dt.timezone.utc


def hour(h: int) -> dt.datetime:
    return dt.datetime(2024, 5, 1, tzinfo=UTC) + dt.timedelta(hours=h)


def row(version: int, kind: str, ad: str, h: int, value, run_id: str, timing: str = "ON_TIME") -> dict:
    return {"_commit_version": version, "_change_type": kind, "ad_id": ad, "window_start": hour(h),
            "window_end": hour(h + 1), "value": value, "run_id": run_id, "timing": timing}


FEED = [
    # version 3: run r1 corrects ad a's hour 0 (10 -> 12.5) and adds ad b's hour 1
    row(3, "update_preimage", "a", 0, Decimal("10"), "r0"), row(3, "update_postimage", "a", 0, Decimal("12.5"), "r1"),
    row(3, "insert", "b", 1, Decimal("4"), "r1"),
    # version 4: another run's commit, left out
    row(4, "insert", "c", 2, Decimal("1"), "other"),
    # version 5: r1 rewrites ad a's hour 2 with the value it had (no change), deletes ad d's hour 3
    row(5, "update_preimage", "a", 2, Decimal("7"), "r0"), row(5, "update_postimage", "a", 2, Decimal("7"), "r1"),
    row(5, "delete", "d", 3, Decimal("-30"), "r0"), row(5, "insert", "e", 3, Decimal("2"), "r1"),
]


def test_a_runs_changed_windows_come_from_its_own_commits_with_old_and_new_values():
    changes = window_changes(run_commits(FEED, ["r1"]), ("ad_id",))
    assert [(c.key, c.old, c.new) for c in changes] == [
        (("a",), Decimal("10"), Decimal("12.5")), (("b",), None, Decimal("4")),
        (("d",), Decimal("-30"), None), (("e",), None, Decimal("2"))]
    assert changes[0].window_start == int(hour(0).timestamp() * 1000)


def test_the_summary_names_the_windows_the_range_the_largest_changes_and_why():
    changes = window_changes(run_commits(FEED, ["r1"]), ("ad_id",))
    extra = change_summary(changes, pipeline="billing", table="billing", key_columns=("ad_id",), run_id="r1", top=2)
    assert json.loads(json.dumps(extra)) == extra  # an event's extra is JSON
    assert extra["reason"] == INPUT_CORRECTION and extra["run_id"] == "r1" and extra["table"] == "billing"
    assert (extra["count"], extra["corrected"], extra["new"], extra["deleted"]) == (4, 2, 2, 1)
    assert extra["range"] == {"start": "2024-05-01T00:00:00.000Z", "end": "2024-05-01T04:00:00.000Z"}
    assert extra["spans"] == [["2024-05-01T00:00:00.000Z", "2024-05-01T01:00:00.000Z"],
                              ["2024-05-01T01:00:00.000Z", "2024-05-01T02:00:00.000Z"],
                              ["2024-05-01T03:00:00.000Z", "2024-05-01T04:00:00.000Z"]] and extra["spans_complete"]
    # by |new - old|: ad d's deleted -30 (+30), then ad b's new 4
    assert [(c["key"], c["old"], c["new"], c["change"]) for c in extra["largest"]] == [
        ({"ad_id": "d"}, "-30", None, "30"), ({"ad_id": "b"}, None, "4", "4")]


def test_a_first_backfill_is_a_backfill_and_a_run_that_changed_nothing_has_no_event():
    first = [row(0, "insert", "a", h, Decimal(h), "r1") for h in range(3)]
    extra = change_summary(window_changes(first, ("ad_id",)), pipeline="p", table="t", key_columns=("ad_id",),
                           run_id="r1")
    assert extra["reason"] == BACKFILL and extra["count"] == 3 and extra["corrected"] == 0
    same = [row(1, "update_preimage", "a", 0, 5, "r0"), row(1, "update_postimage", "a", 0, 5, "r2")]
    assert window_changes(run_commits(same, ["r2"]), ("ad_id",)) == []
    assert change_summary([], pipeline="p", table="t", key_columns=("ad_id",), run_id="r2") is None
    assert run_commits(FEED, ["nobody"]) == []


def test_a_micro_batch_reports_the_windows_its_late_panes_changed():
    feed = [row(7, "insert", "a", 5, 3, "batch-2", "ON_TIME"),  # news, not a correction
            row(7, "update_preimage", "a", 1, 3, "batch-1", "ON_TIME"),
            row(7, "update_postimage", "a", 1, 4, "batch-2", "LATE")]
    changes = window_changes(run_commits(feed, ["batch-2"]), ("ad_id",), late_only=True)
    assert [(c.window_start, c.old, c.new) for c in changes] == [(int(hour(1).timestamp() * 1000), 3, 4)]
    extra = change_summary(changes, pipeline="p", table="t", key_columns=("ad_id",), run_id="m", late_data=True)
    assert extra["reason"] == LATE_DATA and extra["largest"][0]["change"] == 1


def test_a_consumer_redoes_each_changed_span_once_and_a_cut_event_by_its_range():
    spans = [["2024-05-01T00:00:00.000Z", "2024-05-01T01:00:00.000Z"]]
    cut = {"spans": [], "spans_complete": False, "range": {"start": "2024-06-01T00:00:00.000Z",
                                                          "end": "2024-06-09T00:00:00.000Z"}}
    assert changed_spans([{"spans": spans}, {"spans": spans}, cut]) == [
        ("2024-05-01T00:00:00.000Z", "2024-05-01T01:00:00.000Z"),
        ("2024-06-01T00:00:00.000Z", "2024-06-09T00:00:00.000Z")]
    many = [row(0, "insert", "a", h, 1, "r") for h in range(MAX_SPANS + 1)]
    extra = change_summary(window_changes(many, ("ad_id",)), pipeline="p", table="t", key_columns=("ad_id",),
                           run_id="r")
    assert len(extra["spans"]) == MAX_SPANS and not extra["spans_complete"] and extra["count"] == MAX_SPANS + 1


def test_lineage_names_the_input_and_every_stages_tables_where_they_are_stored():
    inputs, outputs = lineage_uris(get("ad_sessions"), "/data/wh")
    assert inputs == ["file:///data/wh/video_events"]
    assert outputs == ["file:///data/wh/ad_sessions", "file:///data/wh/ad_sessions_panes",
                       "file:///data/wh/ad_short_sessions", "file:///data/wh/ad_short_sessions_panes"]
    assert table_location("billing", "s3a://bucket/wh/") == "s3://bucket/wh/billing"


def test_without_the_openlineage_provider_reporting_lineage_does_nothing_and_fails_nothing():
    from importlib.util import find_spec

    from airflow.sdk.lineage import get_hook_lineage_collector

    assert find_spec("airflow.providers.openlineage") is None, "the provider is not part of the lock"
    assert report_lineage("billing", "/data/wh") is False
    assert not get_hook_lineage_collector().collected_assets.inputs


def _results(rows: list[tuple]):
    import pyarrow as pa

    stamp = pa.timestamp("us", tz="UTC")
    return pa.table({
        "ad_id": [r[0] for r in rows], "window_start": pa.array([hour(r[1]) for r in rows], stamp),
        "window_end": pa.array([hour(r[1] + 1) for r in rows], stamp),
        "value": pa.array([Decimal(r[2]) for r in rows], pa.decimal128(28, 3)),
        "timing": ["ON_TIME"] * len(rows), "run_id": [r[3] for r in rows]})


def _merge(path, rows: list[tuple]) -> None:
    from deltalake import DeltaTable

    (DeltaTable(str(path)).merge(_results(rows), "s.ad_id = t.ad_id AND s.window_start = t.window_start",
                                 source_alias="s", target_alias="t").when_matched_update_all().execute())


def test_a_run_that_changed_two_windows_has_one_event_naming_them_and_a_run_that_changed_none_has_none(tmp_path):
    """On a results table with Delta's change feed (written by delta-rs, as billing's): what
    `run_corrections` reads after a run, from the version `results_versions` took before it."""
    from deltalake import write_deltalake

    from dataflow_core.airflow.assets import results_versions, run_corrections

    table = tmp_path / "billing"
    write_deltalake(str(table), _results([("a", 0, "1", "r0"), ("b", 0, "2", "r0"), ("a", 1, "3", "r0")]),
                    configuration={"delta.enableChangeDataFeed": "true"})
    before = results_versions("billing", str(tmp_path))
    assert before == {"billing": 0}
    _merge(table, [("a", 0, "5", "r1"), ("b", 0, "4", "r1"), ("a", 1, "3", "r1")])  # a1 rewritten as it was
    [event] = run_corrections("billing", ["r1"], before, warehouse=str(tmp_path))
    assert (event["table"], event["run_id"], event["reason"], event["count"]) == ("billing", "r1", INPUT_CORRECTION, 2)
    assert event["spans"] == [["2024-05-01T00:00:00.000Z", "2024-05-01T01:00:00.000Z"]]
    assert [(c["key"]["ad_id"], c["old"], c["new"]) for c in event["largest"]] == [
        ("a", "1.000", "5.000"), ("b", "2.000", "4.000")]
    again = results_versions("billing", str(tmp_path))
    _merge(table, [("a", 0, "5", "r2"), ("b", 0, "4", "r2")])
    assert run_corrections("billing", ["r2"], again, warehouse=str(tmp_path)) == []
    assert results_versions("billing", str(tmp_path / "none")) == {"billing": -1}
