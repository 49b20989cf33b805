"""Micro-batches on Spark and Delta: the same arrivals split into micro-batches give the
arrival-order replay's pane history; a run stopped dead at a commit point followed by the
same run leaves the tables of an uninterrupted run; duplicates count once across batches."""

from __future__ import annotations

import itertools
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

from dataflow_core.model.time import format_instant
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table, table_exists
from tests.integration.test_backfill import (
    DAY0, M, billing_pipeline, reference_results, results_of, sessions_pipeline, to_rows, write_input,
)

_names = itertools.count()
INTERVAL = 4 * M
# Two users and ads, ingest delays from seconds to 15 minutes, a duplicate delivered 45 s
# later (often in the next batch), a late view that merges two sessions.
VIEWS = [("u1", "ad1", 1, 10, 5, True), ("u1", "ad1", 1, 200, 30, False), ("u2", "ad1", 1, 90, 1, True),
         ("u1", "ad2", 1, 400, 100, False), ("u1", "ad1", 1, 640, 5, False), ("u1", "ad1", 1, 430, 400, False),
         ("u2", "ad1", 1, 700, 30, False), ("u2", "ad2", 1, 720, 5, True)]


def batches_of(rows):
    t0 = min(r[5] for r in rows)
    t0 -= t0 % INTERVAL
    last = (max(r[5] for r in rows) - t0) // INTERVAL
    return [(t0 + (b + 1) * INTERVAL, [r for r in rows if (r[5] - t0) // INTERVAL == b]) for b in range(last + 1)]


def history(spark, table: str) -> Counter:
    drop = {"run_id", "pane_id"}
    def hashable(v):  # a pane's `replaces` is a list of windows
        return tuple(v) if isinstance(v, list) else v

    return Counter(tuple(hashable(v) for k, v in r.asDict().items() if k not in drop)
                   for r in read_table(spark, table).collect())


def test_micro_batches_equal_the_replay_with_the_same_batch_boundaries(spark):
    rows = to_rows(VIEWS)
    replayed = sessions_pipeline(f"t_mb_replay_{next(_names)}", "t_mb_replay_in")
    write_input(spark, replayed.input_table, rows)
    run_backfill(spark, replayed.name, "2024-05-01", "2024-05-02", replay=True, batch_interval="4m")

    live = sessions_pipeline(f"t_mb_live_{next(_names)}", "t_mb_live_in")
    totals = Counter()
    for n, (end, batch) in enumerate(batches_of(rows)):
        if batch:
            write_input(spark, live.input_table, batch, mode="overwrite" if n == 0 else "append")
        result = run_microbatch(spark, live.name, now=format_instant(end))
        assert result.ledger_ok
        totals.update({k: result.ledger[k] for k in ("read", "duplicates", "accepted")})
    assert totals["read"] == len(rows) and totals["duplicates"] == len(rows) - len(VIEWS)
    for a, b in zip(replayed.stages, live.stages):
        assert history(spark, f"{b.output}_panes") == history(spark, f"{a.output}_panes"), b.output
        assert history(spark, b.output) == history(spark, a.output)
    log = read_table(spark, f"{live.stages[0].output}_panes")
    assert log.where("is_retraction").count() > 0, "the late view must merge sessions"
    read_table(spark, f"{live.stages[0].output}__state")  # registers it for SQL
    state = spark.sql(f"SELECT user_id, ad_id, w.window_start, w.next_timer FROM {live.stages[0].output}__state "
                      "LATERAL VIEW explode(windows) AS w")
    assert state.count() > 0, "open windows are queryable in the state table"


CRASH_TABLES = ("t_crash__quarantine", "t_crash_s_panes", "t_crash_s", "t_crash_short_panes", "t_crash_short",
                "t_crash_s__state")


@contextmanager
def in_warehouse(spark, warehouse: Path):
    """Point the shared session at another warehouse for a while."""
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    before = spark.conf.get(WAREHOUSE_CONF)
    spark.conf.set(WAREHOUSE_CONF, str(warehouse))
    try:
        yield
    finally:
        spark.conf.set(WAREHOUSE_CONF, before)


def crash_tables(spark, warehouse: Path) -> dict[str, Counter]:
    """Each table's rows without what names a run (ids, batch numbers, pickled state bytes)."""
    out = {}
    for table in CRASH_TABLES:
        df = spark.read.format("delta").load(str(warehouse / table))
        cols = [c for c in df.columns if c not in ("run_id", "pane_id", "state", "batch", "quarantined_at")]
        out[table] = Counter(repr(tuple(r)) for r in df.select(*cols).collect())
    return out


# A point after each kind of commit of a micro-batch (claim, quarantine, seen ids, a stage's
# panes, results and state; the second stage's results are written as the first's are, and
# no commit comes between its state and before-finish).
POINTS = ["started", "quarantined", "deduplicated", "t_crash_s-panes", "t_crash_s-results", "t_crash_s-state",
          "t_crash_short-panes", "before-finish"]


def test_a_micro_batch_stopped_after_each_commit_point_in_turn_then_run_again_leaves_the_uninterrupted_tables(
    spark, crash, tmp_path,
):
    """The input of three batches' arrivals (and a row to quarantine) as one micro-batch.
    The run stops dead right after each commit point in turn (`crash`, conftest.py), each
    attempt resuming what the one before left; the same command then runs to the end, and
    must leave the tables an uninterrupted run leaves. Real process deaths:
    test_microbatch_faults.py."""
    sessions_pipeline("t_crash", "t_crash_in")
    batches = batches_of(to_rows(VIEWS))[:3]
    now = format_instant(batches[-1][0])
    bad = ("e_bad", "u1", "ad1", "not a number", DAY0 + 100_000, DAY0 + 105_000)
    clean, warehouse = tmp_path / "clean", tmp_path / "crashed"
    for root in (clean, warehouse):
        with in_warehouse(spark, root):
            write_input(spark, "t_crash_in", [r for _, b in batches for r in b] + [bad])
    with in_warehouse(spark, clean):
        assert run_microbatch(spark, "t_crash", now=now).ledger_ok
    with in_warehouse(spark, warehouse):
        for point in POINTS:
            crash(point)
            with pytest.raises(SimulatedCrash, match=point):
                run_microbatch(spark, "t_crash", now=now)
        crash(None)
        again = run_microbatch(spark, "t_crash", now=now)
        attempts = read_table(spark, "dataflow_batches").where("pipeline = 't_crash' AND status = 'started'")
        assert sorted(r["attempt"] for r in attempts.collect()) == list(range(len(POINTS) + 1))
    assert again.ledger_ok, again.ledger
    got, want = crash_tables(spark, warehouse), crash_tables(spark, clean)
    for table in CRASH_TABLES:
        assert got[table] == want[table], table


def test_a_backfill_corrects_live_results_and_later_batches_carry_on_from_the_corrected_state(spark):
    """Live batch 1; then the input is fixed (a bot view deleted, which the stream skips)
    and views are appended that the stream has yet to deliver; a backfill corrects the
    results; live batch 2 delivers the appended views (already counted: duplicates now) and
    new ones that extend a corrected session. Both stages must end as the reference runner
    says over the final input: a stale live state would still count the deleted view, and one that
    forgot the backfill's event ids would count the appended views twice."""
    from dataflow_core.spark.platform.tables import table_path

    n = next(_names)
    live = sessions_pipeline(f"t_mb_fix_{n}", f"t_mb_fix_in_{n}")
    views = [  # user, ad, v, event s, ingest delay s, twice; the batch it belongs to
        (("u1", "ad1", 1, 60, 5, False), 1), (("u1", "ad1", 1, 120, 5, False), 1), (("u1", "ad1", 1, 200, 5, False), 1),
        (("u1", "ad1", 1, 900, 5, False), 1), (("u2", "ad2", 1, 300, 5, False), 1), (("u2", "ad1", 1, 310, 5, False), 1),
        (("u1", "ad1", 1, 400, 1500, False), 2), (("u1", "ad1", 1, 650, 1300, True), 2),
        (("u1", "ad1", 1, 1100, 1400, False), 3), (("u3", "ad1", 1, 2000, 100, False), 3),
    ]
    rows = to_rows([v for v, _ in views])
    part = {f"e{i}": b for i, (_, b) in enumerate(views)}
    bot = "e2"  # u1's view at 200 s: deleted from the input after batch 1
    write_input(spark, live.input_table, [r for r in rows if part[r[0]] == 1])
    said: list[str] = []
    first = run_microbatch(spark, live.name, now=format_instant(DAY0 + 1800_000), progress=said.append)
    assert first.ledger_ok and first.ledger["accepted"] == 6
    assert [m for m in said if "no change data feed" in m and "delta.enableChangeDataFeed = true" in m], \
        "without the feed the first batch says once how to correct deletes live"
    spark.sql(f"DELETE FROM delta.`{table_path(spark, live.input_table)}` WHERE event_id = '{bot}'")
    write_input(spark, live.input_table, [r for r in rows if part[r[0]] == 2], mode="append")
    fixed = run_backfill(spark, live.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 2400_000))
    assert fixed.ledger_ok and fixed.ledger["retractions"] > 0
    write_input(spark, live.input_table, [r for r in rows if part[r[0]] == 3], mode="append")
    said.clear()
    from dataflow_core.spark.jobs import live_stream

    live_stream._told.discard(live.name)  # as in a process of its own (a CLI run, an Airflow task)
    second = run_microbatch(spark, live.name, now=format_instant(DAY0 + 3000_000), progress=said.append)
    assert second.ledger_ok, second.ledger
    assert not [m for m in said if "no change data feed" in m], "said once, by the pipeline's first batch"
    # The stream skips the DELETE's commit (skipChangeCommits); the 3 appended views the
    # backfill counted are duplicates; only the 2 new views are accepted.
    assert (second.ledger["read"], second.ledger["duplicates"], second.ledger["accepted"]) == (5, 3, 2), second.ledger
    run_microbatch(spark, live.name, now=format_instant(DAY0 + 7200_000))  # a tick: due timers fire

    want = reference_results(live, [r for r in rows if r[0] != bot])
    for stage in live.stages:
        assert results_of(spark, stage) == want[stage.output], stage.output
    log = read_table(spark, f"{live.stages[0].output}_panes")
    # batch 1 is the backfill's lock on the pipeline; batch 2 is the next micro-batch
    merged = log.where("user_id = 'u1' AND is_retraction AND run_id = 'batch-2'").select("value").collect()
    assert [r["value"] for r in merged] == [5], "batch 2 retracts the backfill's pane (views at 60, 120, 400, 650, 900 s)"


def test_loop_keeps_one_query_and_its_batches_equal_single_runs_at_the_same_times(spark):
    """`--loop`: one streaming query (processing-time trigger) takes every batch, ticks come
    between when an interval brings no input, and the tables are exactly those that single
    runs leave given the same slices of input at the same processing times."""
    import threading
    import time

    from dataflow_core.spark.jobs.microbatch import run_loop
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF
    from tests.integration.test_backfill import billing_pipeline

    n = next(_names)
    # Early panes every 2 s of the clock: a tick after each slice has timers due within seconds.
    loop = billing_pipeline(f"t_loop_{n}", f"t_loop_in_{n}", early=2_000)
    # Views of two ads, one delivered twice; the second slice's move the watermark past the
    # first 10-minute windows, so their on-time panes fire.
    rows = to_rows([("u1", "ad1", 1, 10, 5, True), ("u2", "ad1", 2, 90, 1, False), ("u1", "ad2", 3, 200, 30, False),
                    ("u1", "ad1", 4, 700, 5, False), ("u2", "ad2", 5, 760, 5, True)])
    slices = [rows[:4], rows[4:]]
    # The test's own writes go through a session of their own: the loop sets idempotent-write
    # settings on its session for its MERGEs, which a concurrent write must not pick up.
    writer = spark.newSession()
    writer.conf.set(WAREHOUSE_CONF, spark.conf.get(WAREHOUSE_CONF))
    write_input(writer, loop.input_table, slices[0])
    results, errors, stop = [], [], threading.Event()

    def run() -> None:
        try:
            run_loop(spark, loop.name, 1.0, on_result=results.append, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    def wait_for(what: str, done) -> None:
        deadline = time.monotonic() + 240
        while not done():
            assert not errors, errors
            assert thread.is_alive(), "the loop stopped by itself"
            assert time.monotonic() < deadline, f"no {what} after 240 s; batches so far: {results}"
            time.sleep(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for("first batch", lambda: sum(r.ledger["read"] for r in results) == len(slices[0]))
        write_input(writer, loop.input_table, slices[1], mode="append")
        wait_for("second batch", lambda: sum(r.ledger["read"] for r in results) == len(slices[0]) + len(slices[1]))
        after = len(results)
        wait_for("tick", lambda: len(results) > after)
    finally:
        stop.set()
        thread.join(180)
    assert not errors, errors
    assert not thread.is_alive()
    assert all(r.ledger_ok for r in results), results

    batches = read_table(spark, "dataflow_batches").where(f"pipeline = '{loop.name}' AND status = 'finished'")
    done = batches.orderBy("batch").select("stream_batch", "now_ms", "stream_id").collect()
    streamed = [r for r in done if r["stream_batch"] is not None]
    assert len(streamed) == 2 and len({r["stream_id"] for r in streamed}) == 1, done
    assert done[-1]["stream_batch"] is None, "a tick after the input"

    single = billing_pipeline(f"t_loop_single_{n}", f"t_loop_single_in_{n}", early=2_000)
    write_input(spark, single.input_table, [])
    for r in done:
        if r["stream_batch"] is not None:
            write_input(spark, single.input_table, slices[r["stream_batch"]], mode="append")
        assert run_microbatch(spark, single.name, now=format_instant(r["now_ms"])).ledger_ok
    for a, b in zip(loop.stages, single.stages):
        assert history(spark, f"{a.output}_panes") == history(spark, f"{b.output}_panes"), a.output
        assert history(spark, a.output) == history(spark, b.output)
    assert history(spark, f"{loop.stages[0].output}_panes"), "the loop wrote panes"


def test_without_input_a_batch_is_made_only_when_something_is_due(spark):
    """A run that finds no new input makes a tick only when a key has a timer or watermark
    deadline due (or the watermark would move): before the early panes' timers come due it
    writes nothing, not even a batch record; after, its tick fires them."""
    from tests.integration.test_backfill import billing_pipeline

    n = next(_names)
    spec = billing_pipeline(f"t_tick_{n}", f"t_tick_in_{n}")  # early panes at 2-minute marks
    write_input(spark, spec.input_table, to_rows([("u1", "ad1", 1, 10, 5, False), ("u2", "ad2", 2, 90, 1, False)]))
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 100_000)).ledger_ok

    def finished() -> list:
        return read_table(spark, "dataflow_batches").where(
            f"pipeline = '{spec.name}' AND status = 'finished'").select("batch", "now_ms").collect()

    before, panes = finished(), f"{spec.stages[0].output}_panes"
    assert not table_exists(spark, panes), "no pane yet"
    tracker, group = spark.sparkContext.statusTracker(), f"idle-{n}"
    spark.sparkContext.setJobGroup(group, "idle ticks")
    try:  # the first look after a batch reads the new state version on the driver (delta-rs); the next
        # one, with the state as it was, reads nothing (a --loop asks every interval)
        idle = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 110_000))  # timers at DAY0 + 2 min
        again = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 115_000))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert idle.ledger_ok and idle.ledger["panes"] == 0 and again.ledger["panes"] == 0
    assert finished() == before, "an idle tick records no batch"
    assert not table_exists(spark, panes)
    assert tracker.getJobIdsForGroup(group) == [], "an idle tick runs no Spark job"
    due = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 2 * M + 1))
    assert due.ledger_ok and due.ledger["panes"] == 2, due.ledger  # one early pane per ad
    assert len(finished()) == len(before) + 1 and len(history(spark, panes)) == 2


