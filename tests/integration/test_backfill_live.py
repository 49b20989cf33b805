"""A backfill and the micro-batches of one pipeline (issue "Backfills and live micro-batches
on one pipeline, safely"): they fence each other through `dataflow_batches`, and a backfill
interrupted between any two of its commits and run again leaves the tables an uninterrupted
one leaves; micro-batches then carry on, with deleted input not counted and late input
counted once.

Interruptions are the `crash` fixture (conftest.py): the run stops dead between two commits
inside this process."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import shutil
from collections import Counter

import pytest

from dataflow_core.errors import DataflowError, PipelineBusy, PipelineStuck
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.panes import history_breaks
from dataflow_core.model.time import format_instant
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table, table_exists, table_path
from tests.integration.test_backfill import DAY0, M, reference_results, results_of, to_rows, write_input
from tests.integration.test_microbatch import in_warehouse
from tests.integration.test_one_history import VIEWS, _billing, _histories, _results, _sums

_names = itertools.count()
S = 1000


def _delete(spark, table: str, event_id: str) -> None:
    spark.sql(f"DELETE FROM delta.`{table_path(spark, table)}` WHERE event_id = '{event_id}'")


def _live_then_changed(spark, spec, rows):
    """Micro-batches over the first 8 minutes of arrivals; then a late view is appended and
    a counted view deleted (an input fix the stream skips); returns the input as it stands."""
    early = DAY0 + 8 * M
    write_input(spark, spec.input_table, [r for r in rows if r[5] < early])
    assert run_microbatch(spark, spec.name, now=format_instant(early)).ledger_ok
    assert run_microbatch(spark, spec.name, now=format_instant(early + 150 * S)).ledger_ok  # EARLY panes out
    gone = next(r for r in rows if r[5] < early)
    _delete(spark, spec.input_table, gone[0])
    late = ("late-1", "u9", gone[2], "23", DAY0 + 60 * S, DAY0 + 9 * M)
    write_input(spark, spec.input_table, [late], mode="append")
    return [r for r in rows if r[5] < early and r[0] != gone[0]] + [late]


def test_backfills_and_micro_batches_fence_each_other(spark, crash):
    spec = _billing(f"t_fence_{next(_names)}", AccumulationMode.RETRACTING)
    rows = to_rows(VIEWS)
    write_input(spark, spec.input_table, [r for r in rows if r[5] < DAY0 + 8 * M])
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 8 * M)).ledger_ok

    write_input(spark, spec.input_table, [r for r in rows if r[5] >= DAY0 + 8 * M], mode="append")
    crash("deduplicated")  # a micro-batch stops half-way: it has the pipeline locked
    with pytest.raises(SimulatedCrash):
        run_microbatch(spark, spec.name, now=format_instant(DAY0 + 12 * M))
    crash(None)
    with pytest.raises(PipelineBusy, match="a micro-batch has it locked"):
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 13 * M))
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 12 * M)).ledger_ok  # completes it

    crash(f"{spec.stages[0].output}-planned")  # a backfill stops after planning: it has the pipeline locked
    with pytest.raises(SimulatedCrash):
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 14 * M))
    crash(None)
    # (it failed, so it stands until resumed or abandoned: not busy, stuck, and saying how to resume it)
    resume = f"`dataflow backfill --pipeline {spec.name} --start 2024-05-01T00:00:00.000Z --end 2024-05-02T00:00:00.000Z`"
    with pytest.raises(PipelineStuck, match=r"is locked by backfill run backfill-\w+ .*which failed at .*SimulatedCrash"):
        run_microbatch(spark, spec.name, now=format_instant(DAY0 + 15 * M))
    with pytest.raises(PipelineStuck, match=re.escape(resume)):  # another backfill (other arguments) too
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-03", now=format_instant(DAY0 + 14 * M))
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02",
                        now=format_instant(DAY0 + 14 * M)).ledger_ok  # the same backfill finishes
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 3 * 3600 * S)).ledger_ok
    assert _results(spark, spec.stages[0]) == _sums(rows)
    for window, history in _histories(spark, spec.stages[0]).items():
        assert history_breaks(history) == [], (window, history)


def test_a_now_in_the_future_is_refused_before_any_work(spark):
    spec = _billing(f"t_future_{next(_names)}", AccumulationMode.ACCUMULATING)
    with pytest.raises(DataflowError, match=r"--now 2999-01-01T00:00:00.000Z is in the future"):
        run_microbatch(spark, spec.name, now="2999-01-01")


def _tables(spark, spec) -> dict[str, Counter]:
    """What a run leaves, without run ids, pane ids or batch numbers (which name the run)."""
    out = {}
    stage = spec.stages[0]
    for name, drop in ((f"{stage.output}_panes", {"run_id", "pane_id"}), (stage.output, {"run_id", "pane_id"}),
                       (f"{stage.output}__state", {"batch"}), (f"{spec.name}__seen_ids", {"batch"})):
        if not table_exists(spark, name):  # no live state without micro-batches
            continue
        out[name.replace(spec.name, "P")] = Counter(
            repr(tuple(v for k, v in r.asDict().items() if k not in drop)) for r in read_table(spark, name).collect())
    return out


def _resumable_and_uninterrupted(spark, spec, twin, resumed, now: str):
    """Copy the warehouse `twin` (the pipeline as it stands) to `resumed`, for the run under
    test; then, in `twin`, the uninterrupted backfill at `now`: its result and the tables it
    leaves."""
    shutil.copytree(twin, resumed)
    with in_warehouse(spark, twin):
        return run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=now), _tables(spark, spec)


def test_a_backfill_interrupted_anywhere_and_run_again_corrects_live_state_exactly(spark, crash, tmp_path):
    """One backfill stopped after each of its commit points in turn, then run to the end,
    leaves the tables of an uninterrupted twin (the same pipeline and live history, in a copy
    of the warehouse); micro-batches then carry on: the deleted view is not counted, the
    late view is counted once."""
    rows = to_rows(VIEWS)
    spec = _billing(f"t_resume_{next(_names)}", AccumulationMode.RETRACTING)
    twin, resumed = tmp_path / "twin", tmp_path / "resumed"
    with in_warehouse(spark, twin):
        standing = _live_then_changed(spark, spec, rows)
    now = format_instant(DAY0 + 11 * M)
    result, uninterrupted = _resumable_and_uninterrupted(spark, spec, twin, resumed, now)
    assert result.ledger_ok
    out = spec.stages[0].output
    with in_warehouse(spark, resumed):
        for point in (f"{out}-planned", f"{out}-corrected-panes", f"{out}-corrected-results", f"{out}-corrected-state"):
            crash(point)
            with pytest.raises(SimulatedCrash):
                run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=now)
        crash(None)
        assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=now).ledger_ok
        assert _tables(spark, spec) == uninterrupted
        _assert_plan_forgotten_in_the_log(spark, spec.stages[0])

        rest = [r for r in rows if r[5] >= DAY0 + 8 * M]
        write_input(spark, spec.input_table, rest + [standing[-1]], mode="append")  # the late view again
        assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 30 * M)).ledger_ok
        assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 3 * 3600 * S)).ledger_ok  # early timers
        assert _results(spark, spec.stages[0]) == _sums(standing + rest)
        for window, history in _histories(spark, spec.stages[0]).items():
            assert history_breaks(history) == [], (window, history)


def test_a_backfill_without_live_state_interrupted_anywhere_resumes_from_its_planned_changes(
    spark, crash, tmp_path,
):
    """Without micro-batches, a backfill correcting an earlier one (a view deleted, a late
    one added) stopped after each of its commit points in turn, then run to the end, leaves
    the tables of an uninterrupted twin (a copy of the warehouse before it). Its plan holds
    the changed windows, one row each, and the corrections are computed again from it, not
    from the half-written tables."""
    from dataflow_core.spark.sinks.corrections_plan import plan_table

    rows = to_rows(VIEWS)
    early = DAY0 + 8 * M
    spec = _billing(f"t_resume_batch_{next(_names)}", AccumulationMode.RETRACTING)
    twin, resumed = tmp_path / "twin", tmp_path / "resumed"
    with in_warehouse(spark, twin):
        write_input(spark, spec.input_table, [r for r in rows if r[5] < early])
        assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(early)).ledger_ok
        gone = next(r for r in rows if r[5] < early)
        _delete(spark, spec.input_table, gone[0])
        write_input(spark, spec.input_table, [("late-1", "u9", gone[2], "23", DAY0 + 60 * S, DAY0 + 9 * M)],
                    mode="append")
    now = format_instant(DAY0 + 11 * M)
    result, uninterrupted = _resumable_and_uninterrupted(spark, spec, twin, resumed, now)
    assert result.ledger["corrected_windows"] >= 1
    stage = spec.stages[0]
    with in_warehouse(spark, resumed):
        for point in (f"{stage.output}-planned", f"{stage.output}-corrected-panes",
                      f"{stage.output}-corrected-results"):
            crash(point)
            with pytest.raises(SimulatedCrash):
                run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=now)
            plan = read_table(spark, plan_table(stage)).collect()
            assert {r["kind"] for r in plan} == {"change"} and len(plan) == len({
                (r["ad_id"], r["window_start"]) for r in plan}) >= 1, plan
        crash(None)
        assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=now).ledger_ok
        assert _tables(spark, spec) == uninterrupted
        _assert_plan_forgotten_in_the_log(spark, stage)


FIRST_NOW = format_instant(DAY0 + 11 * M)


def _first_backfill_twins(spark, prefix: str):
    """Two billing pipelines over the same input (VIEWS): the twin already backfilled once
    (uninterrupted, at FIRST_NOW), the other with no run yet. Returns the rows and both."""
    rows = to_rows(VIEWS)
    twin = _billing(f"{prefix}_twin_{next(_names)}", AccumulationMode.ACCUMULATING)
    spec = _billing(f"{prefix}_{next(_names)}", AccumulationMode.ACCUMULATING)
    for pipeline in (twin, spec):
        write_input(spark, pipeline.input_table, rows)
    assert run_backfill(spark, twin.name, "2024-05-01", "2024-05-02", now=FIRST_NOW).ledger_ok
    return rows, twin, spec


def test_a_first_backfill_interrupted_anywhere_resumes_from_the_input_version_it_planned(spark, crash):
    """A pipeline's first backfill (no results, no live state) stores no plan: its lock's
    record pins the input version it reads, and every window is a change. Stopped after each
    of its commit points in turn, with the input changed before each retry (a view deleted,
    one added in the range), then run to the end, it finishes as an uninterrupted twin over
    the input as it first read it, and the same command then corrects the range for the
    input as it now stands, as the twin's next backfill does over the same changes."""
    from dataflow_core.spark.sinks.corrections_plan import plan_table

    rows, twin, spec = _first_backfill_twins(spark, "t_first")
    stage = spec.stages[0]
    for n, point in enumerate((f"{stage.output}-planned", f"{stage.output}-corrected-panes",
                               f"{stage.output}-corrected-results")):
        crash(point)
        with pytest.raises(SimulatedCrash):
            run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW)
        assert not table_exists(spark, plan_table(stage)), "a first backfill commits no plan"
        for pipeline in (spec, twin):
            _delete(spark, pipeline.input_table, rows[n][0])
            write_input(spark, pipeline.input_table, [(f"new-{n}", "u9", "ad1", "7", DAY0 + 60 * S, DAY0 + 9 * M)],
                        mode="append")
    crash(None)
    said: list[str] = []
    result = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW, progress=said.append)
    assert result.ledger_ok and result.ledger["panes"] >= 1
    assert any("correcting the range again" in line for line in said), said
    assert run_backfill(spark, twin.name, "2024-05-01", "2024-05-02", now=FIRST_NOW).ledger_ok
    assert _tables(spark, spec) == _tables(spark, twin)


