"""Laws of the model, checked on random histories, windows and triggers."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.triggers import (
    AfterCount,
    AfterEach,
    AfterFirst,
    AfterPercentileWatermark,
    AfterProcessingTime,
    AfterWatermark,
    AlignedProcessingTime,
    Default,
    Never,
    OrFinally,
    Repeatedly,
)
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows, merge_overlapping
from dataflow_core.runners.reference import ReferenceRunner
from tests.core.histories import START, Step, histories, run

WINDOWS = st.sampled_from(
    [FixedWindows(parse_duration("2m")), SlidingWindows(parse_duration("3m"), parse_duration("1m")),
     Sessions(parse_duration("1m")), GlobalWindows(), FixedWindows(parse_duration("5m"), parse_duration("1m"))]
)
# Triggers that never finish, so no element is dropped for a closed window and every
# window's data reaches some pane by the end.
TRIGGERS = st.sampled_from(
    [Default(), Repeatedly(AfterCount(2)), Repeatedly(AfterCount(1)),
     AfterWatermark(early=AfterProcessingTime(parse_duration("1m")), late=AfterCount(1)),
     AfterWatermark(early=AfterCount(3), late=AfterProcessingTime(parse_duration("30s"))),
     Repeatedly(AlignedProcessingTime(parse_duration("1m")))]
)
LATENESS = st.sampled_from([parse_duration("1000d"), parse_duration("2m"), 0])


def strategy(window_fn, trigger, mode, lateness) -> WindowingStrategy:
    return WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                             allowed_lateness=lateness, combiner=SumFn())


def replay(window_fn, trigger, mode, lateness, history):
    runner = ReferenceRunner(strategy(window_fn, trigger, mode, lateness), START)
    return run(runner, history), runner


def pane_id(p):
    return (p.key, p.window, p.value, p.index, p.timing, p.on_time_index, p.timestamp)


@settings(max_examples=150, deadline=None)
@given(histories(), WINDOWS, TRIGGERS, LATENESS)
def test_retracting_is_accumulating_plus_retractions(history, window_fn, trigger, lateness):
    acc, _ = replay(window_fn, trigger, AccumulationMode.ACCUMULATING, lateness, history)
    ret, _ = replay(window_fn, trigger, AccumulationMode.RETRACTING, lateness, history)
    assert [p for p in ret if not p.retraction] == acc
    # Every retraction cancels a pane emitted earlier, at most once.
    emitted = Counter()
    for p in ret:
        if p.retraction:
            assert emitted[pane_id(p)] > 0, f"retracts a pane never emitted: {p}"
            emitted[pane_id(p)] -= 1
        else:
            emitted[pane_id(p)] += 1


@settings(max_examples=150, deadline=None)
@given(histories(), WINDOWS, TRIGGERS, LATENESS)
def test_retracting_nets_to_standing_accumulating_panes(history, window_fn, trigger, lateness):
    acc, _ = replay(window_fn, trigger, AccumulationMode.ACCUMULATING, lateness, history)
    ret, _ = replay(window_fn, trigger, AccumulationMode.RETRACTING, lateness, history)
    net = Counter()
    for p in ret:
        net[pane_id(p)] += -1 if p.retraction else 1
    net = +net  # drop zero counts
    # Standing accumulating panes: the last pane of every window not merged into a larger one.
    last = {}
    for p in acc:
        last[(p.key, p.window)] = p
    windows_by_key = defaultdict(list)
    for key, w in last:
        windows_by_key[key].append(w)
    standing = Counter(
        pane_id(p) for (key, w), p in last.items()
        if not any(o != w and o.start <= w.start and w.end <= o.end for o in windows_by_key[key])
    )
    assert net == standing


@settings(max_examples=150, deadline=None)
@given(histories(), WINDOWS, TRIGGERS, LATENESS)
def test_discarding_panes_add_up_to_accumulating_total(history, window_fn, trigger, lateness):
    dis, dis_runner = replay(window_fn, trigger, AccumulationMode.DISCARDING, lateness, history)
    acc, acc_runner = replay(window_fn, trigger, AccumulationMode.ACCUMULATING, lateness, history)
    assert dis_runner.dropped_pairs == acc_runner.dropped_pairs
    last = {}
    for p in acc:
        last[(p.key, p.window)] = p.value
    finals = defaultdict(list)
    for key, w in last:
        finals[key].append(w)
    for key, windows in finals.items():
        for w in windows:
            if any(o != w and o.start <= w.start and w.end <= o.end for o in windows):
                continue  # merged into a larger session
            parts = sum(p.value for p in dis if p.key == key and w.start <= p.window.start and p.window.end <= w.end)
            assert parts == last[(key, w)], (key, w)


def batch_group_by(window_fn, elements):
    """A plain group-by per window over all data: what the default trigger must produce."""
    from dataflow_core.model.windows import AssignContext

    per_key = defaultdict(list)
    for key, value, t in elements:
        for w in window_fn.assign(AssignContext(key, value, t)):
            per_key[key].append((w, value))
    result = {}
    for key, pairs in per_key.items():
        windows = [w for w, _ in pairs]
        mapping = {w: w for w in windows}
        if window_fn.is_merging:
            for span, parts in merge_overlapping(windows):
                for part in parts:
                    mapping[part] = span
        for w, value in pairs:
            result[(key, mapping[w])] = result.get((key, mapping[w]), 0) + value
    return result


@settings(max_examples=150, deadline=None)
@given(histories(), WINDOWS, st.sampled_from(list(AccumulationMode)))
def test_default_trigger_with_watermark_at_end_equals_group_by(history, window_fn, mode):
    elements = [el for step in history for el in step.add]
    # Everything arrives before the watermark moves: one final move to the end of time.
    only_data = [Step(s.at, add=s.add) for s in history if s.add] + [history[-1]]
    panes, runner = replay(window_fn, Default(), mode, 0, only_data)
    assert runner.dropped_pairs == 0
    got = {(p.key, p.window): p.value for p in panes if not p.retraction}
    assert len(got) == len([p for p in panes if not p.retraction])  # one pane per window
    assert all(p.last and p.timing.value == "ON_TIME" for p in panes)
    assert got == batch_group_by(window_fn, elements)


@settings(max_examples=100, deadline=None)
@given(histories(), TRIGGERS, st.sampled_from(list(AccumulationMode)), st.randoms(use_true_random=False))
def test_sessions_do_not_depend_on_order_within_a_bundle(history, trigger, mode, rnd: random.Random):
    sessions = Sessions(parse_duration("1m"))
    shuffled = []
    for s in history:
        add = list(s.add)
        rnd.shuffle(add)
        shuffled.append(Step(s.at, tuple(add), s.watermark))
    a, ra = replay(sessions, trigger, mode, parse_duration("1000d"), history)
    b, rb = replay(sessions, trigger, mode, parse_duration("1000d"), shuffled)
    key = lambda p: (p.key, p.window, p.value, p.index, p.timing, p.on_time_index, p.last, p.retraction, p.emitted_at)
    assert Counter(map(key, a)) == Counter(map(key, b))
    assert ra.dropped_pairs == rb.dropped_pairs


class BruteForceRunner(ReferenceRunner):
    """Asks every key at every step instead of keeping heaps of timers and deadlines: slow,
    obviously complete, and so an oracle for the reference runner's scheduling."""

    def next_timer(self):
        return min((t for ks in self.keys.values() if (t := ks.next_processing_timer()) is not None), default=None)

    def fire_timers_at(self, t):
        self.processing_time = t
        return [p for ks in self.keys.values() for p in ks.fire_processing_timers(t, self.watermark)]

    def advance_watermark(self, to):
        old, self.watermark = self.watermark, max(self.watermark, min(to, END_OF_TIME))
        if self.watermark == old:
            return []
        return [p for ks in self.keys.values() for p in ks.advance_watermark(old, self.watermark, self.processing_time)]