@pytest.mark.parametrize("args, says", [
    (["--loop", "0s"], "--loop: '0s' is no interval"),
    (["--loop", "1m", "--now", "2024-05-01T00:00:00Z"], "--loop runs on the clock; leave out --now"),
])
def test_loop_refuses_what_it_cannot_do_before_starting_spark(capsys, args, says):
    from dataflow_core.cli import main

    assert main(["microbatch", "--pipeline", "billing", *args]) == 2
    assert says in capsys.readouterr().err


def test_a_micro_batch_holds_its_query_settings_for_its_own_run_unless_spark_is_configured_with_them(
    spark, monkeypatch,
):
    """A run holds `MICRO_BATCH_SQL` (interpreted queries) while it runs and `COMPILED_SQL`
    (Spark's code generation) around its queries over tables that grow with history: the
    input's check against the seen ids, in the session of the stream's rows, and the results
    MERGE. Each setting holds only where the Spark configuration says nothing (the suite's
    spark-defaults.conf gives both code-generation settings, and its values stay), and the
    session is left as it was."""
    from dataflow_core.spark.jobs import live_input, live_stage, microbatch
    from dataflow_core.spark.platform import aggregates, session
    from tests.integration.test_backfill import billing_pipeline

    given = spark.sparkContext.getConf()
    assert all(given.contains(k) for k in session.MICRO_BATCH_SQL), "the suite configures both"
    # Values other than the suite's, so that keeping the suite's shows; and a key it leaves out.
    fields = "spark.sql.codegen.maxFields"
    ours = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK", fields: "7"}
    compiled = {**ours, fields: "9"}
    assert set(session.MICRO_BATCH_SQL) < set(ours) and set(session.COMPILED_SQL) < set(compiled)
    assert all(spark.conf.get(k) != ours[k] for k in ours)
    monkeypatch.setattr(microbatch, "MICRO_BATCH_SQL", ours)
    monkeypatch.setattr(live_input, "COMPILED_SQL", compiled)
    monkeypatch.setattr(live_stage, "COMPILED_SQL", compiled)
    seen: dict[str, list[str]] = {"checks": [], "results": []}
    one_job, write_results = aggregates.one_job, live_stage.write_results

    def checking(*aggregates):  # the first of a batch's two: the input's counts and seen-ids check
        seen["checks"].append(aggregates[0].sparkSession.conf.get(fields))
        return one_job(*aggregates)

    def merging(spark_, *args, **kwargs):
        seen["results"].append(spark_.conf.get(fields))
        return write_results(spark_, *args, **kwargs)

    monkeypatch.setattr(aggregates, "one_job", checking)
    monkeypatch.setattr(live_stage, "write_results", merging)
    before = {k: spark.conf.get(k) for k in ours}
    n = next(_names)
    spec = billing_pipeline(f"t_conf_{n}", f"t_conf_in_{n}")
    write_input(spark, spec.input_table, to_rows([("u1", "ad1", 1, 10, 5, False)]))
    during: list[dict] = []
    for now in (DAY0 + 100_000, DAY0 + 2 * M + 1):  # the second fires an early pane
        result = run_microbatch(spark, spec.name, now=format_instant(now),
                                progress=lambda _m: during.append({k: spark.conf.get(k) for k in ours}))
        assert result.ledger_ok
    assert during and all(d == {**before, fields: "7"} for d in during), during
    assert seen["checks"][0] == "9" and set(seen["checks"][1:]) == {"7"}, seen  # then the stage's counts
    assert seen["results"] == ["9"], seen
    assert {k: spark.conf.get(k) for k in ours} == before