def test_a_first_backfill_stopped_in_a_later_stage_resumes_it_from_its_upstreams_results(spark, crash):
    """In a pipeline's first backfill no stage stores a plan: a later stage without results
    when the run took its lock recomputes every window from its upstream's results, which the
    run wrote (idempotently) before it, so they are the same on every resumption. Stopped
    after each of the second stage's commit points in turn, each retry resuming the run, then
    run to the end, it leaves the tables of an uninterrupted twin, and no plan committed."""
    from dataflow_core.spark.sinks.corrections_plan import plan_table
    from tests.integration.test_backfill import sessions_pipeline
    from tests.integration.test_microbatch import VIEWS as SESSION_VIEWS, history

    rows = to_rows(SESSION_VIEWS)
    n = next(_names)
    spec, twin = sessions_pipeline(f"t_first2_{n}", f"t_first2_{n}_in"), sessions_pipeline(f"t_twin2_{n}", f"t_twin2_{n}_in")
    for pipeline in (spec, twin):
        write_input(spark, pipeline.input_table, rows)
    assert run_backfill(spark, twin.name, "2024-05-01", "2024-05-02", now=FIRST_NOW).ledger_ok
    later = spec.stages[1]
    for point in (f"{later.output}-planned", f"{later.output}-corrected-panes", f"{later.output}-corrected-results"):
        crash(point)
        with pytest.raises(SimulatedCrash):
            run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW)
        assert not any(table_exists(spark, plan_table(s)) for s in spec.stages), "a first backfill commits no plan"
    crash(None)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW).ledger_ok
    for ours, theirs in zip(spec.stages, twin.stages):
        assert history(spark, f"{ours.output}_panes") == history(spark, f"{theirs.output}_panes"), ours.output
        if ours.keeps_results:
            assert history(spark, ours.output) == history(spark, theirs.output), ours.output
    assert history(spark, f"{later.output}_panes"), "the later stage emitted panes"


