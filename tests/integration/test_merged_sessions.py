"""The results table holds the current windows in every accumulation mode: an accumulating
mean over sessions, whose sessions later merge (late views bridge them), leaves in its
results table exactly the sessions an independent pandas recomputation finds, through a
replay backfill, through micro-batches and through a batch backfill that corrects earlier
results; the pane log keeps the accumulating history (no retraction), and the results gate
passes. A discarding sum over sessions whose parts had fired holds, on the same three paths,
each session's whole sum (its own panes and those of the sessions it absorbed), and the
gates pass."""

from __future__ import annotations

import itertools

import pandas as pd

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import MeanFn, SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import Sessions
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.quality.gates import gate_outputs
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table
from tests.integration.test_backfill import DAY0, M, ms, write_input
from tests.integration.test_microbatch import batches_of

GAP = 5 * M
_names = itertools.count()
S = 1000
# (event id, user, ad, value, event s, ingest delay s): u1/ad1's sessions at 0-1 min and 8-9 min
# fire early, then a view at 4.5 min arrives 25 min late and bridges them (and its duplicate);
# u1/ad2's three sessions are bridged one by one; u2/ad1's session stays alone.
VIEWS = [
    ("a1", "u1", "ad1", 2, 0, 1), ("a2", "u1", "ad1", 4, 60, 1), ("a3", "u1", "ad1", 6, 480, 1),
    ("a4", "u1", "ad1", 8, 540, 2), ("a5", "u1", "ad1", 10, 270, 1500), ("a5", "u1", "ad1", 10, 270, 1530),
    ("b1", "u1", "ad2", 1, 100, 1), ("b2", "u1", "ad2", 3, 500, 1), ("b3", "u1", "ad2", 5, 900, 1),
    ("b4", "u1", "ad2", 7, 330, 700), ("b5", "u1", "ad2", 9, 720, 1400),
    ("c1", "u2", "ad1", 5, 30, 5), ("c2", "u2", "ad1", 7, 200, 5),
]


def _rows(views=VIEWS) -> list[tuple]:
    return [(e, u, a, str(v), DAY0 + t * S, DAY0 + (t + d) * S) for e, u, a, v, t, d in views]


def _pipeline() -> PipelineSpec:
    name = f"t_merge_{next(_names)}"
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"user_id": "user_id", "ad_id": "ad_id"},
        value="try_cast(v AS DOUBLE)", quality_suite=None, partition_column=None,
        watermark=lambda: HeuristicWatermark(bound=2 * M),
        stages=(StageSpec(f"{name}_s", WindowingStrategy(
            Sessions(GAP), AfterWatermark(early=AlignedProcessingTime(M), late=AfterCount(1)),
            AccumulationMode.ACCUMULATING, parse_duration("1d"), MeanFn()), ("user_id", "ad_id"), "double"),),
    ))


def pandas_sessions(rows: list[tuple]) -> dict[tuple, float]:
    """Sessions recomputed with pandas alone: each event once (its first delivery), a key's
    events sorted by time, a new session wherever the next event is a gap or more after the
    last; a session spans [first, last + gap) and its value is the mean."""
    df = pd.DataFrame(rows, columns=["event_id", "user_id", "ad_id", "v", "t", "ingest"])
    df = df.sort_values("ingest").drop_duplicates("event_id").sort_values(["user_id", "ad_id", "t"])
    df["v"] = df["v"].astype(float)
    df["new"] = df.groupby(["user_id", "ad_id"])["t"].diff().fillna(GAP) >= GAP
    df["session"] = df.groupby(["user_id", "ad_id"])["new"].cumsum()
    out = df.groupby(["user_id", "ad_id", "session"]).agg(first=("t", "min"), latest=("t", "max"), mean=("v", "mean"))
    return {(u, a, int(r["first"]), int(r["latest"]) + GAP): round(float(r["mean"]), 9)
            for (u, a, _), r in out.iterrows()}


def results(spark, spec: PipelineSpec) -> dict[tuple, float]:
    return {(r["user_id"], r["ad_id"], ms(r["window_start"]), ms(r["window_end"])): round(r["value"], 9)
            for r in read_table(spark, spec.stages[0].output).collect()}


def _check(spark, spec: PipelineSpec, rows: list[tuple]) -> None:
    expected = pandas_sessions(rows)
    assert len(expected) == 3, "the late views must merge the sessions they bridge"
    assert results(spark, spec) == expected
    log = read_table(spark, f"{spec.stages[0].output}_panes")
    assert log.where("is_retraction").count() == 0, "accumulating mode emits no retraction"
    windows = {(r["user_id"], r["ad_id"], ms(r["window_start"]), ms(r["window_end"])) for r in log.collect()}
    assert len(windows) > len(expected), "sessions that later merged emitted panes of their own"
    outcomes = gate_outputs(spark, spec, None, f"gate-{spec.name}", say=lambda _m: None)
    assert [o.gate for o in outcomes] == ["panes", "results"] and all(o.success for o in outcomes), \
        [o.summary() for o in outcomes]


