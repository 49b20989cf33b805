"""Going live reads the input at the version its batch's claim pinned (`BatchRecord.versions`),
not the latest: a commit to the input between the claim and the first batch's read of it
(here a counted view's value rewritten, while the batch was interrupted right after its
claim) does not change the accumulators the first batch rebuilds for the backfill's windows.
What the rewrite changed is no live event (a backfill applies it), so the results are those
of the input as it was."""

from __future__ import annotations

import pytest

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.time import format_instant
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import table_path
from dataflow_core.spark.sinks.batches import records
from dataflow_core.spark.sinks.pipeline_lock import input_key
from tests.integration.test_backfill import DAY0, M, to_rows, write_input
from tests.integration.test_one_history import VIEWS, _billing, _results, _sums

S = 1000


def test_going_live_rebuilds_the_backfilled_windows_from_the_input_its_claim_pinned(spark, crash):
    rows = to_rows(VIEWS)
    spec = _billing("t_golive_pinned", AccumulationMode.ACCUMULATING)
    before = [r for r in rows if r[5] < DAY0 + 8 * M]
    write_input(spark, spec.input_table, before)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 9 * M)).ledger_ok
    write_input(spark, spec.input_table, [r for r in rows if r[5] >= DAY0 + 8 * M], mode="append")  # a late view too
    now = DAY0 + 86_400 * S + 20 * M

    crash("started")  # the going-live batch stops right after its claim
    with pytest.raises(SimulatedCrash):
        run_microbatch(spark, spec.name, now=format_instant(now))
    crash(None)
    claimed = records(spark, spec)[0]
    assert claimed.status == "started" and input_key(spec.name) in claimed.versions
    counted = next(r for r in before if r[2] == "ad1")  # in the window the late view corrects
    spark.sql(f"UPDATE delta.`{table_path(spark, spec.input_table)}` SET v = '1000' WHERE event_id = '{counted[0]}'")

    assert run_microbatch(spark, spec.name, now=format_instant(now)).ledger_ok
    assert run_microbatch(spark, spec.name, now=format_instant(now + 3 * 3600 * S)).ledger_ok
    assert _results(spark, spec.stages[0]) == _sums(rows), "the backfill's windows as the claim found the input"


def test_two_planners_of_one_stream_batch_one_creates_its_offsets_the_other_reads_them(spark, tmp_path):
    """The sessions' checkpoint files are made by `ExclusiveCheckpointFileManager`: of two
    processes that both found `offsets/0` absent and planned batch 0, the first to create it
    wins, the other's create fails (Spark then stops that query as a concurrent one,
    PipelineBusy), and the file holds the first plan, which the next run reads."""
    from dataflow_core.spark.platform.logstore import CHECKPOINT_MANAGER
    from dataflow_core.spark.platform.tables import jvm_class

    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == CHECKPOINT_MANAGER
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    folder = tmp_path / "checkpoint" / "offsets"
    folder.mkdir(parents=True)
    path = jvm_class(spark, "org.apache.hadoop.fs.Path")(str(folder / "0"))
    first, second = (jvm_class(spark, CHECKPOINT_MANAGER)(path.getParent(), hadoop) for _ in range(2))
    plans = {"first": '{"reservoirVersion":3}', "second": '{"reservoirVersion":4}'}
    planned = {who: manager.createAtomic(path, False) for who, manager in zip(plans, (first, second))}
    for who, out in planned.items():
        out.write(bytearray(f'v1\n{{"batchWatermarkMs":0}}\n{plans[who]}'.encode()))
    planned["first"].close()
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        planned["second"].close()
    assert (folder / "0").read_text() == f'v1\n{{"batchWatermarkMs":0}}\n{plans["first"]}\n'
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == ["0"], "no temporary file left"