def test_a_backfill_whose_pinned_input_version_is_gone_says_so_and_is_abandoned_as_told(spark, crash):
    """A first backfill stopped after writing panes, whose pinned version of the input is then
    vacuumed away (the table overwritten, VACUUM with no retention), fails on the re-run with one line
    naming the run, the version and the way out; `--abandon` (as the line says) restores the
    pipeline's tables and releases it, and the next run leaves the tables of an uninterrupted
    twin over the input as it now stands."""
    from dataflow_core.spark.sinks.fencing import abandon

    rows, twin, spec = _first_backfill_twins(spark, "t_gone")
    stage = spec.stages[0]
    crash(f"{stage.output}-corrected-panes")
    with pytest.raises(SimulatedCrash):
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW)
    crash(None)
    spark.catalog.clearCache()  # what the stopped run had cached dies with its process
    write_input(spark, spec.input_table, rows[1:])  # overwritten: version 0's files are vacuumed next
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{table_path(spark, spec.input_table)}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    with pytest.raises(DataflowError) as gone:
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW)
    line = str(gone.value)
    assert "\n" not in line and "cannot resume" in line and f"version 0 of {spec.input_table}" in line, line
    run_id = line.split("--abandon ")[1].split("`")[0]
    assert table_exists(spark, f"{stage.output}_panes")  # what it wrote before it stopped ...
    restored = abandon(spark, spec.name, run_id, lambda _m: None)
    assert f"{stage.output}_panes" in restored and not read_table(spark, f"{stage.output}_panes").count()  # ... undone
    failed = read_table(spark, "dataflow_runs").where(f"run_id = '{run_id}' AND status = 'failed'").collect()
    assert any("abandoned" in r["reason"] for r in failed), failed
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=FIRST_NOW).ledger_ok
    assert _results(spark, stage) == _sums(rows[1:])


