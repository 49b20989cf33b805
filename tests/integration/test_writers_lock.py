"""Every writer takes the pipeline (issue 63.5): maintenance (OPTIMIZE, VACUUM, expired seen
ids) and the input gate's quarantine MERGE lock it as `dataflow reset` does. While another run
has it locked they write nothing: busy while that run works (the Airflow maintenance task fails,
never skips), stuck at once when it failed; VACUUM keeps every version an `--abandon` could
restore, so that abandoning a locked run, maintenance's own included, gives back the tables
exactly as they were. On the suite's shared Spark session; the runs in these tests are
interrupted by the crash switch (raise mode) or locked by a claim taken in the test."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest

from dataflow_core.errors import DataflowError, PipelineBusy, PipelineStuck
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout, register
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.jobs.maintenance import maintain
from dataflow_core.spark.platform.tables import drop_table, read_table, table_exists, table_path, write_table
from dataflow_core.spark.sinks.fencing import abandon
from dataflow_core.spark.sinks.pipeline_lock import release, take_lock
from dataflow_core.spark.sinks.runs import fail_run
from tests.integration.test_backfill import DAY0, M, to_rows, write_input
from tests.integration.test_backfill_live import _tables
from tests.integration.test_input_rules import SKEW, orders_pipeline, reasons, write_orders
from tests.integration.test_microbatch import in_warehouse
from tests.integration.test_one_history import VIEWS, _billing

_names = itertools.count()


def _operations(spark, table: str) -> list[str]:
    from delta.tables import DeltaTable

    return [r["operation"] for r in DeltaTable.forPath(spark, table_path(spark, table)).history().collect()]


def _maintained(spark, spec: PipelineSpec) -> list[str]:
    """The pipeline's tables whose history holds an OPTIMIZE or a VACUUM."""
    return [t for t in layout.pipeline_tables(spec) if table_exists(spark, t)
            and any(op.startswith(("OPTIMIZE", "VACUUM")) for op in _operations(spark, t))]


def _locks(spark, spec: PipelineSpec) -> list[tuple[str, str]]:
    """The pipeline's batch records (status, command of the holder), oldest first."""
    log = read_table(spark, "dataflow_batches").where(f"pipeline = '{spec.name}'").orderBy("batch", "status")
    return [(r["status"], (r["holder"] or "microbatch").split(" ")[-1].split("-")[0]) for r in log.collect()]


def test_maintenance_locks_the_pipeline_and_its_task_fails_while_another_run_does(spark, tmp_path, capsys):
    """While a backfill works locking the pipeline, maintenance is busy and touches no table
    (`dataflow maintain` exits 75 with one line), and the Airflow task fails on it (not a
    skip); once that run failed, the command exits 76 and the task fails at once, however long
    it would wait, with the line naming the run. Released, maintenance has the pipeline locked for
    its own work (a `started` record of its run, then `finished`)."""
    from airflow.sdk.exceptions import AirflowFailException

    from dataflow_core.airflow.maintenance import maintenance_task
    from dataflow_core.cli import main
    from dataflow_core.errors import BUSY_EXIT, STUCK_EXIT

    def command() -> tuple[int, list[str]]:
        capsys.readouterr()
        code = main(["maintain", "--pipeline", spec.name, "--warehouse", str(tmp_path / "wh")])
        return code, capsys.readouterr().err.strip().splitlines()

    spec = _billing(f"t_maint_lock_{next(_names)}", AccumulationMode.RETRACTING)
    with in_warehouse(spark, tmp_path / "wh"):
        write_input(spark, spec.input_table, to_rows(VIEWS))
        assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02").ledger_ok
        other = take_lock(spark, spec, "backfill", {"start": "2024-05-03", "end": "2024-05-04"}, None)  # working
        with pytest.raises(PipelineBusy, match=f"locked by backfill run {other.run.run_id}") as busy:
            maintain(spark, spec.name, 168, None)
        assert "\n" not in str(busy.value)
        with pytest.raises(AirflowFailException, match=f"locked by backfill run {other.run.run_id}"):
            maintenance_task(spec.name, wait=None)
        code, lines = command()
        assert code == BUSY_EXIT and len(lines) == 1 and lines[0].startswith("dataflow maintain: busy: "), lines
        fail_run(spark, other.run, "ValueError: boom")
        code, lines = command()
        assert code == STUCK_EXIT and len(lines) == 1 and lines[0].startswith("dataflow maintain: stuck: "), lines
        assert f"locked by backfill run {other.run.run_id}" in lines[0] and "--abandon" in lines[0], lines
        with pytest.raises(AirflowFailException, match=f"locked by backfill run {other.run.run_id}.*which failed at"):
            maintenance_task(spec.name)  # stuck: no wait (the task's is an hour)
        assert _maintained(spark, spec) == []
        release(spark, spec, other.record, None)
        done = maintain(spark, spec.name, 168, None)
        assert set(done["tables"]) >= {spec.stages[0].output, f"{spec.stages[0].output}_panes"}
        assert set(_maintained(spark, spec)) == set(done["tables"]) - {layout.BATCHES}
        assert _locks(spark, spec)[-2:] == [("finished", "maintain"), ("started", "maintain")]
        runs = read_table(spark, "dataflow_runs").where(f"pipeline = '{spec.name}' AND command = 'maintain'")
        assert sorted(r["status"] for r in runs.collect()) == ["finished", "started"]


