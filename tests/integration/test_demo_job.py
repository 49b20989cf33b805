"""The demo job end to end on a temporary warehouse, run twice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from dataflow_core.errors import DataflowError
from dataflow_core.sample import SampleConfig, generate_events
from dataflow_core.spark.platform.tables import read_table
from dataflow_core.examples.jobs import demo_job

pytestmark = pytest.mark.integration

ROWS, SEED = 3000, 11


@pytest.fixture()
def demo_warehouse(spark, tmp_path):
    """A fresh warehouse for the job (conftest points the shared session back afterwards)."""
    return tmp_path / "wh"


def _ledger_numbers(out: str) -> tuple[int, int, int, int]:
    match = re.search(
        r"in = accepted \+ quarantined \+ dropped as late: ([\d,]+) = ([\d,]+) \+ ([\d,]+) "
        r"\+ ([\d,]+)  OK",
        out,
    )
    assert match, out
    return tuple(int(g.replace(",", "")) for g in match.groups())  # type: ignore[return-value]


def _expected_windows(spark) -> dict[tuple[str, int], tuple[int, float, int]]:
    """Recomputed without the job's code: the generator's labels say which rows are bad
    (malformed) or repeats (duplicate); group the rest by video and epoch hour."""
    truth = generate_events(spark, SampleConfig(rows=ROWS, seed=SEED), labels=True)
    clean = truth.where(~F.col("sample_kind").isin("malformed", "duplicate"))
    hour = F.floor(F.unix_millis("event_time") / 3_600_000)
    rows = (
        clean.groupBy("video_id", hour.alias("hour"))
        .agg(F.count(F.lit(1)).alias("views"), F.sum("watch_seconds").alias("watch"),
             F.countDistinct("user_id").alias("users"))
        .collect()
    )
    return {(r["video_id"], int(r["hour"])): (r["views"], r["watch"], r["users"]) for r in rows}


def _table_windows(spark) -> dict[tuple[str, int], tuple[int, float, int]]:
    out = read_table(spark, demo_job.OUTPUT_TABLE)
    rows = out.select(
        "video_id",
        (F.unix_millis("window_start") / 3_600_000).cast("long").alias("hour"),
        (F.unix_millis("window_end") - F.unix_millis("window_start")).alias("width"),
        "views", "watch_seconds", "distinct_users",
    ).collect()
    assert {r["width"] for r in rows} == {3_600_000}
    return {(r["video_id"], r["hour"]): (r["views"], r["watch_seconds"], r["distinct_users"])
            for r in rows}


def test_demo_job_twice_is_idempotent_and_matches_a_direct_recomputation(
    spark, demo_warehouse, capsys
):
    argv = ["--rows", str(ROWS), "--seed", str(SEED), "--window", "1h",
            "--master", "local[2]", "--warehouse", str(demo_warehouse)]

    assert demo_job.main(argv) == 0
    first = capsys.readouterr().out
    for step in range(1, demo_job.STEPS + 1):
        assert f"[demo {step}/{demo_job.STEPS}]" in first
    assert "suite video_events: FAILED" in first  # the sample has malformed rows
    assert "FAIL  user_id_not_null" in first
    rows_in, accepted, quarantined, dropped = _ledger_numbers(first)
    assert rows_in == ROWS == accepted + quarantined + dropped

    truth = generate_events(spark, SampleConfig(rows=ROWS, seed=SEED), labels=True)
    assert quarantined == truth.where(F.col("sample_kind") == "malformed").count()
    quarantine = read_table(spark, demo_job.QUARANTINE_TABLE)
    assert quarantine.count() == quarantined
    assert quarantine.where(F.col("quarantine_reason").isNull()).count() == 0

    windows_after_first = _table_windows(spark)
    out_path = Path(demo_warehouse) / demo_job.OUTPUT_TABLE
    assert (out_path / "_delta_log").is_dir()  # a plain Delta table under the warehouse

    assert demo_job.main(argv) == 0
    second = capsys.readouterr().out
    assert _ledger_numbers(second) == (rows_in, accepted, quarantined, dropped)
    assert "0 inserted" in second  # the MERGE matched every window

    windows = _table_windows(spark)
    assert windows == windows_after_first
    expected = _expected_windows(spark)
    assert windows.keys() == expected.keys()
    for key, (views, watch, users) in expected.items():
        got_views, got_watch, got_users = windows[key]
        assert (got_views, got_users) == (views, users), key
        assert got_watch == pytest.approx(watch, abs=0.06), key
    n_unique = truth.where(~F.col("sample_kind").isin("malformed", "duplicate")).count()
    assert sum(v[0] for v in windows.values()) == n_unique
    history = spark.sql(f"DESCRIBE HISTORY {demo_job.OUTPUT_TABLE}").collect()
    assert [h["operation"] for h in sorted(history, key=lambda h: h["version"])][-1] == "MERGE"


def test_demo_job_refuses_a_bad_window_by_name(capsys):
    assert demo_job.main(["--window", "soon"]) == 2
    assert "--window" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "interval"), [("1h", "3600000 milliseconds"), ("10m", "600000 milliseconds"),
                                                ("90s", "90000 milliseconds"), ("1d", "86400000 milliseconds")])
def test_window_sizes_use_the_model_duration_syntax(text, interval):
    assert demo_job.parse_window(text) == interval


@pytest.mark.parametrize("text", ["1 hour", "0m", "-1h", "1.5h"])
def test_window_sizes_outside_the_syntax_are_refused(text):
    with pytest.raises(DataflowError, match="^--window: "):
        demo_job.parse_window(text)