def test_a_backfill_remembers_the_ids_of_the_windows_it_owns_and_no_others(spark):
    """A first backfill (no results yet: every window it computes is new) and one of the next
    day (results there: only its changed windows): each adds to the seen ids exactly the
    events of the windows starting in its range, not those it read only to complete them."""
    spec = _billing(f"t_seen_{next(_names)}", AccumulationMode.ACCUMULATING)
    day = 86_400 * S
    rows = [("a", "u1", "ad1", "1", DAY0 + 5 * M, DAY0 + 6 * M),
            ("b", "u1", "ad1", "2", DAY0 + day - 5 * M, DAY0 + day - 4 * M),  # the range's last window
            ("c", "u1", "ad1", "3", DAY0 + day + 5 * M, DAY0 + day + 6 * M),  # the next day's first window
            ("d", "u2", "ad2", "4", DAY0 + day + 7 * M, DAY0 + day + 8 * M)]
    write_input(spark, spec.input_table, rows)

    def seen() -> set[str]:
        return {r["event_id"] for r in read_table(spark, f"{spec.name}__seen_ids").collect()}

    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 2 * day)).ledger_ok
    assert seen() == {"a", "b"}
    assert run_backfill(spark, spec.name, "2024-05-02", "2024-05-03", now=format_instant(DAY0 + 2 * day)).ledger_ok
    assert seen() == {"a", "b", "c", "d"}