def test_a_held_backfill_then_maintenance_then_abandon_gives_back_the_tables(spark, tmp_path, crash):
    """A correcting backfill stops while it has the pipeline locked (its pane log's commit made);
    the maintenance task then fails naming it and compacts nothing, and `--abandon` restores
    every table to exactly what it was before the backfill."""
    from airflow.sdk.exceptions import AirflowFailException

    from dataflow_core.airflow.maintenance import maintenance_task

    spec = _billing(f"t_maint_abandon_{next(_names)}", AccumulationMode.RETRACTING)
    late = ("late-1", "u9", "ad1", "23", DAY0 + 60 * 1000, DAY0 + 20 * M)
    with in_warehouse(spark, tmp_path / "wh"):
        write_input(spark, spec.input_table, to_rows(VIEWS))
        assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02").ledger_ok
        before = _tables(spark, spec)
        write_input(spark, spec.input_table, [late], mode="append")
        crash(f"{spec.stages[0].output}-corrected-panes")
        with pytest.raises(SimulatedCrash):
            run_backfill(spark, spec.name, "2024-05-01", "2024-05-02")
        crash(None)
        assert _tables(spark, spec) != before
        latest = read_table(spark, "dataflow_batches").where(f"pipeline = '{spec.name}'").orderBy("batch").collect()[-1]
        run_id = latest["holder"].split(" ")[1]
        with pytest.raises(AirflowFailException, match=f"locked by backfill run {run_id}"):
            maintenance_task(spec.name, wait=None)
        assert _maintained(spark, spec) == []
        abandon(spark, spec.name, run_id, lambda _m: None, force=True)
        assert _tables(spark, spec) == before


def _small(name: str) -> PipelineSpec:
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="v", quality_suite=None,
        partition_column=None, watermark=lambda: HeuristicWatermark(bound=60_000),
        stages=(StageSpec(name, WindowingStrategy(
            FixedWindows(600_000), AfterWatermark(), AccumulationMode.ACCUMULATING, 0, SumFn()), ("ad_id",), "bigint"),),
    ))


def _contents(spark, tables: list[str]) -> dict[str, Counter]:
    return {t: Counter(tuple(r) for r in read_table(spark, t).collect()) for t in tables}


