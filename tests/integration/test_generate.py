"""The sample generator: deterministic, disordered as configured, written partitioned."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
from functools import reduce
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from dataflow_core.errors import DataflowError
from dataflow_core.spark.input.expectations import load_rules
from dataflow_core.sample import COLUMNS, DEFECTS, DEVICES, MOBILE_DEVICES, SampleConfig
from dataflow_core.sample.video_events import (
    KIND_COLUMN,
    count_by_defect,
    count_by_kind,
    generate_events,
    parse_event_time,
    utc_date,
)
from dataflow_core.sample.write import write_sample
from dataflow_core.spark.platform.tables import read_table, table_path

pytestmark = pytest.mark.integration

# Larger shares than the defaults so a small sample holds enough of each kind.
SHARES = dict(late_minutes_share=0.10, late_hours_share=0.05, duplicate_share=0.05,
              malformed_share=0.03)


def _rows(df):
    return sorted(tuple(row) for row in df.select(*COLUMNS).collect())


def test_same_seed_gives_identical_rows_whatever_the_partitioning(spark):
    config = SampleConfig(rows=3000, seed=5, **SHARES)
    one = _rows(generate_events(spark, config, partitions=1))
    many = _rows(generate_events(spark, config, partitions=7))
    assert len(one) == 3000
    assert one == many


def test_different_seed_gives_different_rows(spark):
    a = generate_events(spark, SampleConfig(rows=2000, seed=1))
    b = generate_events(spark, SampleConfig(rows=2000, seed=2))
    assert a.select("event_id").intersect(b.select("event_id")).count() == 0
    pairs = a.select("event_id", "user_id").collect(), b.select("event_id", "user_id").collect()
    same_user = sum(x["user_id"] == y["user_id"] for x, y in zip(*pairs))
    assert same_user < 200  # ids differ; users collide only by chance


def test_kind_shares_are_roughly_as_configured(spark):
    rows = 40_000
    counts = count_by_kind(spark, SampleConfig(rows=rows, seed=9, **SHARES))
    assert sum(counts.values()) == rows
    expected = {
        "malformed": SHARES["malformed_share"],
        "late_hours": SHARES["late_hours_share"],
        "late_minutes": SHARES["late_minutes_share"],
        "duplicate": SHARES["duplicate_share"],
    }
    for kind, share in expected.items():
        # Within 20 % of the share (the hash draws wander less than 5 % at this size).
        assert abs(counts[kind] / rows - share) < 0.2 * share, (kind, counts[kind])
    none = count_by_kind(spark, SampleConfig(rows=5000, seed=9, late_minutes_share=0,
                                             late_hours_share=0, duplicate_share=0,
                                             malformed_share=0))
    assert none["on_time"] == 5000


def test_disorder_follows_the_model(spark):
    """Delays by kind, late-by-hours only on mobile, duplicates copy an earlier delivery."""
    df = generate_events(spark, SampleConfig(rows=20_000, seed=4, **SHARES), labels=True).cache()
    delay = (F.unix_millis("ingest_time") - F.unix_millis("event_time")) / 1000.0
    stats = {
        row[KIND_COLUMN]: row
        for row in df.where(F.col("sample_defect").isNull())
        .groupBy(KIND_COLUMN)
        .agg(F.min(delay).alias("lo"), F.max(delay).alias("hi"),
             F.sum(F.col("device").isin(*MOBILE_DEVICES).cast("int")).alias("mobile"),
             F.count(F.lit(1)).alias("n"))
        .collect()
    }
    assert 0 <= stats["on_time"]["lo"] and stats["on_time"]["hi"] <= 10.05
    assert 60 <= stats["late_minutes"]["lo"] and stats["late_minutes"]["hi"] <= 30 * 60
    assert 3600 <= stats["late_hours"]["lo"] and stats["late_hours"]["hi"] <= 12 * 3600
    assert stats["late_hours"]["mobile"] == stats["late_hours"]["n"] > 0
    assert stats["on_time"]["mobile"] < stats["on_time"]["n"]  # everyone else mixes devices

    # Each duplicate repeats exactly one earlier delivery: same fields, later ingest_time.
    payload = [c for c in COLUMNS if c != "ingest_time"]
    dups = df.where(F.col(KIND_COLUMN) == "duplicate").alias("d")
    originals = df.where(F.col(KIND_COLUMN) != "duplicate").alias("o")
    joined = dups.join(originals, "event_id")
    n_dups = dups.count()
    assert n_dups > 0
    assert joined.count() == n_dups
    differs = [~F.col(f"d.{c}").eqNullSafe(F.col(f"o.{c}")) for c in payload if c != "event_id"]
    assert joined.where(reduce(operator.or_, differs)).count() == 0
    assert joined.where(F.col("d.ingest_time") <= F.col("o.ingest_time")).count() == 0
    per_id = df.groupBy("event_id").count()
    assert per_id.where("count > 2").count() == 0
    assert per_id.where("count = 2").count() == n_dups
    df.unpersist()


def test_malformed_rows_carry_each_defect(spark):
    config = SampleConfig(rows=20_000, seed=8, **SHARES)
    by_defect = count_by_defect(spark, config)
    assert set(by_defect) == set(DEFECTS)
    assert all(n > 0 for n in by_defect.values()), by_defect
    df = generate_events(spark, config, labels=True)
    defect = F.col("sample_defect")
    seen = {
        "null_user_id": df.where(F.col("user_id").isNull()),
        "null_video_id": df.where(F.col("video_id").isNull()),
        "unparseable_event_time": df.where(F.col("event_time").isNull()),
        "future_event_time": df.where(F.col("event_time") > F.col("ingest_time")),
        "negative_watch_seconds": df.where(F.col("watch_seconds") < 0),
        "unknown_device": df.where(~F.col("device").isin(*DEVICES)),
    }
    for name, rows in seen.items():
        # The symptom appears exactly on the rows labelled with that defect.
        assert rows.count() == by_defect[name], name
        assert rows.where(defect.isNull() | (defect != name)).count() == 0, name
    # Unparseable rows keep the text the client sent; the date falls back to ingest day.
    bad_time = seen["unparseable_event_time"]
    assert bad_time.where(F.col("event_time_raw").isNull()).count() == 0
    assert bad_time.where(F.col("event_date") != utc_date(F.col("ingest_time"))).count() == 0


def test_event_time_is_the_parse_of_the_raw_text(spark):
    """The generator computes event_time from the same milliseconds it formats as text;
    parsing the text must give exactly that (null where the text is garbage)."""
    df = generate_events(spark, SampleConfig(rows=5000, seed=6, malformed_share=0.1))
    parsed = parse_event_time(F.col("event_time_raw"))
    assert df.where(~parsed.eqNullSafe(F.col("event_time"))).count() == 0
    assert df.where(F.col("event_time").isNull()).count() > 0
    assert df.where(utc_date(F.col("event_time")) != F.col("event_date")).count() == 0


def test_generator_devices_are_the_suites_devices():
    device_rule = load_rules().rule("device_known")
    assert set(device_rule.kwargs["value_set"]) == set(DEVICES)


def test_written_table_is_partitioned_by_event_date_in_the_delta_log(spark):
    config = SampleConfig(rows=2000, seed=12, malformed_share=0.05)
    summary = write_sample(spark, config, table="gen_partitioned", progress=lambda _: None)
    assert summary.rows == 2000 and sum(summary.by_kind.values()) == 2000

    log = Path(table_path(spark, "gen_partitioned")) / "_delta_log" / f"{0:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    metadata = next(a["metaData"] for a in actions if "metaData" in a)
    assert metadata["partitionColumns"] == ["event_date"]
    logged_dates = {a["add"]["partitionValues"]["event_date"] for a in actions if "add" in a}
    table = read_table(spark, "gen_partitioned")
    data_dates = {str(r["event_date"]) for r in table.select("event_date").distinct().collect()}
    assert logged_dates == data_dates
    assert {"2024-05-01", "2024-05-02"} <= data_dates  # 48 h from midnight: two days
    assert _rows(table) == _rows(generate_events(spark, config))

    again = write_sample(spark, config, table="gen_partitioned", mode="append",
                         progress=lambda _: None)
    assert again.rows == 2000
    assert read_table(spark, "gen_partitioned").count() == 4000


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"rows": -5}, "rows (--rows)"),
        ({"rows": 0}, "rows (--rows)"),
        ({"start": "next tuesday"}, "start (--start)"),
        ({"late_minutes_share": 1.5}, "late_minutes_share (--late-minutes-share)"),
        ({"late_hours_share": -0.1}, "late_hours_share (--late-hours-share)"),
        ({"duplicate_share": 0.3}, "duplicate_share (--duplicate-share)"),
        ({"malformed_share": 0.9}, "malformed_share (--malformed-share)"),
        ({"late_minutes_share": 0.6, "late_hours_share": 0.5}, "late_minutes_share"),
        ({"span_hours": 0}, "span_hours (--span-hours)"),
    ],
)
def test_bad_parameter_is_refused_by_name(overrides, named):
    params = {"rows": 100, **overrides}
    with pytest.raises(DataflowError) as caught:
        SampleConfig(**params)
    assert named in str(caught.value)


def test_bad_mode_and_table_name_are_refused(spark):
    config = SampleConfig(rows=10)
    with pytest.raises(DataflowError, match="mode"):
        write_sample(spark, config, table="x", mode="upsert", progress=lambda _: None)
    with pytest.raises(DataflowError, match="table name"):
        write_sample(spark, config, table="no-dashes", progress=lambda _: None)


def _dataflow_cli() -> list[str]:
    script = Path(sys.executable).with_name("dataflow")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dataflow_core"]


def test_generate_console_script_end_to_end(tmp_path):
    warehouse = tmp_path / "wh"
    done = subprocess.run(
        [*_dataflow_cli(), "generate", "--rows", "400", "--seed", "3", "--table", "tiny",
         "--master", "local[1]", "--warehouse", str(warehouse), "--malformed-share", "0.05"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "[generate] generating 400 rows" in out
    assert "wrote 400 rows to table tiny" in out
    for kind in ("on_time", "late_minutes", "late_hours", "duplicate", "malformed"):
        assert kind in out
    assert (warehouse / "tiny" / "_delta_log").is_dir()
    assert any(p.name.startswith("event_date=") for p in (warehouse / "tiny").iterdir())


def test_generate_console_script_names_a_bad_parameter(tmp_path):
    done = subprocess.run(
        [*_dataflow_cli(), "generate", "--rows", "-3", "--warehouse", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "--rows" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
