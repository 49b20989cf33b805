"""Pipelines a user might write, drawn at random over every combiner, window function,
accumulation mode and trigger family `dataflow_core.api` exports, built through the api over
a table of their own column names (`order_id`, `shop_code` keyed by an expression, `amount`,
`ordered_at`, `received_at`), checked by `dataflow check`'s preflight, on tiny random input
(a few keys, some late rows, duplicate deliveries). For each pipeline:

- a batch backfill's results equal a group-by of the data, stage by stage (a later stage
  over its upstream's results), which is what the reference runner leaves once all the data
  is in and the watermark at the end (tests/core/test_current_results.py);
- a replay backfill's pane log equals the reference pipeline runner's with the same batch
  boundaries, and its results table what the model's rule nets those panes to
  (`WindowingStrategy.current_panes`);
- micro-batches with the same batch boundaries leave the replay's pane log and results;
- after the batch backfill and after the replay (or the micro-batches, whose tables equal
  the replay's), every stage's pane and results gates (Great Expectations) pass.

The draw covers every value of every dimension (each combiner, window function, mode and
trigger family is some stage's) rather than the whole cross product: each pipeline chains
`STAGES` stages (shop -> region -> everything ...), and `COVER` pipelines run by default, all
in the suite's one Spark session. Micro-batches cost the most (a dozen commits per batch
and stage), so by default only the first pipeline also runs live.

A longer local run: `DATAFLOW_PROPERTY_PIPELINES=N` runs N pipelines, all of them live too
(derandomized, so a run is repeatable; `DATAFLOW_PROPERTY_SEED=K` draws another set), e.g.
`DATAFLOW_PROPERTY_PIPELINES=12 .venv/bin/python -m pytest tests/integration/test_pipeline_properties.py`."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from dataflow_core import api
from dataflow_core.model.combiners import CombineFn
from dataflow_core.model.panes import Pane
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.time import END_OF_TIME, format_instant
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.pipelines import layout
from dataflow_core.pipelines.check import preflight
from dataflow_core.quality.gates import gate_panes, gate_results
from dataflow_core.runners.reference import ReferencePipelineRunner
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.session import warehouse_root
from dataflow_core.spark.platform.tables import read_table, table_exists, write_table
from tests.core.test_current_results import group_by

DAY0 = int(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
S, M = 1000, 60_000
SCHEMA = "order_id string, shop_code string, amount bigint, ordered_at timestamp, received_at timestamp"
INTERVAL = 10 * M  # replay and micro-batch boundaries
_names = itertools.count()

COMBINERS = [getattr(api, n) for n in api.__all__
             if isinstance(getattr(api, n), type) and issubclass(getattr(api, n), CombineFn)
             and getattr(api, n) is not CombineFn]
WINDOWS = [api.FixedWindows("5m"), api.SlidingWindows("6m", "3m"), api.Sessions("4m"), api.GlobalWindows()]
MODES = list(api.AccumulationMode)
FAMILIES = {  # one trigger per exported trigger, as a user would write it
    "AfterAll": api.AfterAll(api.AfterCount(2), api.AfterWatermark()),
    "AfterCount": api.AfterCount(2),
    "AfterEach": api.AfterEach(api.AfterCount(1), api.AfterWatermark(late=api.AfterCount(1))),
    "AfterFirst": api.Repeatedly(api.AfterFirst(api.AfterCount(3), api.AfterProcessingTime("4m"))),
    "AfterPercentileWatermark": api.Repeatedly(api.AfterPercentileWatermark(0.5)),
    "AfterProcessingTime": api.Repeatedly(api.AfterProcessingTime("3m")),
    "AfterWatermark": api.AfterWatermark(early=api.AfterCount(1), late=api.AfterCount(1)),
    "AlignedProcessingTime": api.AfterWatermark(early=api.AlignedProcessingTime("4m"), late=api.AfterCount(1)),
    "Default": api.Default(),
    "Never": api.Never(),
    "OrFinally": api.OrFinally(api.Repeatedly(api.AfterCount(2)), api.AfterWatermark()),
    "RepeatUntil": api.RepeatUntil(api.AfterCount(1), api.AfterWatermark()),
    "Repeatedly": api.Repeatedly(api.AfterCount(1)),
}
LATENESS = [0, "10m", "1d"]
STAGES = 5  # chained stages per pipeline: shop -> region -> everything -> everything ...
COVER = -(-len(FAMILIES) // STAGES)  # pipelines that give every trigger family a stage


@dataclass(frozen=True)
class Dims:
    combiner: Any
    window: Any
    mode: Any
    family: str
    lateness: Any

    def describe(self) -> str:
        return (f"{self.combiner.__name__} {self.window.describe()} {self.mode.value} {self.family} "
                f"lateness {self.lateness}")


# --- the draw ----------------------------------------------------------------------------

def _cycled(values: list, order: list[int], n: int) -> list:
    return [values[order[i % len(values)]] for i in range(n)]


@st.composite
def covering_stages(draw, n: int) -> list[Dims]:
    """`n` stages in which every value of every dimension appears (n >= the largest
    dimension's size), each dimension in an order of its own, so that pairs vary."""
    perm = lambda k: draw(st.permutations(list(range(k))))  # noqa: E731
    families = sorted(FAMILIES)
    return [Dims(c, w, m, f, lat) for c, w, m, f, lat in zip(
        _cycled(COMBINERS, perm(len(COMBINERS)), n), _cycled(WINDOWS, perm(len(WINDOWS)), n),
        _cycled(MODES, perm(len(MODES)), n), _cycled(families, perm(len(families)), n),
        [draw(st.sampled_from(LATENESS)) for _ in range(n)])]


orders = st.lists(
    st.tuples(
        st.sampled_from(["S1", "S2", "S3", "s4"]), st.integers(1, 9),
        st.integers(0, 15 * 60),  # ordered, seconds after DAY0 + 10 min
        st.sampled_from([1, 20, 90, 200, 600]),  # received after, seconds: some rows late
        st.booleans(),  # delivered twice?
    ),
    min_size=5, max_size=20,
)


def drawn(strategy, n: int, at: int) -> list:
    """n examples of `strategy`, the same on every run (`seed`): the last of a few more, since
    Hypothesis's first examples are its simplest."""
    out: list = []

    @seed(at)
    @settings(max_examples=n + 4, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(strategy)
    def collect(example):
        out.append(example)

    collect()
    return out[-n:]


LONG_RUN = "DATAFLOW_PROPERTY_PIPELINES" in os.environ


def plans() -> list[tuple[list[Dims], list]]:
    """Per pipeline: its stages (global windows last: a global window's panes carry the end
    of time, which only another global window can take) and its input."""
    n = int(os.environ.get("DATAFLOW_PROPERTY_PIPELINES", COVER))
    at = int(os.environ.get("DATAFLOW_PROPERTY_SEED", 62))
    stages = drawn(covering_stages(n * STAGES), 1, at)[0]
    inputs = drawn(orders, n, at)
    out = []
    for i in range(n):
        mine = sorted(stages[i * STAGES:(i + 1) * STAGES], key=lambda d: isinstance(d.window, api.GlobalWindows))
        out.append((mine, inputs[i % len(inputs)]))
    return out


PLANS = plans()


def test_the_draw_covers_every_value_of_every_dimension():
    dims = [d for stages, _ in PLANS[:COVER] for d in stages]
    assert {d.combiner for d in dims} == set(COMBINERS) and len(COMBINERS) == 7
    assert {type(d.window) for d in dims} == {type(w) for w in WINDOWS}
    assert {d.mode for d in dims} == set(MODES)
    assert {d.family for d in dims} == set(FAMILIES) == set(api.TRIGGERS)


# --- the pipeline, through the api -------------------------------------------------------

def as_int(value: Any) -> int:
    """Any pane's value as a small int (a later stage's input): a list's length, a mean's
    integer part, nothing as 0."""
    if value is None:
        return 0
    return len(value) if isinstance(value, (list, tuple)) else int(value)


def to_region(pane: Pane):
    return [("r" + str(int(pane.key[-1]) % 2), as_int(pane.value))]


def to_all(pane: Pane):
    return [("all", as_int(pane.value))]


MAPPERS = [None, to_region] + [to_all] * (STAGES - 2)
KEYS = [("shop",), ("region",)] + [("everything",)] * (STAGES - 2)


def _ship_this_module_by_value() -> None:
    """Executors cannot import a test module: the mappers travel by value."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


_ship_this_module_by_value()


def build(name: str, stages: list[Dims]) -> api.PipelineSpec:
    out = []
    for n, d in enumerate(stages):
        later = {} if n == 0 else {"key_columns": KEYS[n], "from_upstream": MAPPERS[n], "input_type": int}
        out.append(api.stage(f"{name}_{n}", d.window, d.combiner(), trigger=FAMILIES[d.family], accumulation=d.mode,
                             allowed_lateness=d.lateness, **later))
    return api.pipeline(name, input_table=f"{name}_in", key={"shop": "lower(shop_code)"}, value="amount",
                        event_time="ordered_at", ingest_time="received_at", event_id="order_id",
                        partition_column=None, quality_suite=None, watermark=api.HeuristicWatermark(bound="2m"),
                        stages=out)


def rows_of(drawn_orders) -> list[tuple]:
    """(order id, shop code, amount, event ms, ingest ms), duplicates delivered 45 s later."""
    rows = []
    for n, (shop, amount, t, delay, twice) in enumerate(drawn_orders):
        event = DAY0 + 10 * M + t * S
        rows.append((f"o{n}", shop, amount, event, event + delay * S))
        if twice:
            rows.append((f"o{n}", shop, amount, event, event + (delay + 45) * S))
    return rows


def write_input(spark, table: str, rows: list[tuple], mode: str = "overwrite") -> None:
    ts = lambda ms: dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)  # noqa: E731
    df = spark.createDataFrame([(o, s, a, ts(t), ts(i)) for o, s, a, t, i in rows], SCHEMA)
    write_table(spark, df, table, mode=mode)


def first_deliveries(rows: list[tuple]) -> list[tuple]:
    """Each order once, by its first delivery."""
    first: dict = {}
    for row in sorted(rows, key=lambda r: (r[4], r[3])):
        first.setdefault(row[0], row)
    return list(first.values())


# --- the oracles (group_by: tests/core/test_current_results.py) ---------------------------

def batch_expected(spec: api.PipelineSpec, rows: list[tuple]) -> list[dict]:
    """What a batch backfill's results hold, stage by stage: a group-by of the stage's
    elements, a later stage's elements mapped from its upstream's results (pane timestamps
    at the window's end, the default timestamp combiner)."""
    elements = [(s.lower(), a, t) for _, s, a, t, _ in first_deliveries(rows)]
    out = []
    for n, stage in enumerate(spec.stages):
        if n:
            elements = [(k, v, w.max_timestamp) for (key, w), value in out[-1].items()
                        for k, v in stage.from_upstream(Pane(key, w, value, w.max_timestamp, api.PaneTiming.ON_TIME,
                                                             0, 0, True, False, 0))]
        out.append(group_by(stage.strategy, elements))
    return out


def reference_replay(spec: api.PipelineSpec, rows: list[tuple]) -> ReferencePipelineRunner:
    """What `--replay` (and micro-batches at the same boundaries) emit: rows ingested in
    [t, t + INTERVAL) arrive at t + INTERVAL; the estimator sees each batch's event times."""
    by_batch: dict[int, list] = defaultdict(list)
    first = first_deliveries(rows)
    t0 = min(r[4] for r in first) - min(r[4] for r in first) % INTERVAL
    for _, shop, amount, t, i in first:
        by_batch[(i - t0) // INTERVAL].append((shop.lower(), amount, t))
    runner = ReferencePipelineRunner(Pipeline.of(*(Stage(s.output, s.strategy, s.from_upstream) for s in spec.stages)),
                                     BEGINNING_OF_TIME)
    estimator = spec.watermark()
    last = (max(r[4] for r in rows) - t0) // INTERVAL
    for b in range(last + 1):
        at, els = t0 + (b + 1) * INTERVAL, by_batch.get(b, [])
        runner.advance_processing_time(at)
        if els:
            runner.add(els)
        times = [t for _, _, t in els]
        runner.advance_watermark(estimator.update(
            Progress(batch_event_times=(min(times), max(times)) if times else (), processing_time=at)))
    return runner


def batches_of(rows: list[tuple]) -> list[tuple[int, list[tuple]]]:
    """The replay's batches: (processing time, rows ingested in the batch)."""
    t0 = min(r[4] for r in rows) - min(r[4] for r in rows) % INTERVAL
    last = (max(r[4] for r in rows) - t0) // INTERVAL
    return [(t0 + (b + 1) * INTERVAL, [r for r in rows if (r[4] - t0) // INTERVAL == b]) for b in range(last + 1)]


# --- tables in the oracles' terms ---------------------------------------------------------

def ms(x: dt.datetime | None) -> int | None:
    return None if x is None else int(x.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def bounds(w) -> tuple:
    return (None, None) if w.end >= END_OF_TIME else (w.start, w.end)


def results_of(spark, stage: api.StageSpec) -> Counter:
    if not table_exists(spark, layout.results(stage)):
        return Counter()
    return Counter((r[stage.key_columns[0]], ms(r["window_start"]), ms(r["window_end"]), plain(r["value"]))
                   for r in read_table(spark, layout.results(stage)).collect())


def expected_results(values: dict) -> Counter:
    return Counter((key, *bounds(w), plain(v)) for (key, w), v in values.items())


def pane_log(spark, stage: api.StageSpec) -> Counter:
    if not table_exists(spark, layout.panes(stage)):
        return Counter()
    return Counter(
        (r[stage.key_columns[0]], ms(r["window_start"]), ms(r["window_end"]), plain(r["value"]), r["timing"],
         r["pane_index"], r["on_time_index"], r["is_first"], r["is_last"], r["is_retraction"], ms(r["emitted_at"]))
        for r in read_table(spark, layout.panes(stage)).collect())


def expected_log(panes: list[Pane]) -> Counter:
    return Counter((p.key, *bounds(p.window), plain(p.value), p.timing.value, p.index, p.on_time_index, p.first,
                    p.last, p.retraction, p.emitted_at) for p in panes)


def checked(spark, spec: api.PipelineSpec) -> api.PipelineSpec:
    """`dataflow check`'s preflight, as the CLI and the DAG run it: the pipeline fits its
    table, and its value types are inferred from it."""
    return preflight(spec.name, warehouse_root(spark))


def gates_pass(spark, spec: api.PipelineSpec, tmp_path, what: str) -> None:
    """Every stage's pane gate and results gate (as `gate_outputs` runs them, without the
    Data Docs site) over all its windows."""
    outcomes = []
    for stage in spec.stages:
        if not table_exists(spark, layout.panes(stage)):
            continue  # the stage emitted nothing (gate_outputs skips it too)
        outcomes.append(gate_panes(spark, stage, None, f"gate-{spec.name}", spec.name, tmp_path / "docs",
                                   build_docs=False))
        if stage.keeps_results and table_exists(spark, layout.results(stage)):
            outcomes.append(gate_results(spark, stage, None, f"gate-{spec.name}", spec.name, tmp_path / "docs",
                                         build_docs=False))
    failed = [o.summary() for o in outcomes if not o.success]
    assert not failed, f"{what}: {failed}"


# --- the laws ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(len(PLANS)), ids=lambda n: f"pipeline{n}")
def test_batch_replay_and_micro_batches_equal_the_model_and_pass_the_gates(spark, tmp_path, n):
    stages, drawn_orders = PLANS[n]
    rows = rows_of(drawn_orders)
    about = f"stages {[d.describe() for d in stages]}, orders {drawn_orders}"
    name = f"t_props_{next(_names)}"

    batch = build(f"{name}_b", stages)
    write_input(spark, batch.input_table, rows)
    batch = checked(spark, batch)
    run_backfill(spark, batch.name, "2024-05-01", "2024-05-02", now="2024-05-02T12:00:00Z")
    for stage, want in zip(batch.stages, batch_expected(batch, rows)):
        assert results_of(spark, stage) == expected_results(want), f"batch {stage.output}; {about}"
    gates_pass(spark, batch, tmp_path, f"batch; {about}")

    replayed = build(f"{name}_r", stages)
    write_input(spark, replayed.input_table, rows)
    replayed = checked(spark, replayed)
    run_backfill(spark, replayed.name, "2024-05-01", "2024-05-02", replay=True, batch_interval="10m")
    ref = reference_replay(replayed, rows)
    for i, stage in enumerate(replayed.stages):
        assert pane_log(spark, stage) == expected_log(ref.outputs[i]), f"replay {stage.output}; {about}"
        current = {kw: p.value for kw, p in stage.strategy.current_panes(ref.outputs[i]).items()}
        assert results_of(spark, stage) == expected_results(current), f"replay results {stage.output}; {about}"
    if n and not LONG_RUN:
        gates_pass(spark, replayed, tmp_path, f"replay; {about}")
        return

    live = build(f"{name}_l", stages)
    for b, (end, batch_rows) in enumerate(batches_of(rows)):
        if batch_rows:
            write_input(spark, live.input_table, batch_rows, mode="overwrite" if b == 0 else "append")
        if b == 0:
            live = checked(spark, live)
        assert run_microbatch(spark, live.name, now=format_instant(end)).ledger_ok, about
    for a, b in zip(replayed.stages, live.stages):
        assert pane_log(spark, b) == pane_log(spark, a), f"micro-batches {b.output}; {about}"
        assert results_of(spark, b) == results_of(spark, a), f"micro-batch results {b.output}; {about}"
    gates_pass(spark, live, tmp_path, f"micro-batches; {about}")
