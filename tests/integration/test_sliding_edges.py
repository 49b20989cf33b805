"""Sliding windows across the edge of a backfill's range: an event just after the range's end
belongs to a window the range owns (it starts inside) and to one it does not. The backfill
counts it in the first; the live pipeline that later takes over must count it in the second,
and not again in the first."""

from __future__ import annotations

import itertools
from collections import Counter

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.triggers import AfterCount, AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import SlidingWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.microbatch import run_microbatch
from tests.integration.test_backfill import DAY0, M, reference_results, results_of, write_input

_names = itertools.count()
DAY = 86_400_000


def _sliding(name: str) -> PipelineSpec:
    return register(PipelineSpec(
        name=name, input_table=f"{name}_in", key={"ad_id": "ad_id"}, value="try_cast(v AS BIGINT)",
        quality_suite=None, partition_column=None, watermark=lambda: HeuristicWatermark(bound=M),
        stages=(StageSpec(f"{name}_s", WindowingStrategy(
            SlidingWindows(20 * M, 10 * M), AfterWatermark(late=AfterCount(1)),
            AccumulationMode.ACCUMULATING, parse_duration("1d"), SumFn()), ("ad_id",), "bigint"),),
    ))


ROWS = [("a", "u1", "ad1", "1", DAY0 + DAY - 15 * M, DAY0 + DAY - 15 * M),  # windows from 23:30 and 23:40
        ("b", "u1", "ad1", "10", DAY0 + DAY + 5 * M, DAY0 + DAY + 5 * M),  # from 23:50 (May 1's) and 00:00 (May 2's)
        ("c", "u1", "ad1", "100", DAY0 + DAY + 25 * M, DAY0 + DAY + 25 * M)]  # from 00:10 and 00:20
LATER = ("z", "u1", "ad2", "1", DAY0 + 2 * DAY, DAY0 + 2 * DAY)  # moves the watermark past ad1's windows


def _go_live(spark, spec: PipelineSpec) -> dict:
    """Two micro-batches: the first over the input the backfills read, the second over a
    later view and a second delivery of the edge event; the first one's ledger."""
    first = run_microbatch(spark, spec.name, now=format_instant(DAY0 + DAY + 31 * M))
    assert first.ledger_ok
    write_input(spark, spec.input_table, [LATER, ROWS[1]], mode="append")
    again = run_microbatch(spark, spec.name, now=format_instant(DAY0 + 2 * DAY + M))
    assert again.ledger_ok and again.ledger["duplicates"] == 1, again.ledger  # b, counted everywhere now
    return first.ledger


def _assert_recomputed(spark, spec: PipelineSpec) -> None:
    closed = lambda c: Counter({k: n for k, n in c.items() if k[0] == "ad1"})  # noqa: E731 - ad2's are open
    want = closed(reference_results(spec, ROWS + [LATER])[spec.stages[0].output])
    got = closed(results_of(spark, spec.stages[0]))
    assert got == want, (sorted(got - want), sorted(want - got))


def test_going_live_after_a_backfill_counts_an_edge_event_in_the_windows_the_range_does_not_own(spark):
    """May 1 backfilled: b is counted in May 1's window from 23:50; the first micro-batch
    counts it in the window from 00:00 only, and a later delivery of it is a duplicate."""
    spec = _sliding(f"t_slide_{next(_names)}")
    write_input(spark, spec.input_table, ROWS)
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + DAY + 30 * M)).ledger_ok
    ledger = _go_live(spark, spec)
    assert (ledger["duplicates"], ledger["accepted"]) == (1, 2), ledger  # a; b (for 00:00 on) and c
    _assert_recomputed(spark, spec)


def test_two_adjacent_backfills_count_an_edge_event_once_in_each_of_its_windows(spark):
    """May 1 and May 2 backfilled in turn: each counts b in the windows it owns, so going live
    finds b counted in all of them (a duplicate), and the figures are a recomputation's."""
    spec = _sliding(f"t_slide2_{next(_names)}")
    write_input(spark, spec.input_table, ROWS)
    for start, end in (("2024-05-01", "2024-05-02"), ("2024-05-02", "2024-05-03")):
        assert run_backfill(spark, spec.name, start, end, now=format_instant(DAY0 + DAY + 30 * M)).ledger_ok
    ledger = _go_live(spark, spec)
    assert (ledger["duplicates"], ledger["accepted"]) == (3, 0), ledger
    _assert_recomputed(spark, spec)


def test_a_backfill_between_live_batches_counts_an_edge_event_once_in_each_of_its_windows(spark):
    """Live first (a and c delivered), then b lands late in the input and May 1 is
    backfilled: the backfill corrects May 1's windows with b, the next micro-batch delivers b
    to its window from 00:00 only, and the figures are a recomputation's."""
    spec = _sliding(f"t_slide3_{next(_names)}")
    write_input(spark, spec.input_table, [ROWS[0], ROWS[2]])
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + DAY + 26 * M)).ledger_ok
    write_input(spark, spec.input_table, [ROWS[1]], mode="append")
    assert run_backfill(spark, spec.name, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + DAY + 30 * M)).ledger_ok
    ledger = _go_live(spark, spec)
    assert (ledger["duplicates"], ledger["accepted"]) == (0, 1), ledger  # b, for 00:00 on
    _assert_recomputed(spark, spec)
