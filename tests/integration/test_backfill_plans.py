"""A backfill previewed, then applied or rejected (issue 51): `--plan-only` changes no
output table, `plan show` prints what the apply then does (the tables after the apply
minus before equal the diff, on a two-stage pipeline with retractions), `--apply` applies
once, a stale plan is refused with one line naming what changed, `--reject` changes nothing."""

from __future__ import annotations

import pytest

from dataflow_core.cli import main
from dataflow_core.errors import DataflowError
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.cli.plan import plan_lines
from dataflow_core.spark.jobs.plan_diff import plan_diff, plan_record
from dataflow_core.spark.jobs.plans import apply_plan
from dataflow_core.spark.platform.delta import table_version
from dataflow_core.spark.platform.tables import read_table
from dataflow_core.spark.sinks.corrections_plan import plan_table
from dataflow_core.spark.sinks.pipeline_lock import pipeline_tables
from dataflow_core.spark.sinks.runs import APPLIED, PLANNED, REJECTED, plan_state
from tests.integration.test_backfill import DAY0, M, billing_pipeline, ms, sessions_pipeline, write_input

RANGE = ("2024-05-01", "2024-05-02")


def _outputs(spark, spec) -> dict[str, int]:
    """The version of every table of the pipeline but its plans."""
    plans = {plan_table(s) for s in spec.stages}
    return {t: table_version(spark, t) for t in pipeline_tables(spec) if t not in plans}


def _results(spark, stage) -> dict[tuple, int]:
    return {(tuple(r[k] for k in stage.key_columns), ms(r["window_start"]), ms(r["window_end"])): r["value"]
            for r in read_table(spark, stage.output).collect()}


def _no_new_spark(monkeypatch) -> None:
    """`dataflow plan show` reads the plan's files: asking for a Spark session fails the test."""
    import dataflow_core.spark.platform.session as session

    def refuse(*args, **kwargs):
        raise AssertionError("dataflow plan show asked for a Spark session")

    monkeypatch.setattr(session, "get_spark", refuse)