def test_a_replay_backfill_keeps_only_the_current_sessions(spark):
    spec, rows = _pipeline(), _rows()
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", replay=True, batch_interval="4m")
    _check(spark, spec, rows)


def test_micro_batches_keep_only_the_current_sessions(spark):
    spec, rows = _pipeline(), _rows()
    for n, (end, batch) in enumerate(batches_of(rows)):
        if batch:
            write_input(spark, spec.input_table, batch, mode="overwrite" if n == 0 else "append")
        if n or batch:
            assert run_microbatch(spark, spec.name, now=format_instant(end)).ledger_ok
    _check(spark, spec, rows)


def test_a_batch_backfill_that_merges_standing_sessions_deletes_them(spark):
    """A first backfill sees the sessions apart; the bridging views arrive; the second backfill
    recomputes merged sessions and deletes the standing ones they absorbed."""
    spec, rows = _pipeline(), _rows()
    bridges = {"a5", "b4", "b5"}
    write_input(spark, spec.input_table, [r for r in rows if r[0] not in bridges])
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert len(results(spark, spec)) == 6
    write_input(spark, spec.input_table, [r for r in rows if r[0] in bridges], mode="append")
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T13:00:00Z")
    _check(spark, spec, rows)


# --- discarding sums: a merged session's total takes in the panes of the sessions it absorbed


def _discarding_sums() -> PipelineSpec:
    name = f"t_merge_sum_{next(_names)}"
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"user_id": "user_id", "ad_id": "ad_id"},
        value="try_cast(v AS BIGINT)", quality_suite=None, partition_column=None,
        watermark=lambda: HeuristicWatermark(bound=2 * M),
        stages=(StageSpec(f"{name}_s", WindowingStrategy(
            Sessions(GAP), AfterWatermark(early=AlignedProcessingTime(M), late=AfterCount(1)),
            AccumulationMode.DISCARDING, parse_duration("1d"), SumFn()), ("user_id", "ad_id"), "bigint"),),
    ))


def pandas_session_sums(rows: list[tuple]) -> dict[tuple, int]:
    """`pandas_sessions`' sessions, each with the sum of its values."""
    means = pandas_sessions(rows)
    df = pd.DataFrame(rows, columns=["event_id", "user_id", "ad_id", "v", "t", "ingest"])
    df = df.sort_values("ingest").drop_duplicates("event_id")
    return {(u, a, s, e): int(df[(df.user_id == u) & (df.ad_id == a) & (df.t >= s) & (df.t < e)]["v"].astype(int).sum())
            for (u, a, s, e) in means}


def _check_sums(spark, spec: PipelineSpec, rows: list[tuple]) -> None:
    expected = pandas_session_sums(rows)
    assert len(expected) == 3
    got = {k: int(v) for k, v in results(spark, spec).items()}
    assert got == expected
    log = read_table(spark, f"{spec.stages[0].output}_panes")
    assert log.where("replaces IS NOT NULL").count() > 0, "sessions that had fired must merge"
    outcomes = gate_outputs(spark, spec, None, f"gate-{spec.name}", say=lambda _m: None)
    assert all(o.success for o in outcomes), [o.summary() for o in outcomes]


def test_a_discarding_sum_over_merged_sessions_counts_the_absorbed_sessions_panes_in_a_replay(spark):
    """The merged session's own discarding panes hold only what its parts' panes did not
    (Beam's rule); its results row is the session's whole sum all the same."""
    spec, rows = _discarding_sums(), _rows()
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", replay=True, batch_interval="4m")
    _check_sums(spark, spec, rows)


def test_a_discarding_sum_over_merged_sessions_counts_the_absorbed_sessions_panes_in_micro_batches(spark):
    spec, rows = _discarding_sums(), _rows()
    for n, (end, batch) in enumerate(batches_of(rows)):
        if batch:
            write_input(spark, spec.input_table, batch, mode="overwrite" if n == 0 else "append")
        if n or batch:
            assert run_microbatch(spark, spec.name, now=format_instant(end)).ledger_ok
    _check_sums(spark, spec, rows)


def test_a_batch_backfill_merging_standing_discarding_sessions_nets_to_their_sum(spark):
    """A correction that merges standing sessions carries the difference from their totals
    together: the results hold the session's sum and the pane log nets to it (the gates)."""
    spec, rows = _discarding_sums(), _rows()
    bridges = {"a5", "b4", "b5"}
    write_input(spark, spec.input_table, [r for r in rows if r[0] not in bridges])
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    write_input(spark, spec.input_table, [r for r in rows if r[0] in bridges], mode="append")
    run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-01T13:00:00Z")
    _check_sums(spark, spec, rows)
