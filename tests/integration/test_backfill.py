"""`dataflow backfill` on Spark and Delta against the reference runners: batch and
arrival-order replay, one and two stages; re-runs, late-data corrections, quarantine and
the ledger."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime, Repeatedly
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, HeuristicWatermark, Progress
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.runners.reference import ReferencePipelineRunner
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.platform.tables import read_table, table_path

DAY0 = int(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
M = 60_000
SCHEMA = "event_id string, user_id string, ad_id string, v string, event_time timestamp, ingest_time timestamp"
_names = itertools.count()


def ts(ms: int | None) -> dt.datetime | None:
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def sessions_pipeline(name: str, table: str, retracting: bool = True, value: str = "try_cast(v AS BIGINT)") -> PipelineSpec:
    """The shape of ad_sessions, at a scale small inputs exercise: 5-minute gaps."""
    gap = 5 * M

    def short(pane: Pane):
        return [(pane.key[1], 1)] if pane.window.end - pane.window.start - gap < 3 * M else []

    return register(PipelineSpec(
        name=name, input_table=table, key={"user_id": "user_id", "ad_id": "ad_id"},
        value=value, quality_suite=None, partition_column=None,
        watermark=lambda: HeuristicWatermark(bound=2 * M),
        stages=(
            StageSpec(f"{name}_s", WindowingStrategy(
                Sessions(gap), AfterWatermark(early=AlignedProcessingTime(M), late=AfterCount(1)),
                AccumulationMode.RETRACTING if retracting else AccumulationMode.ACCUMULATING,
                parse_duration("1d"), CountFn()), ("user_id", "ad_id"), "bigint"),
            StageSpec(f"{name}_short", WindowingStrategy(
                GlobalWindows(), Repeatedly(AfterCount(1)), AccumulationMode.ACCUMULATING, 0, SumFn()),
                ("ad_id",), "bigint", from_upstream=short, input_type="bigint"),
        ),
    ))


def billing_pipeline(name: str, table: str, early: int = 2 * M) -> PipelineSpec:
    """Sums per ad in 10-minute windows, early panes every `early` ms of processing time."""
    return register(PipelineSpec(
        name=name, input_table=table, key={"ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        stages=(StageSpec(f"{name}_b", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(early=AlignedProcessingTime(early), late=AfterCount(1)),
            AccumulationMode.ACCUMULATING, parse_duration("1h"), SumFn()), ("ad_id",), "bigint"),),
    ))


def write_input(spark, table: str, rows: list[tuple], mode: str = "overwrite") -> None:
    from dataflow_core.spark.platform.tables import write_table

    df = spark.createDataFrame([(e, u, a, v, ts(t), ts(i)) for e, u, a, v, t, i in rows], SCHEMA)
    write_table(spark, df, table, mode=mode)


# --- the oracle --------------------------------------------------------------------------


def reference_replay(spec: PipelineSpec, rows: list[tuple], interval: int) -> ReferencePipelineRunner:
    """What `--replay` must emit: batches of ingest time, the estimator per batch."""
    first = {}
    for e, u, a, v, t, i in sorted(rows, key=lambda r: (r[5], r[4])):
        first.setdefault(e, (u, a, int(v), t, i))
    t0 = min(i for *_, i in first.values())
    t0 -= t0 % interval
    by_batch: dict[int, list] = {}
    for u, a, v, t, i in first.values():
        key = (u, a) if len(spec.stages[0].key_columns) == 2 else a
        by_batch.setdefault((i - t0) // interval, []).append((key, v, t))
    model = Pipeline.of(*(Stage(s.output, s.strategy, s.from_upstream) for s in spec.stages))
    runner = ReferencePipelineRunner(model, BEGINNING_OF_TIME)
    estimator = spec.watermark()
    for b in range(max(by_batch) + 1):
        at = t0 + (b + 1) * interval
        els = by_batch.get(b, [])
        runner.advance_processing_time(at)
        if els:
            runner.add(els)
        times = [t for _, _, t in els]
        runner.advance_watermark(estimator.update(
            Progress(batch_event_times=(min(times), max(times)) if times else (), processing_time=at)))
    return runner


def ms(x: dt.datetime | None) -> int | None:
    """A timestamp read back from a table (naive, in the session's UTC) as epoch ms."""
    return None if x is None else int(x.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


ROW_FIELDS = {"event_id": 0, "user_id": 1, "ad_id": 2}
"""Where a key column's value sits in a test row (event_id, user_id, ad_id, v, event ms, ingest ms)."""


def reference_results(spec: PipelineSpec, rows: list[tuple]) -> dict[str, Counter]:
    """What a batch backfill's results tables must hold for `rows`, by the reference runner:
    every distinct event at once under a perfect watermark, each window's last pane (a
    window whose last pane is a retraction, such as a session merged into another, holds
    nothing). Per stage: Counter of (key columns..., window start ms, window end ms, value),
    the bounds None for the global window."""
    model = Pipeline.of(*(Stage(s.output, s.strategy, s.from_upstream) for s in spec.stages))
    ref = ReferencePipelineRunner(model, BEGINNING_OF_TIME)
    ref.advance_processing_time(DAY0 + 10**9)
    cols = spec.stages[0].key_columns
    key_of = (lambda r: r[ROW_FIELDS[cols[0]]]) if len(cols) == 1 else (lambda r: tuple(r[ROW_FIELDS[c]] for c in cols))
    ref.add([(key_of(r), int(r[3]), r[4]) for r in {r[0]: r for r in rows}.values()])
    ref.advance_watermark(END_OF_TIME)
    out = {}
    for n, stage in enumerate(spec.stages):
        final: dict[tuple, int | None] = {}
        for p in ref.outputs[n]:
            key = p.key if isinstance(p.key, tuple) else (p.key,)
            bounds = (None, None) if p.window.end >= END_OF_TIME else (p.window.start, p.window.end)
            final[(*key, *bounds)] = None if p.retraction else int(p.value)
        out[stage.output] = Counter((*w, v) for w, v in final.items() if v is not None)
    return out


def results_of(spark, stage: StageSpec) -> Counter:
    """A results table in `reference_results`' terms."""
    return Counter((*(r[k] for k in stage.key_columns), ms(r["window_start"]), ms(r["window_end"]), int(r["value"]))
                   for r in read_table(spark, stage.output).collect())


def logged(spark, spec: PipelineSpec, n: int, run_id: str) -> Counter:
    stage = spec.stages[n]
    rows = read_table(spark, f"{stage.output}_panes").where(f"run_id = '{run_id}'").collect()
    keys = stage.key_columns
    return Counter(
        (tuple(r[k] for k in keys), ms(r["window_start"]), ms(r["window_end"]), int(r["value"]), r["timing"],
         r["pane_index"], r["on_time_index"], r["is_retraction"], ms(r["emitted_at"]))
        for r in rows
    )


def expected(spec: PipelineSpec, panes: list[Pane], n: int) -> Counter:
    glob = lambda p: p.window.end >= END_OF_TIME  # noqa: E731
    keys = spec.stages[n].key_columns
    return Counter(
        ((p.key,) if len(keys) == 1 else tuple(p.key), None if glob(p) else p.window.start,
         None if glob(p) else p.window.end, int(p.value), p.timing.value, p.index, p.on_time_index,
         p.retraction, p.emitted_at)
        for p in panes
    )


# --- random inputs -----------------------------------------------------------------------

views = st.lists(
    st.tuples(
        st.sampled_from(["u1", "u2"]), st.sampled_from(["ad1", "ad2"]), st.integers(1, 5),
        st.integers(0, 90 * 60),  # event time, seconds after DAY0
        st.sampled_from([1, 5, 30, 200, 900, 3000]),  # ingest delay, seconds
        st.booleans(),  # delivered twice?
    ),
    min_size=1, max_size=18,
)


def to_rows(drawn) -> list[tuple]:
    rows = []
    for n, (u, a, v, t, delay, twice) in enumerate(drawn):
        event, ingest = DAY0 + t * 1000, DAY0 + (t + delay) * 1000
        rows.append((f"e{n}", u, a, str(v), event, ingest))
        if twice:
            rows.append((f"e{n}", u, a, str(v), event, ingest + 45_000))
    return rows


# A backfill's cost is mostly fixed (Spark jobs and Delta commits), so one run checks several
# of Hypothesis's examples at once: it draws HISTORIES lists of views (its simplest first, then
# random ones; nothing shrinks, as before), and history k's users, ads and event ids carry the
# prefix `h{k}-` (its keys are its own). In a replay, history k's times are also shifted by
# k * SHIFT, after the last arrival of the history before it (event times up to 90 min,
# ingest delays up to 3045 s). A failing check names the histories it ran.
HISTORIES = 4
SHIFT = 3 * 3_600_000


def draw(strategy, n: int) -> list:
    """n examples of `strategy` from Hypothesis, for one Spark run."""
    drawn: list = []

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(strategy)
    def collect(example):
        drawn.append(example)

    collect()
    return drawn


def histories_to_rows(drawn: list, shift: int = 0) -> list[tuple]:
    rows = []
    for k, one in enumerate(drawn):
        for e, u, a, v, t, i in to_rows(one):
            rows.append((f"h{k}-{e}", f"h{k}-{u}", f"h{k}-{a}", v, t + k * shift, i + k * shift))
    return rows


@pytest.mark.parametrize("two_stages", [False, True], ids=["billing", "sessions_two_stages"])
def test_replay_equals_reference_pipeline_runner(spark, two_stages):
    """Both stages' pane histories, retractions and watermark holds included."""
    drawn = draw(views, HISTORIES)
    interval = random.choice([M, 3 * M])  # named in the message of a failing check
    name = f"t_replay_{next(_names)}"
    rows = histories_to_rows(drawn, SHIFT)
    spec = sessions_pipeline(name, f"{name}_in") if two_stages else billing_pipeline(name, f"{name}_in")
    write_input(spark, spec.input_table, rows)
    result = run_backfill(spark, name, "2024-05-01", "2024-05-02", replay=True, batch_interval=f"{interval // M}m")
    ref = reference_replay(spec, rows, interval)
    for n in range(len(spec.stages)):
        assert logged(spark, spec, n, result.run_id) == expected(spec, ref.outputs[n], n), \
            f"stage {n + 1}; interval {interval // M}m, histories {drawn}"
    unique = len({r[0] for r in rows})
    assert result.ledger["read"] == len(rows)
    assert result.ledger["duplicates"] == len(rows) - unique
    assert result.ledger["dropped_late"] == sum(ks.dropped_elements for ks in ref.stages[0].keys.values())
    assert result.ledger_ok


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
def test_batch_results_equal_reference_final_panes(spark, fast):
    """The results tables hold the reference runner's last pane per window when all the
    input arrives at once and the watermark is perfect; fast and general paths alike."""
    drawn = draw(views, HISTORIES)
    name = f"t_batch_{next(_names)}"
    rows = histories_to_rows(drawn)
    spec = sessions_pipeline(name, f"{name}_in")
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, name, "2024-05-01", "2024-05-02", fast=fast)
    want = reference_results(spec, rows)
    for stage in spec.stages:
        got = results_of(spark, stage)
        assert got == want[stage.output], (stage.output, got, want[stage.output], drawn)
        # Results are clustered on window_end, so later MERGEs of recent windows skip old files.
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(spark, stage.output)}`").first()
        assert detail["clusteringColumns"] == ["window_end"], stage.output


def _versions(spark, tables: list[str]) -> dict[str, int]:
    from delta.tables import DeltaTable

    return {t: DeltaTable.forPath(spark, table_path(spark, t)).history(1).collect()[0]["version"] for t in tables}


def test_late_data_merging_sessions_is_corrected_with_retractions_and_reruns_change_nothing(spark):
    name = f"t_late_{next(_names)}"
    spec = sessions_pipeline(name, f"{name}_in")
    s1, s2 = spec.stages
    # Two short sessions of u1/ad1 (0-1 min and 7-8 min: gap 5 min keeps them apart).
    rows = [("a", "u1", "ad1", "1", DAY0, DAY0 + 1000), ("b", "u1", "ad1", "1", DAY0 + M, DAY0 + M + 1000),
            ("c", "u1", "ad1", "1", DAY0 + 7 * M, DAY0 + 7 * M + 1000),
            ("d", "u1", "ad1", "1", DAY0 + 8 * M, DAY0 + 8 * M + 1000)]
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, name, "2024-05-01", "2024-05-02", now="2024-05-01T12:00:00Z")
    assert sorted(r["value"] for r in read_table(spark, s1.output).collect()) == [2, 2]
    assert [r["value"] for r in read_table(spark, s2.output).collect()] == [2]
    tables = [s1.output, f"{s1.output}_panes", s2.output, f"{s2.output}_panes"]
    before = _versions(spark, tables)
    again = run_backfill(spark, name, "2024-05-01", "2024-05-02", now="2024-05-01T12:30:00Z")
    assert _versions(spark, tables) == before, "a re-run must not commit to any output table"
    assert again.ledger["panes"] == 0 and again.ledger["retractions"] == 0
    # A late view at 4 min bridges them: one 8-minute session, no longer short.
    write_input(spark, spec.input_table, [("e", "u1", "ad1", "1", DAY0 + 4 * M, DAY0 + 600 * M)], mode="append")
    late = run_backfill(spark, name, "2024-05-01", "2024-05-02", now="2024-05-01T13:00:00Z")
    results = read_table(spark, s1.output).collect()
    assert [(r["value"], r["window_end"] - r["window_start"]) for r in results] == [(5, dt.timedelta(minutes=13))]
    log = read_table(spark, f"{s1.output}_panes").where(f"run_id = '{late.run_id}'").collect()
    retracted = sorted((r["window_start"].minute, r["value"]) for r in log if r["is_retraction"])
    assert retracted == [(0, 2), (7, 2)]
    fresh = [r for r in log if not r["is_retraction"]]
    assert [(r["value"], r["timing"], r["pane_index"]) for r in fresh] == [(5, "ON_TIME", 0)]
    assert [r["value"] for r in read_table(spark, s2.output).collect()] == [0]
    assert late.ledger["per_stage"][s1.output] == {"panes": 1, "retractions": 2, "corrected_windows": 2}
    assert late.ledger["read"] == 5 and late.ledger_ok


def test_bad_rows_are_quarantined_with_reasons_and_the_ledger_balances(spark):
    name = f"t_bad_{next(_names)}"
    spec = billing_pipeline(name, f"{name}_in")
    t = DAY0 + 3 * M
    rows = [
        ("ok1", "u1", "ad1", "5", t, t + 1000),
        ("ok1", "u1", "ad1", "5", t, t + 9000),  # a second delivery
        ("ok2", "u2", "ad1", "7", t, t + 2000),
        ("nokey", "u1", None, "1", t, t + 1000),
        ("notime", "u1", "ad1", "1", None, t + 1000),
        ("future", "u1", "ad1", "1", t + 5 * 3_600_000, t + 1000),
        ("badval", "u1", "ad1", "seven", t, t + 1000),
    ]
    write_input(spark, spec.input_table, rows)
    result = run_backfill(spark, name, "2024-05-01", "2024-05-02")
    q = {r["event_id"]: r["quarantine_reason"] for r in read_table(spark, f"{spec.name}__quarantine").collect()}
    assert q == {"nokey": "key_ad_id_not_null", "notime": "event_time_not_null",
                 "future": "event_time_beyond_skew", "badval": "value_invalid"}
    assert {k: result.ledger[k] for k in ("read", "accepted", "duplicates", "quarantined", "aggregated", "dropped_late")} == {
        "read": 7, "accepted": 2, "duplicates": 1, "quarantined": 4, "aggregated": 2, "dropped_late": 0}
    [row] = read_table(spark, spec.stages[0].output).collect()
    assert row["value"] == 12
    run_backfill(spark, name, "2024-05-01", "2024-05-02")
    assert read_table(spark, f"{spec.name}__quarantine").count() == 4, "re-runs quarantine a row once"
    nothing = run_backfill(spark, name, "2024-05-05", "2024-05-06")  # a range without input
    assert nothing.ledger_ok and nothing.ledger["read"] == nothing.ledger["panes"] == 0


def test_a_backfill_of_an_input_table_that_does_not_exist_says_so_in_one_line(spark):
    """The input is read as of one version; a table with none yet is named, not a crash."""
    from dataflow_core.errors import DataflowError

    spec = billing_pipeline("t_no_input", "t_no_input_table")
    with pytest.raises(DataflowError) as missing:
        run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now="2024-05-03")
    line = str(missing.value)
    assert "\n" not in line and "table 't_no_input_table' not found" in line, line
