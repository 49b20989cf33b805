"""Key-by-key execution (`runners.keyed`, what Spark executors run) equals the reference
runners: one stage over random histories, and two stages with downstream watermark holds."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.group_by_window import Element
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
from dataflow_core.model.windows import FixedWindows, Sessions
from dataflow_core.runners.keyed import Arrival, run_pipeline
from dataflow_core.runners.schedule import Schedule, Step
from dataflow_core.runners.reference import ReferencePipelineRunner
from tests.core.histories import START, histories
from tests.core.test_properties import LATENESS, TRIGGERS, WINDOWS, strategy


def keyed_input(history) -> tuple[Schedule, dict]:
    """Each history step is one schedule step; its elements arrive there, per key."""
    steps, arrivals, wm = [], {}, START
    for n, h in enumerate(history):
        if h.watermark is not None:
            wm = max(wm, h.watermark)
        steps.append(Step((n,), h.at, wm))
        by_key: dict = {}
        for key, value, t in h.add:
            by_key.setdefault(key, []).append(Element(value, t))
        for key, els in by_key.items():
            arrivals.setdefault(key, []).append(Arrival((n,), h.at, tuple(els)))
    return Schedule(steps, START), arrivals


def reference(pipeline: Pipeline, history) -> ReferencePipelineRunner:
    runner = ReferencePipelineRunner(pipeline, START)
    for h in history:
        runner.advance_processing_time(h.at)
        if h.add:
            runner.add(h.add)
        if h.watermark is not None:
            runner.advance_watermark(h.watermark)
    return runner


@settings(max_examples=200, deadline=None)
@given(histories(), WINDOWS, TRIGGERS, st.sampled_from(list(AccumulationMode)), LATENESS)
def test_one_stage_key_by_key_equals_reference(history, window_fn, trigger, mode, lateness):
    pipeline = Pipeline.of(Stage("s", strategy(window_fn, trigger, mode, lateness)))
    ref = reference(pipeline, history)
    [run] = run_pipeline(pipeline, *keyed_input(history))
    assert Counter(p for _, p in run.panes) == Counter(ref.outputs[0])
    assert run.dropped_elements == sum(ks.dropped_elements for ks in ref.stages[0].keys.values())


KEYS = (("u1", "ad1"), ("u2", "ad1"), ("u1", "ad2"))


@settings(max_examples=200, deadline=None)
@given(histories(keys=KEYS), TRIGGERS, st.booleans(), st.sampled_from(list(TimestampCombiner)))
def test_two_stages_key_by_key_equal_reference(history, trigger, retracting, timestamps):
    """Stage 1's early panes with EARLIEST timestamps hold stage 2's watermark back."""
    sessions = WindowingStrategy(
        Sessions(30_000), AfterWatermark(early=AfterProcessingTime(60_000), late=AfterCount(1)),
        AccumulationMode.RETRACTING if retracting else AccumulationMode.ACCUMULATING,
        120_000, CountFn(), timestamps,
    )
    per_ad = WindowingStrategy(FixedWindows(120_000), trigger, AccumulationMode.ACCUMULATING, 60_000, SumFn())
    short = lambda pane: [(pane.key[1], int(pane.window.end - pane.window.start < 90_000))]  # noqa: E731
    pipeline = Pipeline.of(Stage("sessions", sessions), Stage("per_ad", per_ad, short))
    ref = reference(pipeline, history)
    runs = run_pipeline(pipeline, *keyed_input(history))
    for n, run in enumerate(runs):
        assert Counter(p for _, p in run.panes) == Counter(ref.outputs[n]), f"stage {n + 1}"
