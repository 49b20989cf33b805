"""Multi-stage pipelines: retractions flow downstream and the end result equals batch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.examples.sessions_per_ad import batch_short_sessions_per_ad, short_sessions_per_ad
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CombineFn, CountFn
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import InvalidStrategy, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.windows import Sessions
from dataflow_core.runners.reference import ReferencePipelineRunner

S = 1000
GAP, SHORT, LATENESS = 3 * S, 5 * S, parse_duration("1d")


def final_counts(runner: ReferencePipelineRunner) -> dict:
    last = {}
    for p in runner.outputs[-1]:
        if not p.retraction:
            last[p.key] = p.value
    return {k: v for k, v in last.items() if v}


def test_late_view_merging_two_short_sessions_is_retracted_downstream():
    runner = ReferencePipelineRunner(short_sessions_per_ad(GAP, SHORT, LATENESS), 0)
    runner.advance_processing_time(1 * S)
    runner.add([(("u1", "ad1"), 1, 0), (("u1", "ad1"), 1, 2 * S)])  # session [0, 5s): 2s long
    runner.advance_processing_time(2 * S)
    runner.add([(("u1", "ad1"), 1, 6 * S)])  # session [6s, 9s): 0s long
    runner.advance_watermark(20 * S)
    assert final_counts(runner) == {"ad1": 2}
    # A late view at 4s bridges both sessions: [0, 9s) is 6s long, no longer short.
    runner.advance_processing_time(30 * S)
    runner.add([(("u1", "ad1"), 1, 4 * S)])
    retractions = [p for p in runner.outputs[0] if p.retraction]
    assert {(p.window.start, p.window.end) for p in retractions} >= {(0, 5 * S), (6 * S, 9 * S)}
    runner.advance_watermark(END_OF_TIME)
    assert final_counts(runner) == {}
    assert runner.dropped_pairs == [0, 0]


views = st.lists(
    st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.sampled_from(["ad1", "ad2"]), st.integers(0, 60 * S)),
    min_size=1, max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(views, st.lists(st.integers(1, 5), min_size=1, max_size=10), st.integers(0, 20 * S))
def test_two_stage_result_equals_batch_recomputation(views, bundle_sizes, lag):
    runner = ReferencePipelineRunner(short_sessions_per_ad(GAP, SHORT, LATENESS), 0)
    at, i, k = 0, 0, 0
    while i < len(views):
        size = bundle_sizes[k % len(bundle_sizes)]
        bundle = views[i : i + size]
        at += S
        runner.advance_processing_time(at)
        runner.add([((u, ad), 1, t) for u, ad, t in bundle])
        # A heuristic watermark that trails the largest time seen: later views may be late.
        runner.advance_watermark(max(t for _, _, t in views[: i + size]) - lag)
        i, k = i + size, k + 1
    runner.advance_processing_time(at + S)
    runner.advance_watermark(END_OF_TIME)
    assert runner.dropped_pairs == [0, 0]
    assert final_counts(runner) == {k: v for k, v in batch_short_sessions_per_ad(views, GAP, SHORT).items() if v}


class NoRetract(CombineFn):
    name = "no_retract"

    def create_accumulator(self):
        return 0

    def add_input(self, acc, value):
        return acc + 1

    def merge_accumulators(self, accs):
        return sum(accs)

    def extract_output(self, acc):
        return acc


def test_downstream_of_retractions_needs_a_retracting_combiner():
    up = WindowingStrategy(window_fn=Sessions(GAP), accumulation=AccumulationMode.RETRACTING, combiner=CountFn())
    down = WindowingStrategy(combiner=NoRetract())
    with pytest.raises(InvalidStrategy, match="no_retract.*cannot retract"):
        Pipeline.of(Stage("a", up), Stage("b", down, lambda p: [(p.key, 1)]))


def test_stage_watermark_waits_for_upstream_pending_work():
    from dataflow_core.model.strategy import TimestampCombiner
    from dataflow_core.model.triggers import AfterCount, Repeatedly
    from dataflow_core.model.windows import GlobalWindows

    up = WindowingStrategy(window_fn=Sessions(GAP), trigger=Repeatedly(AfterCount(2)),
                           accumulation=AccumulationMode.ACCUMULATING, combiner=CountFn(),
                           allowed_lateness=LATENESS, timestamp_combiner=TimestampCombiner.EARLIEST)
    down = WindowingStrategy(window_fn=GlobalWindows(), combiner=CountFn())
    runner = ReferencePipelineRunner(Pipeline.of(Stage("up", up), Stage("down", down, lambda p: [(p.key, 1)])), 0)
    runner.advance_processing_time(S)
    runner.add([("u1", 1, 10 * S)])  # session [10s, 13s), one element: no pane yet
    runner.advance_watermark(11 * S)
    upstream, downstream = runner.stages
    assert upstream.watermark == 11 * S
    # Its pane will be stamped with the earliest element time, 10s: the stage below waits.
    assert downstream.watermark == 10 * S
    runner.advance_watermark(60 * S)
    # The watermark passed the session's end with data waiting and no pane (an ON_TIME pane
    # is owed): still held at 10s until that pane comes out.
    assert downstream.watermark == 10 * S
    runner.advance_processing_time(2 * S)
    runner.add([("u1", 1, 11 * S)])
    assert [p.timing.value for p in runner.outputs[0]] == ["ON_TIME"]
    assert downstream.watermark == 60 * S
