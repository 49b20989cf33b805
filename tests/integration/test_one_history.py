"""Every path keeps one history per window, by the model's own rules (issue "One home for
every rule"): discarding totals through micro-batches, a backfill correcting a live
pipeline mid-window, the panes a downstream mapper sees, and live state as versioned data."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.pane_codec import EMISSION_ORDER, pane_from_row
from dataflow_core.model.panes import Pane, history_breaks
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark, AlignedProcessingTime, Repeatedly
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows, GlobalWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table, table_path
from tests.integration.test_backfill import DAY0, M, ms, reference_replay, to_rows, write_input

_names = itertools.count()
S = 1000


def _billing(name: str, mode: AccumulationMode) -> PipelineSpec:
    """Sums per ad in 10-minute windows, early every 2 minutes, late per element."""
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        max_duplicate_share=0.25,  # VIEWS re-delivers views on purpose: up to 11 % of a live batch
        stages=(StageSpec(f"{name}_b", WindowingStrategy(
            FixedWindows(10 * M), AfterWatermark(early=AlignedProcessingTime(2 * M), late=AfterCount(1)),
            mode, parse_duration("1h"), SumFn()), ("ad_id",), "bigint"),),
    ))


def _histories(spark, stage: StageSpec) -> dict[tuple, list[Pane]]:
    """Each window's panes from the pane log, in emission order, as the model's Panes."""
    windows: dict[tuple, list[Pane]] = defaultdict(list)
    rows = read_table(spark, f"{stage.output}_panes").collect()
    for r in sorted(rows, key=lambda r: tuple(r[c] for c in EMISSION_ORDER)):
        row = {**r.asDict(), "window_start": ms(r["window_start"]), "window_end": ms(r["window_end"]),
               "ts": ms(r["timestamp"]), "emitted_at": ms(r["emitted_at"])}
        key = tuple(r[k] for k in stage.key_columns)
        windows[(key, row["window_start"])].append(pane_from_row(key, row))
    return windows


def _sums(rows, key_of=lambda r: r[2]) -> dict[tuple, int]:
    """Independent recomputation: per ad and 10-minute window, the sum of distinct events."""
    first = {}
    for e, u, a, v, t, i in rows:
        first.setdefault(e, (a, int(v), t))
    out: Counter = Counter()
    for a, v, t in first.values():
        out[(a, (t - DAY0) // (10 * M))] += v
    return dict(out)


def _results(spark, stage: StageSpec) -> dict[tuple, int]:
    return {(r["ad_id"], (ms(r["window_start"]) - DAY0) // (10 * M)): r["value"]
            for r in read_table(spark, stage.output).collect()}


# Views: (user, ad, value, event second, ingest delay s, delivered twice).
VIEWS = [("u1", "ad1", 3, 30, 10, False), ("u2", "ad1", 5, 100, 20, True), ("u1", "ad2", 7, 200, 5, False),
         ("u3", "ad1", 2, 400, 30, False), ("u1", "ad2", 11, 650, 15, False), ("u2", "ad1", 13, 700, 500, False),
         ("u3", "ad2", 17, 1300, 10, False), ("u1", "ad1", 19, 90, 1500, False)]


def _micro_batches(spark, spec: PipelineSpec, rows, cuts) -> None:
    """Rows arrive by ingest time; a micro-batch at each cut, then a closing tick."""
    written = 0
    for n, cut in enumerate(cuts):
        batch = [r for r in rows if cut - 10 * M <= r[5] < cut] if n else [r for r in rows if r[5] < cut]
        if batch:
            write_input(spark, spec.input_table, batch, mode="overwrite" if not written else "append")
            written += len(batch)
        result = run_microbatch(spark, spec.name, now=format_instant(cut))
        assert result.ledger_ok


def test_discarding_micro_batches_keep_the_totals_a_batch_gives(spark):
    """A discarding stage's results through micro-batches hold each window's total (its
    panes merged by the combiner), as a batch backfill of the same input does; then state
    written in a format this build does not know is refused with one clear line."""
    rows = to_rows(VIEWS)
    live = _billing(f"t_disc_live_{next(_names)}", AccumulationMode.DISCARDING)
    cuts = [DAY0 + 10 * M, DAY0 + 20 * M, DAY0 + 30 * M, DAY0 + 3 * 3600 * S]
    _micro_batches(spark, live, rows, cuts)
    truth = _sums(rows)
    assert _results(spark, live.stages[0]) == truth
    panes = Counter()
    for (key, start), history in _histories(spark, live.stages[0]).items():
        assert history_breaks(history) == [], (key, start, history)
        panes[(key[0], (start - DAY0) // (10 * M))] = sum(p.value for p in history)
    assert dict(panes) == truth, "discarding panes add up to the totals"
    assert len([p for h in _histories(spark, live.stages[0]).values() for p in h]) > len(truth), \
        "some window had more than one pane (the merge was exercised)"

    batch = _billing(f"t_disc_batch_{next(_names)}", AccumulationMode.DISCARDING)
    write_input(spark, batch.input_table, rows)
    run_backfill(spark, batch.name, "2024-05-01", "2024-05-02")
    assert _results(spark, batch.stages[0]) == truth

    state = table_path(spark, f"{live.stages[0].output}__state")
    spark.sql(f"UPDATE delta.`{state}` SET state_version = 99")
    with pytest.raises(DataflowError, match=r"__state holds live state of format version 99"):
        run_microbatch(spark, live.name, now=format_instant(DAY0 + 4 * 3600 * S))


@pytest.mark.parametrize("mode", [AccumulationMode.RETRACTING, AccumulationMode.ACCUMULATING])
def test_a_backfill_between_live_batches_continues_each_windows_history(spark, mode):
    """Micro-batches emit EARLY panes; a backfill over the whole input (rows the stream has
    not delivered yet among them) corrects the live windows mid-window; later batches carry
    on. Every window's pane log is one history (one ON_TIME pane, indexes consecutive, no
    pane after a last one, each retraction repeating the standing pane) and the results
    equal a recomputation."""
    rows = to_rows(VIEWS)
    spec = _billing(f"t_hist_{mode.value}_{next(_names)}", mode)
    early = DAY0 + 8 * M
    write_input(spark, spec.input_table, [r for r in rows if r[5] < early])
    assert run_microbatch(spark, spec.name, now=format_instant(early)).ledger_ok
    tick = early + 150 * S  # early timers fire; the watermark is still before the first window's end
    assert run_microbatch(spark, spec.name, now=format_instant(tick)).ledger_ok
    write_input(spark, spec.input_table, [r for r in rows if r[5] >= early], mode="append")
    backfill = run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(tick + M))
    assert backfill.ledger_ok and backfill.ledger["corrected_windows"] > 0
    for cut in (DAY0 + 20 * M, DAY0 + 3 * 3600 * S):
        assert run_microbatch(spark, spec.name, now=format_instant(cut)).ledger_ok
    histories = _histories(spark, spec.stages[0])
    watermark = max(r[4] for r in rows) - M  # the heuristic estimator's, after everything arrived
    for window, history in histories.items():
        assert history_breaks(history) == [], (window, history)  # no second ON_TIME among them
        if history[0].window.end <= watermark:
            on_time = [p for p in history if p.timing.value == "ON_TIME" and not p.retraction]
            assert len(on_time) == 1, (window, history)
    assert any(p.timing.value == "EARLY" for h in histories.values() for p in h if p.emitted_at == tick + M), \
        "the backfill corrected an open window with an EARLY pane"
    assert _results(spark, spec.stages[0]) == _sums(rows)


def test_a_downstream_mapper_sees_the_panes_the_reference_runner_gives_it(spark):
    """Upstream panes reach a later stage's mapper with all their metadata (is_first,
    is_last included): counted by metadata, Spark's replay equals the reference runner's."""
    name = f"t_mapper_{next(_names)}"

    def tagged(pane: Pane):  # a closure: shipped to executors by value
        """What the downstream stage counts: the upstream pane's metadata, as the mapper saw it."""
        return [(f"{pane.timing.value}|{pane.index}|{pane.on_time_index}|{pane.first}|{pane.last}|{pane.retraction}", 1)]

    spec = register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        stages=(
            StageSpec(f"{name}_b", WindowingStrategy(
                FixedWindows(10 * M), AfterWatermark(early=AlignedProcessingTime(2 * M), late=AfterCount(1)),
                AccumulationMode.RETRACTING, 0, SumFn()), ("ad_id",), "bigint"),
            StageSpec(f"{name}_meta", WindowingStrategy(
                GlobalWindows(), Repeatedly(AfterCount(1)), AccumulationMode.ACCUMULATING, 0, CountFn()),
                ("tag",), "bigint", from_upstream=tagged, input_type="bigint"),
        ),
    ))
    rows = to_rows(VIEWS)
    write_input(spark, spec.input_table, rows)
    run_backfill(spark, name, "2024-05-01", "2024-05-02", replay=True, batch_interval="2m")
    runner = reference_replay(spec, rows, 2 * M)
    want = {}
    for p in runner.outputs[1]:
        if not p.retraction:
            want[p.key] = p.value
    got = {r["tag"]: r["value"] for r in read_table(spark, spec.stages[1].output).collect()}
    assert got == want
    assert any(tag.split("|")[4] == "True" for tag in got), "some upstream pane was last (is_last reached the mapper)"