def test_going_live_over_a_history_reads_bounded_batches_or_from_the_version_given(spark, tmp_path):
    """The first micro-batch of a pipeline with a history of appends says how it reads: in
    batches of at most --max-bytes-per-batch (here one file each: every batch its own
    watermark, the ledger of all of them balanced and every row read once), or, from
    --starting-version V, only the commits from V on (the rows before are not read)."""
    from dataflow_core.spark.input.going_live import FirstRead

    rows = to_rows(VIEWS)
    parts = [rows[:3], rows[3:6], rows[6:]]
    for name, first in (("bounded", FirstRead(max_bytes="1b")), ("from_v1", FirstRead(starting_version=1))):
        spec = sessions_pipeline(f"t_going_live_{name}", f"t_going_live_{name}_in")
        with in_warehouse(spark, tmp_path / name):
            for n, part in enumerate(parts):
                write_input(spark, spec.input_table, part, mode="overwrite" if n == 0 else "append")
            said: list[str] = []
            result = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 60 * M), progress=said.append,
                                    first_read=first)
            assert result.ledger_ok
            going = [m for m in said if m.startswith("going live")]
            assert len(going) == 1, said
            batches = read_table(spark, "dataflow_batches").where(
                f"pipeline = '{spec.name}' AND status = 'finished' AND stream_batch IS NOT NULL").count()
            if name == "bounded":
                assert "oldest files first" in going[0] and batches > 1, (going, batches)
                assert result.ledger["read"] == len(rows)
            else:
                assert "after version 0, in commit order" in going[0], going
                assert result.ledger["read"] == len(rows) - len(parts[0])
            said.clear()
            run_microbatch(spark, spec.name, now=format_instant(DAY0 + 61 * M), progress=said.append, first_read=first)
            assert not [m for m in said if m.startswith("going live")], "the checkpoint says where to go on"