def test_a_first_sessions_backfill_remembers_the_ids_of_the_sessions_starting_in_its_range(spark):
    """Sessions (5-minute gaps) across both edges of the range: the ids remembered are those
    of the sessions that start in it, including their rows after its end, and none of a
    session that started before it, or of a later session of the same key."""
    from tests.integration.test_backfill import sessions_pipeline

    name = f"t_seen_sessions_{next(_names)}"
    spec = sessions_pipeline(name, f"{name}_in")
    day = 86_400 * S
    rows = [("h", "u1", "ad1", "1", DAY0 - 10 * M, DAY0 - 9 * M),  # a session of April 30
            ("g", "u1", "ad1", "1", DAY0 + day - 20 * M, DAY0 + day - 19 * M),
            ("a", "u1", "ad1", "1", DAY0 + day - 3 * M, DAY0 + day - 2 * M),  # one session over midnight
            ("b", "u1", "ad1", "1", DAY0 + day + M, DAY0 + day + 2 * M),
            ("f", "u1", "ad1", "1", DAY0 + day + 15 * M, DAY0 + day + 16 * M),  # a session of May 2
            ("c", "u2", "ad2", "1", DAY0 - 2 * M, DAY0 - M),  # one session from April 30 into May 1
            ("d", "u2", "ad2", "1", DAY0 + 2 * M, DAY0 + 3 * M),
            ("e", "u3", "ad3", "1", DAY0 + 600 * M, DAY0 + 601 * M)]
    write_input(spark, spec.input_table, rows)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 2 * day)).ledger_ok
    assert {r["event_id"] for r in read_table(spark, f"{spec.name}__seen_ids").collect()} == {"g", "a", "b", "e"}
    # and the results hold those sessions whole, and no piece of the one that began on April 30
    # (Spark pushes a filter on a session_window's start below the merging of sessions)
    sessions = {(r["user_id"], int(r["window_start"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000), r["value"])
                for r in read_table(spark, spec.stages[0].output).collect()}
    assert sessions == {("u1", DAY0 + day - 20 * M, 1), ("u1", DAY0 + day - 3 * M, 2), ("u3", DAY0 + 600 * M, 1)}


def test_a_reset_then_a_full_run_equals_a_fresh_pipeline(spark):
    """After `dataflow reset --drop-outputs`, the next micro-batch reads the input from the
    start and leaves exactly what a new pipeline's first batch leaves (no write of the new
    life is skipped as a retry of the old one)."""
    from dataflow_core.spark.jobs.reset import reset_pipeline

    rows = to_rows(VIEWS)
    old = _billing(f"t_reset_{next(_names)}", AccumulationMode.RETRACTING)
    fresh = _billing(f"t_reset_fresh_{next(_names)}", AccumulationMode.RETRACTING)
    write_input(spark, old.input_table, [r for r in rows if r[5] < DAY0 + 8 * M])
    assert run_microbatch(spark, old.name, now=format_instant(DAY0 + 8 * M)).ledger_ok
    write_input(spark, old.input_table, [r for r in rows if r[5] >= DAY0 + 8 * M], mode="append")
    assert run_microbatch(spark, old.name, now=format_instant(DAY0 + 30 * M)).ledger_ok
    deleted = reset_pipeline(spark, old.name, drop_outputs=True)
    assert "stream checkpoint" in deleted and f"{old.name}__seen_ids" in deleted
    end = format_instant(DAY0 + 3 * 3600 * S)
    again = run_microbatch(spark, old.name, now=end)
    assert again.ledger_ok and again.ledger["read"] == len(rows), "the input is read again from the start"
    write_input(spark, fresh.input_table, rows)
    assert run_microbatch(spark, fresh.name, now=end).ledger_ok
    assert _tables(spark, old) == _tables(spark, fresh)


def test_new_rows_in_a_commit_that_rewrites_the_input_are_read(spark):
    """An overwrite of the input (what `dataflow generate` does by default) with the old rows
    and new ones, once the input's change data feed is on (turned on after the pipeline went
    live: the next batch reads past the version that did it, skipping change commits): the old
    rows are deleted and inserted again (retracted, then counted again), the new ones count. (Without the feed the stream skips such a commit: docs/spark-runner.md.)"""
    rows = to_rows(VIEWS)
    spec = _billing(f"t_rewrite_{next(_names)}", AccumulationMode.ACCUMULATING)
    first = [r for r in rows if r[5] < DAY0 + 8 * M]
    write_input(spark, spec.input_table, first)
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 8 * M)).ledger_ok
    spark.sql(f"ALTER TABLE delta.`{table_path(spark, spec.input_table)}` "
              "SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    said: list[str] = []  # the stream reads on past the version that turned the feed on
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 9 * M), progress=said.append).ledger_ok
    assert [m for m in said if "records its change data feed only since" in m], said
    write_input(spark, spec.input_table, rows, mode="overwrite")
    result = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 30 * M))
    assert result.ledger_ok, result.ledger
    assert result.ledger["read"] == result.ledger["inserts"] == len(rows), result.ledger
    assert result.ledger["deletes"] == len(first) and result.ledger["retracted"] == len({r[0] for r in first})
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 3 * 3600 * S)).ledger_ok  # early timers
    assert _results(spark, spec.stages[0]) == _sums(rows)


