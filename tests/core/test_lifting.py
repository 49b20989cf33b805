"""Combiner lifting (`model.lifting`, `KeyedWindowSet.add_combined`): a bundle pre-combined
per window gives the same panes, drop counts and state as its elements one by one, and
key-by-key runs with lifting equal the reference runner (one stage and two)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN, CountFn, SumFn
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.lifting import combine_bundle, lifts
from dataflow_core.model.pipeline import Pipeline, Stage
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import parse_duration as d
from dataflow_core.model.triggers import (
    AfterCount, AfterEach, AfterFirst, AfterPercentileWatermark, AfterProcessingTime, AfterWatermark,
    AlignedProcessingTime, Default, Never, OrFinally, Repeatedly,
)
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.runners.keyed import run_pipeline
from tests.core.histories import START, histories
from tests.core.test_keyed import keyed_input, reference

LIFTED_WINDOWS = st.sampled_from([FixedWindows(d("2m")), FixedWindows(d("5m"), d("1m")), GlobalWindows()])
# Finishing triggers too: their closed windows drop elements, which must be counted alike.
LIFTED_TRIGGERS = st.sampled_from([
    Default(), Repeatedly(AfterCount(2)), AfterCount(2), Never(),
    AfterWatermark(early=AfterProcessingTime(d("1m")), late=AfterCount(1)),
    AfterWatermark(early=AfterCount(3), late=AfterProcessingTime(d("30s"))),
    AfterWatermark(early=AlignedProcessingTime(d("1m"))),
    AfterEach(AfterCount(2), AfterCount(1), Repeatedly(AfterCount(3))),
    AfterFirst(AfterCount(3), AfterProcessingTime(d("1m"))),
    OrFinally(Repeatedly(AfterCount(1)), AfterCount(4)),
    Repeatedly(AlignedProcessingTime(d("1m"))),
])
COMBINERS = st.sampled_from(sorted(BUILT_IN))
LATENESS = st.sampled_from([d("1000d"), d("2m"), 0])


def make(window_fn, trigger, mode, lateness, combiner, tc=TimestampCombiner.END_OF_WINDOW) -> WindowingStrategy:
    if mode is AccumulationMode.RETRACTING and not BUILT_IN[combiner]().can_retract:
        mode = AccumulationMode.ACCUMULATING
    return WindowingStrategy(window_fn, trigger, mode, lateness, BUILT_IN[combiner](), tc)


def bag(panes) -> Counter:
    """Panes as a multiset (list values are not hashable)."""
    return Counter(repr(p) for _, p in panes)


def test_what_lifts():
    fixed = FixedWindows(d("1m"))
    assert lifts(WindowingStrategy(fixed, Default(), combiner=SumFn()))
    assert not lifts(WindowingStrategy(Sessions(d("1m")), Default(), combiner=SumFn()))
    assert not lifts(WindowingStrategy(SlidingWindows(d("2m"), d("1m")), Default(), combiner=SumFn()))
    assert not lifts(WindowingStrategy(fixed, AfterPercentileWatermark(0.5), combiner=SumFn()))
    assert not lifts(WindowingStrategy(fixed, Default(), combiner=SumFn()), exact_values=False)
    assert lifts(WindowingStrategy(fixed, Default(), combiner=CountFn()), exact_values=False)


@settings(max_examples=300, deadline=None)
@given(histories(keys=("a",)), LIFTED_WINDOWS, LIFTED_TRIGGERS, st.sampled_from(list(AccumulationMode)),
       LATENESS, COMBINERS, st.sampled_from(list(TimestampCombiner)), st.data())
def test_add_combined_equals_add_bundle(history, window_fn, trigger, mode, lateness, combiner, tc, data):
    """One key, step by step: timers, the bundle (some of it retractions where the combiner
    can take any), the watermark; panes, drop counts and state agree after every step."""
    s = make(window_fn, trigger, mode, lateness, combiner, tc)
    assert lifts(s)
    plain, lifted = KeyedWindowSet("a", s), KeyedWindowSet("a", s)
    retract_any = combiner in ("sum", "count", "mean")
    wm = START
    for h in history:
        for ks in (plain, lifted):
            assert ks.next_processing_timer() == plain.next_processing_timer()
        while (t := plain.next_processing_timer()) is not None and t < h.at:
            assert plain.fire_processing_timers(t, wm) == lifted.fire_processing_timers(t, wm)
        if h.add:
            els = [Element(v, t, retract_any and data.draw(st.booleans())) for _, v, t in h.add]
            els.sort(key=lambda e: (e.timestamp, e.retraction))
            assert plain.add_bundle(els, h.at, wm) == lifted.add_combined(combine_bundle(s, "a", els), h.at, wm)
        if h.watermark is not None and h.watermark > wm:
            assert plain.advance_watermark(wm, h.watermark, h.at) == lifted.advance_watermark(wm, h.watermark, h.at)
            wm = h.watermark
        assert (plain.dropped_pairs, plain.dropped_elements) == (lifted.dropped_pairs, lifted.dropped_elements)
        assert plain.to_state() == lifted.to_state()
        assert plain.output_hold(wm) == lifted.output_hold(wm)
        assert plain.next_watermark_deadline(wm) == lifted.next_watermark_deadline(wm)


@settings(max_examples=200, deadline=None)
@given(histories(), LIFTED_WINDOWS, LIFTED_TRIGGERS, st.sampled_from(list(AccumulationMode)), LATENESS, COMBINERS)
def test_one_stage_lifted_equals_unlifted_and_reference(history, window_fn, trigger, mode, lateness, combiner):
    pipeline = Pipeline.of(Stage("s", make(window_fn, trigger, mode, lateness, combiner)))
    ref = reference(pipeline, history)
    [plain] = run_pipeline(pipeline, *keyed_input(history))
    [lifted] = run_pipeline(pipeline, *keyed_input(history), lift=True)
    assert bag(lifted.panes) == bag(plain.panes) == Counter(map(repr, ref.outputs[0]))
    assert lifted.dropped_elements == plain.dropped_elements == sum(ks.dropped_elements for ks in ref.stages[0].keys.values())
    assert {k: v.to_state() for k, v in lifted.states.items()} == {k: v.to_state() for k, v in plain.states.items()}


KEYS = (("u1", "ad1"), ("u2", "ad1"), ("u1", "ad2"))


@settings(max_examples=150, deadline=None)
@given(histories(keys=KEYS), LIFTED_TRIGGERS, st.sampled_from(list(AccumulationMode)), COMBINERS,
       st.sampled_from([FixedWindows(d("2m")), Sessions(d("30s"))]), LIFTED_WINDOWS)
def test_two_stages_lifted_equal_unlifted_and_reference(history, trigger, mode, combiner, first, second):
    """Stage 1 (lifted when fixed) feeds stage 2 its panes and, retracting, its retractions."""
    one = make(first, AfterWatermark(early=AfterProcessingTime(d("1m")), late=AfterCount(1)), mode, d("2m"), "count")
    two = make(second, trigger, AccumulationMode.ACCUMULATING, d("1m"), combiner)
    per_ad = lambda pane: [(pane.key[1], pane.value)]  # noqa: E731
    pipeline = Pipeline.of(Stage("one", one), Stage("two", two, per_ad))
    ref = reference(pipeline, history)
    plain = run_pipeline(pipeline, *keyed_input(history))
    lifted = run_pipeline(pipeline, *keyed_input(history), lift=True)
    for n in range(2):
        want = Counter(map(repr, ref.outputs[n]))
        assert bag(plain[n].panes) == want, f"stage {n + 1} unlifted"
        assert bag(lifted[n].panes) == want, f"stage {n + 1} lifted"
        assert lifted[n].dropped_elements == plain[n].dropped_elements