def test_a_micro_batch_commits_once_to_each_table_it_changes_and_twice_to_the_batch_log(spark, tmp_path):
    """The Delta commits of a warm micro-batch, counted per table from the tables' versions,
    so that no change adds one silently (each costs a Delta transaction, the larger part of a
    small batch's time): its claim and its `finished` record in `dataflow_batches`, then one
    each for the ids it accepts, its bad rows, its panes, its results and its state. A tick
    with nothing due commits nothing."""
    from dataflow_core.spark.platform.delta import table_version
    from dataflow_core.spark.sinks.pipeline_lock import pipeline_tables

    n = next(_names)
    spec = billing_pipeline(f"t_commits_{n}", f"t_commits_in_{n}")
    stage = spec.stages[0]
    names = ["dataflow_batches", "dataflow_runs", "dataflow_watermarks", *pipeline_tables(spec)]
    t = DAY0 + 3 * M

    def commits(run) -> dict[str, int]:
        before = {name: table_version(spark, name) for name in names}
        assert run().ledger_ok
        return {name: v - before[name] for name in names if (v := table_version(spark, name)) != before[name]}

    with in_warehouse(spark, tmp_path):
        write_input(spark, spec.input_table, [("a1", "u1", "ad1", "5", t, t + 1000)])
        commits(lambda: run_microbatch(spark, spec.name, now=format_instant(t + 5 * M)))
        # the watermark passes the window's end: its on-time pane makes the pane log and the results
        write_input(spark, spec.input_table, [("w1", "u1", "ad2", "1", DAY0 + 12 * M, t + 6 * M)], mode="append")
        made = commits(lambda: run_microbatch(spark, spec.name, now=format_instant(t + 9 * M)))
        assert {stage.output, f"{stage.output}_panes"} <= set(made), made
        # a late view (a late pane at once) and a bad row
        write_input(spark, spec.input_table, [("a2", "u2", "ad1", "7", t, t + 7 * M),
                                              ("bad", "u1", "ad1", "seven", t, t + 7 * M)], mode="append")
        warm = commits(lambda: run_microbatch(spark, spec.name, now=format_instant(t + 10 * M)))
        assert warm == {"dataflow_batches": 2, f"{spec.name}__seen_ids": 1, f"{spec.name}__quarantine": 1,
                        f"{stage.output}_panes": 1, stage.output: 1, f"{stage.output}__state": 1}, warm
        idle = commits(lambda: run_microbatch(spark, spec.name, now=format_instant(t + 10 * M + 1000)))
        assert idle == {}, idle
