"""`dataflow_batches` as a micro-batch reads it: the log this process follows through its own
appends (no query) says what a fresh read of the table says, and another writer's commit
in between makes the next read query the table again."""

from __future__ import annotations

from dataflow_core.spark.sinks import batches
from dataflow_core.spark.sinks.batch_records import RESET, SKIP, BatchRecord, LoggedBatch
from dataflow_core.spark.sinks.batches import append_record, read_log
from dataflow_core.spark.sinks.runs import Ledger
from tests.integration.test_backfill import sessions_pipeline


def _fresh(spark, spec) -> batches.BatchLog:
    batches._read_logs.clear()
    return read_log(spark, spec)


def test_the_log_followed_through_own_appends_equals_a_fresh_read(spark):
    spec = sessions_pipeline("t_log", "t_log_in")
    other = sessions_pipeline("t_log_other", "t_log_other_in")
    ledger = Ledger()
    # (pipeline, batch, stream batch, attempt, status[, holder]): a backfill's lock, claims,
    # finishes, a retry, a tick, a skip request, a reset, and another pipeline's row between two
    steps = [
        (spec, 0, None, 0, "started", "backfill b1"), (spec, 0, None, 0, "finished", "backfill b1"),
        (spec, 1, 0, 0, "started"), (spec, 1, 0, 0, "finished"), (spec, 2, None, 0, "started"),
        (other, 0, 0, 0, "started"), (spec, 2, None, 1, "started"), (spec, 2, None, 1, "finished"),
        (spec, 3, 1, 0, "started"), (spec, 3, 1, 0, SKIP), (spec, 3, 1, 0, "finished"), (spec, 4, None, 0, RESET),
        (spec, 5, 2, 0, "started"),
    ]
    read_log(spark, spec)  # nothing yet: no table, nothing cached
    live = []
    for pipeline, batch, stream_batch, attempt, status, *holder in steps:
        rec = BatchRecord(batch, stream_batch, 1_000 * (batch + 1), {"x": batch}, attempt=attempt,
                          token=f"run-{batch}-{attempt}", stream_id="s1", skip="poison" if status == SKIP else None,
                          holder=holder[0] if holder else "microbatch")
        append_record(spark, pipeline, rec, status, ledger if status == "finished" else None)
        followed = read_log(spark, spec)
        assert followed == _fresh(spark, spec), (batch, status)
        live.append(followed.ran_live)
        if pipeline is spec and batch == 3:  # a skip request is no record: it rides its batch's, from its row on
            assert {r.skip for r in followed.records if r.batch == 3} == {None if status == "started" else "poison"}
        read_log(spark, spec)  # cached again for the next append to follow
    # live once a micro-batch finished (a backfill's lock does not make it live), not after a reset
    assert live == [False, False, False, True, True, True, True, True, True, True, True, False, False], live

    log = read_log(spark, spec)
    assert [(r.batch, r.status) for r in log.records] == [(5, "started"), (4, RESET)]
    assert log.records[0] == LoggedBatch(
        pipeline=spec.name, batch=5, stream_batch=2, now_ms=6_000, status="started", versions={"x": 5}, watermarks={},
        estimator_state=None, ledger=None, attempt=0, run_token="run-5-0", stream_id="s1", holder="microbatch",
        reason=None, skip=None), "the row read back as written, its JSON columns decoded"
    assert log.committed == (None, None, None), "a reset forgets the stream batches before it"


def test_the_log_is_read_again_after_another_writers_commit(spark):
    spec = sessions_pipeline("t_log2", "t_log2_in")
    first = BatchRecord(0, 0, 1_000, {}, token="a", stream_id="s1")
    append_record(spark, spec, first, "started", None)
    read_log(spark, spec)
    # another process's commit: this one has no cached rows that follow it
    cached = dict(batches._read_logs)
    batches._read_logs.clear()
    append_record(spark, spec, BatchRecord(0, 0, 1_000, {}, attempt=1, token="b", stream_id="s1"), "started", None)
    batches._read_logs.update(cached)
    log = read_log(spark, spec)
    assert [(r.batch, r.attempt, r.run_token) for r in log.records] == [(0, 1, "b"), (0, 0, "a")]
