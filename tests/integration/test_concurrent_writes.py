"""Writes to different tables made at once (`platform.concurrent_writes`), on real Delta:
each keeps its own idempotent key, a failure is raised once the others are done, and the
tables a write registers stay registered in the caller's session."""

from __future__ import annotations

import pytest

from dataflow_core.spark.platform.concurrent_writes import begin_writes, write_at_once
from dataflow_core.spark.platform.delta import append_rows, merge_rows, table_version
from dataflow_core.spark.platform.driver_delta import commit_actions
from dataflow_core.spark.platform.tables import REGISTERED, table_path

pytestmark = pytest.mark.integration

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"


def _txns(spark, name: str) -> list[tuple[str, int]]:
    """The idempotent keys (application id, version) of every commit of table `name`."""
    path = table_path(spark, name)
    return [(a["txn"]["appId"], a["txn"]["version"]) for v in range(table_version(spark, name) + 1)
            for a in commit_actions(path, v) if "txn" in a]


def test_writes_at_once_commit_each_under_its_own_key_and_a_retry_commits_nothing(spark):
    """Two clustered tables made by CREATE TABLE AS SELECT from rows of one session (Delta
    takes the key from that session's settings), a MERGE into an existing table and an
    append, at once; then the same writes again, as a retried batch makes them."""
    rows = spark.createDataFrame([("a", 1, False), ("b", 2, False)], "k string, v int, _delete boolean")
    append_rows(spark, "cw_merged", rows.drop("_delete").limit(0))
    writes = [
        lambda s: merge_rows(s, "cw_made_one", rows, ["k"], delete=True, update=True, txn=("cw:one", 5),
                             cluster_by=("k",)),
        lambda s: merge_rows(s, "cw_made_two", rows, ["k"], delete=True, update=True, txn=("cw:two", 7),
                             cluster_by=("v",)),
        lambda s: merge_rows(s, "cw_merged", rows, ["k"], delete=True, update=True, txn=("cw:merged", 3)),
        lambda s: append_rows(s, "cw_appended", rows.drop("_delete"), ("cw:appended", 9)),
    ]
    write_at_once(spark, writes)
    names = {"cw_made_one": ("cw:one", 5), "cw_made_two": ("cw:two", 7), "cw_merged": ("cw:merged", 3),
             "cw_appended": ("cw:appended", 9)}
    versions = {name: table_version(spark, name) for name in names}
    for name, key in names.items():
        assert _txns(spark, name) == [key], name
        assert spark.read.format("delta").load(table_path(spark, name)).count() == 2, name
    assert spark.conf.get(TXN_APP_ID, None) is None, "no key is left in the caller's session"

    write_at_once(spark, writes)  # the retry: every commit is skipped
    assert {name: table_version(spark, name) for name in names} == versions


def test_a_failed_write_is_raised_once_the_others_have_committed(spark):
    rows = spark.createDataFrame([(1,)], "n int")

    def fails(_session) -> None:
        raise ValueError("this write fails")

    with pytest.raises(ValueError, match="this write fails"):
        write_at_once(spark, [lambda s: append_rows(s, "cw_before", rows), fails,
                              lambda s: append_rows(s, "cw_after", rows)])
    assert table_version(spark, "cw_before") == 0 and table_version(spark, "cw_after") == 0

    pending = begin_writes(spark, [fails, lambda s: append_rows(s, "cw_beside", rows)])
    assert pending.wait(failed=True) == [None, None], "after the caller's own failure, theirs is not raised"
    assert table_version(spark, "cw_beside") == 0


def test_a_table_a_write_registers_stays_registered_in_the_callers_session(spark):
    rows = spark.createDataFrame([(1,), (2,)], "n int")
    begin_writes(spark, [lambda s: append_rows(s, "cw_registered", rows)]).wait()
    assert spark.conf.get(f"{REGISTERED}cw_registered") == table_path(spark, "cw_registered")
    assert spark.sql("SELECT count(*) AS n FROM cw_registered").first()["n"] == 2
