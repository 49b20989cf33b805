"""Input corrections flow live (docs/spark-runner.md, "Input corrections"): an input table with
Delta's change data feed on has rows deleted, updated and inserted again between micro-batches
(one batch crashing after its seen ids committed, and retried); after each batch both stages'
results equal an independent recomputation over the input as it then stands, and the ledger
counts inserts, deletes and updates apart. A delete past allowed lateness is left for a
backfill, counted and named in the log; a `--plan-only` backfill then corrects that window only.
(Without the feed, `test_microbatch`'s backfill-under-a-live-pipeline test: change commits
are skipped, and the first batch says so once.)"""

from __future__ import annotations

import itertools

import pytest

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, Repeatedly
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows, GlobalWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import CRASH_ENV, RAISE_ENV, SimulatedCrash
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table, table_path
from tests.integration.test_backfill import DAY0, M, ms, reference_results, results_of, write_input

_names = itertools.count()


def corrected_pipeline(name: str, table: str) -> PipelineSpec:
    """Sums per user and ad in 10-minute windows, a pane per element (so results show every
    batch's state), retracting; then each ad's total over its windows."""
    def per_ad(pane: Pane):  # defined here: pickled by value for Spark's workers
        return [(pane.key[1], pane.value)]

    return register(PipelineSpec(
        name=name, input_table=table, key={"user_id": "user_id", "ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        stages=(
            StageSpec(f"{name}_w", WindowingStrategy(
                FixedWindows(10 * M), AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
                AccumulationMode.RETRACTING, parse_duration("1d"), SumFn()), ("user_id", "ad_id"), "bigint"),
            StageSpec(f"{name}_ad", WindowingStrategy(
                GlobalWindows(), Repeatedly(AfterCount(1)), AccumulationMode.ACCUMULATING, 0, SumFn()),
                ("ad_id",), "bigint", from_upstream=per_ad, input_type="bigint"),
        ),
    ))


def row(event_id: str, user: str, ad: str, v: str, minute: int) -> tuple:
    return (event_id, user, ad, v, DAY0 + minute * M, DAY0 + minute * M + 1000)


def sql(spark, table: str, statement: str) -> None:
    spark.sql(statement.format(t=f"delta.`{table_path(spark, table)}`"))


def as_it_stands(spark, table: str) -> list[tuple]:
    """The input now, in the rows `reference_results` takes (bad values left out: quarantined)."""
    return [(r["event_id"], r["user_id"], r["ad_id"], r["v"], ms(r["event_time"]), ms(r["ingest_time"]))
            for r in read_table(spark, table).collect() if r["v"].isdigit()]


def check(spark, spec: PipelineSpec) -> None:
    want = reference_results(spec, as_it_stands(spark, spec.input_table))
    for stage in spec.stages:
        assert results_of(spark, stage) == want[stage.output], stage.output


def changes(ledger: dict) -> tuple:
    keys = ("inserts", "deletes", "updates", "withdrawn", "retracted", "deletes_never_counted", "left_for_backfill")
    return tuple(ledger[k] for k in keys)


def test_deletes_updates_and_reinserts_between_batches_retract_through_both_stages(spark, monkeypatch):
    n = next(_names)
    spec = corrected_pipeline(f"t_cdf_{n}", f"t_cdf_in_{n}")
    table = spec.input_table
    write_input(spark, table, [row("e0", "u1", "a1", "1", 1), row("e1", "u1", "a1", "2", 2),
                               row("e2", "u1", "a2", "3", 3), row("e3", "u2", "a1", "4", 12),
                               row("e4", "u2", "a1", "5", 13), row("bad", "u2", "a2", "x", 14)])
    sql(spark, table, "ALTER TABLE {t} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    said: list[str] = []
    first = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 20 * M), progress=said.append)
    assert first.ledger_ok and first.ledger["accepted"] == 5 and first.ledger["quarantined"] == 1, first.ledger
    assert not [m for m in said if "no change data feed" in m]
    check(spark, spec)

    # A delete, an update, a delete of a row never counted, a row deleted and inserted again
    # with another value, and a new row: batch 2, which crashes once its seen ids committed.
    sql(spark, table, "DELETE FROM {t} WHERE event_id = 'e1'")
    sql(spark, table, "UPDATE {t} SET v = '30' WHERE event_id = 'e2'")
    sql(spark, table, "DELETE FROM {t} WHERE event_id = 'bad'")
    sql(spark, table, "DELETE FROM {t} WHERE event_id = 'e3'")
    write_input(spark, table, [row("e3", "u2", "a1", "40", 12), row("e5", "u1", "a2", "6", 4)], mode="append")
    monkeypatch.setenv(CRASH_ENV, "deduplicated")
    monkeypatch.setenv(RAISE_ENV, "1")
    with pytest.raises(SimulatedCrash):
        run_microbatch(spark, spec.name, now=format_instant(DAY0 + 25 * M))
    monkeypatch.delenv(CRASH_ENV)
    second = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 25 * M))
    assert second.ledger_ok, second.ledger
    # inserts e3, e5; deletes e1, bad, e3; the update of e2: e1, e2 and e3 retracted, `bad` never counted
    assert changes(second.ledger) == (2, 3, 1, 0, 3, 1, 0), second.ledger
    assert second.ledger["accepted"] == 3 and second.ledger["duplicates"] == 0, second.ledger
    check(spark, spec)

    # e1 inserted again, e5 deleted, e6 inserted and deleted within one batch; a view two days
    # on moves the watermark past every window of May 1st and its allowed lateness.
    later = 2 * 24 * 60
    write_input(spark, table, [row("e1", "u1", "a1", "20", 2), row("e6", "u1", "a1", "9", 5),
                               row("e7", "u3", "a3", "1", later - 1)], mode="append")
    sql(spark, table, "DELETE FROM {t} WHERE event_id IN ('e5', 'e6')")
    third = run_microbatch(spark, spec.name, now=format_instant(DAY0 + later * M))
    assert third.ledger_ok, third.ledger
    assert changes(third.ledger) == (3, 2, 0, 1, 1, 1, 0), third.ledger
    assert third.ledger["read"] == third.ledger["accepted"] == 2, third.ledger
    check(spark, spec)
    seen = {r["event_id"] for r in read_table(spark, f"{spec.name}__seen_ids").collect()}
    assert seen == {"e0", "e1", "e2", "e3", "e4", "e7"}, "deleted rows' ids are forgotten, re-inserted ones counted"

    # Past allowed lateness a delete is not applied live: counted, and the log names the range.
    before = {stage.output: results_of(spark, stage) for stage in spec.stages}
    sql(spark, table, "DELETE FROM {t} WHERE event_id = 'e0'")
    said: list[str] = []
    fourth = run_microbatch(spark, spec.name, now=format_instant(DAY0 + (later + 5) * M), progress=said.append)
    assert fourth.ledger_ok and changes(fourth.ledger) == (0, 1, 0, 0, 0, 0, 1), fourth.ledger
    assert {stage.output: results_of(spark, stage) for stage in spec.stages} == before
    hint = [m for m in said if "corrections left for a backfill" in m and "--plan-only" in m]
    assert hint and "--start 2024-05-01T00:00:00.000Z --end 2024-05-01T00:00:00.001Z" in hint[0], said
    # Backfill and live agree on every window but that one: its plan corrects it alone.
    plan = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + (later + 6) * M),
                        plan_only=True)
    assert plan.ledger["per_stage"][spec.stages[0].output]["corrected_windows"] == 1, plan.ledger