def test_vacuum_keeps_what_an_abandon_of_the_locking_run_restores(spark, tmp_path, crash):
    """Maintenance with no retention of its own (0 h) stops after its first VACUUM, locking
    the pipeline: that VACUUM kept the files its OPTIMIZE replaced, which the versions its lock
    found need, so `--abandon` of it restores every table to what it held (a VACUUM of 0 h
    deletes those files, and the restored table cannot be read)."""
    spec = _small(f"t_maint_vac_{next(_names)}")
    tables = [t for t in layout.pipeline_tables(spec) if t != layout.seen_ids(spec)]
    with in_warehouse(spark, tmp_path / "wh"):
        for table in tables:  # two files each: something to compact
            write_table(spark, spark.range(2).repartition(2), table, mode="append")
        before = _contents(spark, tables)
        first = spec.stages[0].output
        crash(f"maintenance-vacuumed-{first}")
        with pytest.raises(SimulatedCrash):
            maintain(spark, spec.name, 0, None)
        crash(None)
        assert "OPTIMIZE" in _operations(spark, first) and "VACUUM END" in _operations(spark, first)
        from delta.tables import DeltaTable

        [vacuum] = DeltaTable.forPath(spark, table_path(spark, first)).history().where(
            "operation = 'VACUUM START'").collect()
        latest = read_table(spark, "dataflow_batches").where(f"pipeline = '{spec.name}'").orderBy("batch").collect()[-1]
        assert latest["status"] == "started"
        abandon(spark, spec.name, latest["holder"].split(" ")[1], lambda _m: None, force=True)
        assert _contents(spark, tables) == before
        assert int(json.loads(vacuum["operationParameters"]["specifiedRetentionMillis"])) > 0


def test_the_input_gate_writes_the_quarantine_only_with_the_pipeline_locked(spark, tmp_path):
    """While a run works locking the pipeline, the gate validates its range but does not
    MERGE its refused rows into the pipeline's quarantine (the run may be writing it): busy,
    after waiting as long as it was told, and the quarantine unchanged; stuck once that run
    failed. Released, the gate has the pipeline locked for its MERGE and releases it, also when the
    MERGE fails (its run then recorded failed): the pipeline is never left locked by a gate."""
    from dataflow_core.quality.gates import gate_input

    spec = orders_pipeline(f"t_gate_lock_{next(_names)}")
    i = DAY0 + 5 * M
    with in_warehouse(spark, tmp_path / "wh"):
        write_orders(spark, spec.input_table, [("past", "shop/7", 2.0, i + SKEW + 1, i), ("g", "shop/7", 8.0, i, i)])
        other = take_lock(spark, spec, "backfill", {"start": "2024-05-03", "end": "2024-05-04"}, None)
        with pytest.raises(PipelineBusy, match=f"locked by backfill run {other.run.run_id}"):
            gate_input(spark, spec, "2024-05-01", "2024-05-02", "gate-held", docs_dir=tmp_path / "docs",
                       now=DAY0 + 12 * 3600_000, wait_s=1)
        assert not table_exists(spark, f"{spec.name}__quarantine")
        fail_run(spark, other.run, "ValueError: boom")
        with pytest.raises(PipelineStuck, match="which failed at"):
            gate_input(spark, spec, "2024-05-01", "2024-05-02", "gate-stuck", docs_dir=tmp_path / "docs",
                       now=DAY0 + 12 * 3600_000)
        release(spark, spec, other.record, None)
        write_table(spark, spark.range(1), f"{spec.name}__quarantine")  # a layout the MERGE refuses
        with pytest.raises(DataflowError, match="exists with another layout"):
            gate_input(spark, spec, "2024-05-01", "2024-05-02", "gate-fails", docs_dir=tmp_path / "docs",
                       now=DAY0 + 12 * 3600_000)
        assert _locks(spark, spec)[-2:] == [("finished", "gate"), ("started", "gate")]  # failed, and released
        failed = read_table(spark, "dataflow_runs").where(f"pipeline = '{spec.name}' AND command = 'gate'").collect()
        assert [r["status"] for r in failed if r["status"] == "failed"] == ["failed"]
        drop_table(spark, f"{spec.name}__quarantine")
        gate = gate_input(spark, spec, "2024-05-01", "2024-05-02", "gate-free", docs_dir=tmp_path / "docs",
                          now=DAY0 + 12 * 3600_000)
        assert gate.quarantined == 1 and reasons(spark, spec) == {"past": "event_time_beyond_skew"}
        assert _locks(spark, spec)[-2:] == [("finished", "gate"), ("started", "gate")]