SCHEDULING_TRIGGERS = st.sampled_from(
    [Default(), AfterCount(2), AfterWatermark(), Never(), AfterPercentileWatermark(0.5),
     Repeatedly(AfterPercentileWatermark(0.9)),
     AfterEach(AfterProcessingTime(parse_duration("30s")), AfterWatermark(late=AfterCount(2))),
     AfterFirst(AfterCount(3), AlignedProcessingTime(parse_duration("1m"))),
     OrFinally(Repeatedly(AfterProcessingTime(parse_duration("20s"))), AfterWatermark())]
)


@settings(max_examples=500, deadline=None)
@given(histories(keys=("a", "b", "c", "d", "e")), WINDOWS, SCHEDULING_TRIGGERS,
       st.sampled_from(list(AccumulationMode)), LATENESS)
def test_runner_scheduling_equals_asking_every_key(history, window_fn, trigger, mode, lateness):
    s = strategy(window_fn, trigger, mode, lateness)
    fast, slow = ReferenceRunner(s, START), BruteForceRunner(s, START)
    key = lambda p: (p.key, p.window, p.value, p.index, p.timing, p.on_time_index, p.last, p.retraction, p.emitted_at)
    assert Counter(map(key, run(fast, history))) == Counter(map(key, run(slow, history)))
    assert fast.dropped_pairs == slow.dropped_pairs