def test_a_plan_changes_nothing_shows_what_its_apply_does_and_applies_once(spark, warehouse, capsys, monkeypatch):
    spec = sessions_pipeline("t_plan_two", "t_plan_two_in")
    rows = [("a", "u1", "ad1", "1", DAY0, DAY0 + 1000), ("b", "u1", "ad1", "1", DAY0 + M, DAY0 + M + 1000),
            ("c", "u1", "ad1", "1", DAY0 + 7 * M, DAY0 + 7 * M + 1000),
            ("d", "u1", "ad1", "1", DAY0 + 8 * M, DAY0 + 8 * M + 1000),
            ("g", "u2", "ad2", "4", DAY0 + 30 * M, DAY0 + 30 * M + 1000)]
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, spec.name, *RANGE, now="2024-05-01T12:00:00Z")
    # Late: a view bridging u1's two sessions (retracted, one 5-view session), one new session.
    write_input(spark, spec.input_table, [("e", "u1", "ad1", "1", DAY0 + 4 * M, DAY0 + 600 * M),
                                          ("f", "u3", "ad2", "2", DAY0 + 50 * M, DAY0 + 600 * M)], mode="append")
    before = _outputs(spark, spec)
    planned = run_backfill(spark, spec.name, *RANGE, now="2024-05-01T13:00:00Z", plan_only=True)
    assert _outputs(spark, spec) == before, "a plan must not commit to any table but its plans"
    assert plan_state(spark, planned.run_id).status == PLANNED

    state, diffs = plan_diff(spark, planned.run_id, spec.name)  # with Spark, as the approval task reads it
    with monkeypatch.context() as guard:
        _no_new_spark(guard)
        assert main(["plan", "show", planned.run_id, "--warehouse", str(warehouse)]) == 0
    shown = capsys.readouterr().out
    for stage in spec.stages:
        assert f"stage {stage.output}:" in shown, shown
    assert "(deleted)" in shown and "sum of changes per key" in shown and "windows change (" in shown, shown
    assert shown.splitlines() == plan_lines(plan_record(state), diffs), "the files say what Spark reads"
    previewed = {d.stage: {(c.key, c.window_start, c.window_end): (c.old, c.new) for c in d.changes
                           if c.old != c.new} for d in diffs}
    assert sum(c.retractions for d in diffs for c in d.changes) == planned.ledger["retractions"] == 2

    then = {s.output: _results(spark, s) for s in spec.stages}
    applied = apply_plan(spark, spec.name, planned.run_id, decided_by="alice")
    for stage in spec.stages:
        now = _results(spark, stage)
        changed = {w: (then[stage.output].get(w), now.get(w)) for w in then[stage.output].keys() | now.keys()
                   if then[stage.output].get(w) != now.get(w)}
        assert changed == previewed[stage.output], stage.output
    assert applied.ledger["per_stage"] == planned.ledger["per_stage"]
    assert plan_state(spark, planned.run_id).decided_by == "alice"
    with monkeypatch.context() as guard:
        _no_new_spark(guard)
        assert main(["plan", "show", planned.run_id, "--warehouse", str(warehouse)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"run {planned.run_id} was applied by alice at " in err[0], err

    done = _outputs(spark, spec)
    assert main(["backfill", "--pipeline", spec.name, "--apply", planned.run_id, "--warehouse", str(warehouse)]) == 0
    assert f"run {planned.run_id} was already applied by alice" in capsys.readouterr().out
    assert _outputs(spark, spec) == done, "a second --apply changes nothing"


def test_a_stale_plan_is_refused_in_one_line_and_a_rejected_one_changes_nothing(spark, warehouse, capsys):
    spec = billing_pipeline("t_plan_stale", "t_plan_stale_in")
    t = DAY0 + 3 * M
    write_input(spark, spec.input_table, [("a", "u1", "ad1", "5", t, t + 1000)])
    run_backfill(spark, spec.name, *RANGE, now="2024-05-01T12:00:00Z")
    late = ("b", "u2", "ad1", "7", t, t + 600 * M)
    write_input(spark, spec.input_table, [late], mode="append")
    first = run_backfill(spark, spec.name, *RANGE, now="2024-05-01T13:00:00Z", plan_only=True)
    write_input(spark, spec.input_table, [("c", "u2", "ad2", "1", t, t + 700 * M)], mode="append")
    wh = ["--warehouse", str(warehouse)]
    assert main(["backfill", "--pipeline", spec.name, "--apply", first.run_id, *wh]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"input table {spec.input_table} changed" in err[0], err
    assert plan_state(spark, first.run_id).status == REJECTED

    second = run_backfill(spark, spec.name, *RANGE, now="2024-05-01T14:00:00Z", plan_only=True)
    run_backfill(spark, spec.name, *RANGE, now="2024-05-01T15:00:00Z")  # writes the outputs the plan was made from
    with pytest.raises(DataflowError, match=f"output table {spec.stages[0].output} changed"):
        apply_plan(spark, spec.name, second.run_id)

    write_input(spark, spec.input_table, [("d", "u3", "ad1", "2", t, t + 800 * M)], mode="append")
    third = run_backfill(spark, spec.name, *RANGE, now="2024-05-01T16:00:00Z", plan_only=True)
    before = _outputs(spark, spec)
    assert main(["backfill", "--pipeline", spec.name, "--reject", third.run_id, "--decided-by", "bob", *wh]) == 0
    assert _outputs(spark, spec) == before
    state = plan_state(spark, third.run_id)
    assert (state.status, state.decided_by) == (REJECTED, "bob")
    assert main(["backfill", "--pipeline", spec.name, "--apply", third.run_id, *wh]) == 0
    assert f"run {third.run_id} was already rejected by bob" in capsys.readouterr().out
    assert _outputs(spark, spec) == before
    assert main(["plan", "show", "backfill-nosuchrun", *wh]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no planned backfill run 'backfill-nosuchrun'" in err[0], err
    assert APPLIED not in {plan_state(spark, r.run_id).status for r in (first, second, third)}


def test_a_plan_stays_applicable_after_micro_batches_of_other_hours_and_an_optimize(spark, warehouse):
    """Only a change to the rows a plan was diffed against stales it: a live micro-batch of
    the next day's hours (input, pane log, results, state and seen ids all move) and an
    OPTIMIZE of the results leave a plan of the first day applicable."""
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.tables import table_path

    spec = billing_pipeline("t_plan_live", "t_plan_live_in")
    t, day2 = DAY0 + 3 * M, DAY0 + 24 * 60 * M
    write_input(spark, spec.input_table, [("a", "u1", "ad1", "5", t, t + 1000),
                                          ("w", "u1", "ad2", "1", day2 + 120 * M, day2 + 120 * M + 1000)])
    run_microbatch(spark, spec.name, now="2024-05-02T03:00:00Z")  # every window of May 1 closed and collected
    # Too late for the live run: dropped live, counted by a backfill.
    write_input(spark, spec.input_table, [("b", "u2", "ad1", "7", t, day2 + 210 * M)], mode="append")
    run_microbatch(spark, spec.name, now="2024-05-02T04:00:00Z")
    plan = run_backfill(spark, spec.name, *RANGE, now="2024-05-02T04:30:00Z", plan_only=True)

    later = day2 + 300 * M
    write_input(spark, spec.input_table, [("c", "u3", "ad1", "3", later, later + 1000)], mode="append")
    before = _outputs(spark, spec)
    run_microbatch(spark, spec.name, now="2024-05-02T06:00:00Z")
    moved = {t for t, v in _outputs(spark, spec).items() if v != before[t]}
    assert {spec.stages[0].output, f"{spec.stages[0].output}_panes"} <= moved, moved
    spark.sql(f"OPTIMIZE delta.`{table_path(spark, spec.stages[0].output)}`")

    apply_plan(spark, spec.name, plan.run_id, decided_by="carol")
    assert plan_state(spark, plan.run_id).status == APPLIED
    results = _results(spark, spec.stages[0])
    assert results[(("ad1",), DAY0, DAY0 + 10 * M)] == 12, results
    assert results[(("ad2",), day2 + 120 * M, day2 + 130 * M)] == 1, "the live windows stand"