@pytest.mark.parametrize("mode", [AccumulationMode.RETRACTING, AccumulationMode.DISCARDING])
def test_going_live_after_a_backfill_continues_its_windows(spark, tmp_path, mode):
    """A batch backfill of May 1, then the first micro-batches over the same input, a late
    view for a backfilled window and newer input: the backfill's windows are taken over (its
    rows are duplicates, its panes keep their indexes), every window's pane log is one
    history (the pane gate passes over backfill and live runs), and the results equal a
    recomputation from the input."""
    from dataflow_core.quality.gates import gate_panes

    rows = to_rows(VIEWS)
    spec = _billing(f"t_golive_{mode.name.lower()}_{next(_names)}", mode)
    stage = spec.stages[0]
    before = [r for r in rows if r[5] < DAY0 + 8 * M]
    write_input(spark, spec.input_table, before)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 9 * M)).ledger_ok
    backfilled = _histories(spark, stage)
    newer = [(f"n{n}", "u4", ad, "29", DAY0 + 86_400 * S + n * 200 * S, DAY0 + 86_400 * S + n * 200 * S + 5 * S)
             for n, ad in enumerate(("ad1", "ad2", "ad1"))]
    write_input(spark, spec.input_table, [r for r in rows if r[5] >= DAY0 + 8 * M] + newer, mode="append")

    first = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 86_400 * S + 20 * M))
    assert first.ledger_ok
    assert first.ledger["duplicates"] >= len({r[0] for r in before}), "what the backfill counted is not counted again"
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 86_400 * S + 3 * 3600 * S)).ledger_ok
    everything = rows + newer
    if mode is not AccumulationMode.DISCARDING:
        assert _results(spark, stage) == _sums(everything)
    else:  # a discarding window's panes add up to its total
        totals: Counter = Counter()
        for (key, start), history in _histories(spark, stage).items():
            totals[(key[0], (start - DAY0) // (10 * M))] += sum(p.value for p in history if not p.retraction)
        assert dict(totals) == _sums(everything)
    histories = _histories(spark, stage)
    for window, history in histories.items():
        assert history_breaks(history) == [], (window, history)
        on_time = sum(p.timing.value == "ON_TIME" and not p.retraction for p in history)
        assert on_time == 1 if window in backfilled else on_time <= 1, (window, history)
    for window, panes in backfilled.items():  # the live panes continue the backfill's
        assert histories[window][: len(panes)] == panes
    late_window = (("ad1",), DAY0)
    assert len(histories[late_window]) > len(backfilled[late_window]), "the late view corrected a backfilled window"
    outcome = gate_panes(spark, stage, None, "t-golive", spec.name, docs_dir=tmp_path)
    assert outcome.success, outcome.summary()


def test_going_live_after_a_backfill_of_two_stages_with_sessions(spark):
    """Sessions (retracting) feeding a global count per ad: after a backfill of the first
    arrivals, micro-batches over the rest (rows that merge backfilled sessions among them)
    take both stages over; each stage's results equal the reference runner's over the whole
    input, and every window's pane log is one history."""
    from tests.integration.test_backfill import sessions_pipeline
    from tests.integration.test_microbatch import VIEWS as SESSION_VIEWS

    rows = to_rows(SESSION_VIEWS)
    spec = sessions_pipeline(f"t_golive2_{next(_names)}", f"t_golive2_in_{next(_names)}")
    first = [r for r in rows if r[5] < DAY0 + 300 * S]
    write_input(spark, spec.input_table, first)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 5 * M)).ledger_ok
    write_input(spark, spec.input_table, [r for r in rows if r[5] >= DAY0 + 300 * S], mode="append")
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 20 * M)).ledger_ok
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 3 * 3600 * S)).ledger_ok
    want = reference_results(spec, rows)
    for stage in spec.stages:
        assert results_of(spark, stage) == want[stage.output], stage.output
        for (key, _), panes in _histories(spark, stage).items():  # a session that grew is another window
            for window in {p.window for p in panes}:
                history = [p for p in panes if p.window == window]
                assert history_breaks(history) == [], (stage.output, key, window, history)


def _assert_plan_forgotten_in_the_log(spark, stage) -> None:
    """The plan table is partitioned by run: the finished run's plan is gone, dropped by a
    DELETE that read and rewrote no file (a partition's files removed in the log)."""
    from dataflow_core.spark.platform.tables import commit_info, snapshot_version, table_path
    from dataflow_core.spark.sinks.corrections_plan import plan_table

    path = table_path(spark, plan_table(stage))
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    assert detail["partitionColumns"] == ["run_id"] and detail["numFiles"] == 0
    forgot = commit_info(spark, path, snapshot_version(spark, path))
    metrics = forgot["operationMetrics"]
    assert forgot["operation"] == "DELETE" and int(metrics["numRemovedFiles"]) >= 1
    assert "numCopiedRows" not in metrics and "numAddedFiles" not in metrics, metrics  # no file read or written
