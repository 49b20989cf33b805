"""The input suite through Great Expectations, and the row split built from the same rules."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from dataflow_core.errors import DataflowError
from dataflow_core.quality import REASON_COLUMN, load_rules, split_valid_rows, validate_dataframe
from dataflow_core.spark.input.expectations import rules_from_document
from dataflow_core.sample import COLUMNS, SampleConfig, generate_events
from dataflow_core.spark.platform.tables import read_table, write_table

pytestmark = pytest.mark.integration

# Which rule each generated defect must break (and no other).
RULE_FOR_DEFECT = {
    "null_user_id": "user_id_not_null",
    "null_video_id": "video_id_not_null",
    "unparseable_event_time": "event_time_parseable",
    "future_event_time": "event_time_not_after_ingest",
    "negative_watch_seconds": "watch_seconds_non_negative",
    "unknown_device": "device_known",
}


@pytest.fixture(scope="module")
def labelled(spark):
    """A sample with plenty of malformed rows and their ground-truth labels."""
    config = SampleConfig(rows=4000, seed=21, malformed_share=0.05, duplicate_share=0.03)
    df = generate_events(spark, config, labels=True).cache()
    yield df
    df.unpersist()


def test_suite_passes_on_good_rows(labelled):
    good = labelled.where(F.col("sample_defect").isNull()).select(*COLUMNS)
    report = validate_dataframe(good)
    assert report.success, report.lines()
    assert report.failed == ()
    assert [o.rule for o in report.outcomes] == list(load_rules().names)
    assert all(o.element_count == good.count() for o in report.outcomes)


@pytest.mark.parametrize("defect", sorted(RULE_FOR_DEFECT))
def test_one_malformed_row_fails_the_suite_and_is_named(labelled, defect):
    good = labelled.where(F.col("sample_defect").isNull()).limit(300)
    bad = labelled.where(F.col("sample_defect") == defect).limit(1)
    report = validate_dataframe(good.unionByName(bad).select(*COLUMNS))
    assert not report.success
    assert report.failed_rules == (RULE_FOR_DEFECT[defect],)
    (failed,) = report.failed
    assert failed.unexpected_count == 1
    assert any(line.startswith(f"  FAIL  {RULE_FOR_DEFECT[defect]}") for line in report.lines())


def test_split_quarantines_exactly_the_bad_rows_with_their_reason(labelled):
    data = labelled.select(*COLUMNS)
    accepted, quarantined = split_valid_rows(data)
    n_in, n_acc, n_quar = data.count(), accepted.count(), quarantined.count()
    assert n_acc + n_quar == n_in
    assert REASON_COLUMN not in accepted.columns
    assert accepted.columns == data.columns

    truth = {
        (r["event_id"], r["ingest_time"]): RULE_FOR_DEFECT[r["sample_defect"]]
        for r in labelled.where(F.col("sample_defect").isNotNull()).collect()
    }
    got = {(r["event_id"], r["ingest_time"]): r[REASON_COLUMN] for r in quarantined.collect()}
    assert len(truth) > 100
    assert got == truth
    # Nothing bad slipped through, nothing good was held back.
    assert accepted.join(quarantined, ["event_id", "ingest_time"], "inner").count() == 0


def test_split_and_suite_agree_rule_by_rule(labelled):
    """One definition: GE's unexpected count per rule equals the rows the split tags with it."""
    data = labelled.select(*COLUMNS)
    report = validate_dataframe(data)
    _, quarantined = split_valid_rows(data)
    tagged = {
        rule: quarantined.where(F.array_contains(F.split(REASON_COLUMN, "; "), rule)).count()
        for rule in load_rules().names
    }
    assert {o.rule: o.unexpected_count for o in report.outcomes} == tagged
    assert sum(tagged.values()) > 0


def test_row_with_two_defects_gets_both_reasons_and_lands_in_the_quarantine_table(spark, labelled):
    row = labelled.where(F.col("sample_defect").isNull()).select(*COLUMNS).limit(1)
    broken = row.withColumn("user_id", F.lit(None).cast("string")).withColumn(
        "watch_seconds", F.lit(-1.0)
    )
    accepted, quarantined = split_valid_rows(broken)
    assert accepted.count() == 0
    write_table(spark, quarantined, "test_quarantine", mode="overwrite")
    (stored,) = read_table(spark, "test_quarantine").collect()
    assert stored[REASON_COLUMN] == "user_id_not_null; watch_seconds_non_negative"
    assert stored["event_id"] == row.first()["event_id"]


def test_data_without_a_checked_column_is_refused(labelled):
    with pytest.raises(DataflowError, match="device"):
        split_valid_rows(labelled.drop("device"))
    with pytest.raises(DataflowError, match="device"):
        validate_dataframe(labelled.drop("device"))


def test_suite_file_is_a_great_expectations_suite():
    import great_expectations as gx

    from dataflow_core.quality.validate import build_suite

    rules = load_rules()
    with open(rules.source, encoding="utf-8") as handle:
        document = json.load(handle)
    suite = build_suite(rules)
    assert isinstance(suite, gx.ExpectationSuite)
    assert [e.expectation_type for e in suite.expectations] == [
        e["type"] for e in document["expectations"]
    ]


@pytest.mark.parametrize(
    ("expectation", "message"),
    [
        ({"type": "expect_column_mean_to_be_between", "kwargs": {"column": "x"},
          "meta": {"rule": "r"}}, "no row-level form"),
        ({"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "x"}},
         "meta.rule"),
        ({"type": "expect_column_values_to_not_be_null", "kwargs": {}, "meta": {"rule": "r"}},
         "kwargs lack column"),
        ({"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "x", "mostly": 0.9},
          "meta": {"rule": "r"}}, "mostly"),
    ],
)
def test_unusable_rules_are_refused_by_position(expectation, message):
    with pytest.raises(DataflowError, match=message) as caught:
        rules_from_document({"name": "s", "expectations": [expectation]}, source="s.json")
    assert "expectation #1" in str(caught.value)
