"""Corrections and take-over (`model.corrections`): a backfill's recomputed windows continue
each window's history, live state carries on from the corrected figures, and a window no
run has emitted gets the pane `fresh_correction` describes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, MaxFn, MeanFn, SumFn
from dataflow_core.model.corrections import Correction, correct, fresh_correction, rebuild_windows, take_over
from dataflow_core.model.group_by_window import Element, KeyedWindowSet
from dataflow_core.model.panes import PaneTiming, history_breaks
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount, AfterProcessingTime, AfterWatermark
from dataflow_core.model.windows import AssignContext, FixedWindows, GlobalWindows, Sessions, SlidingWindows

S = 1000

_times = st.lists(st.integers(0, 600), min_size=1, max_size=12)


def _standing(panes):
    """Per window, what an accumulating stage's results table holds after these panes: the
    last pane and its value (the window's total); a window retracted without a new pane
    is gone."""
    out = {}
    for p in panes:
        out[p.window] = None if p.retraction else (p, p.value)
    return {w: v for w, v in out.items() if v is not None}


def _by_window(panes):
    grouped = defaultdict(list)
    for p in panes:
        grouped[p.window].append(p)
    return grouped


@settings(max_examples=60, deadline=None)
@given(_times, _times, _times, st.sampled_from(["fixed", "sessions"]), st.booleans(), st.booleans())
def test_corrected_windows_carry_on_as_if_they_had_seen_the_backfill_input(live, missed, later, shape, retracting, early):  # noqa: PLR0913
    """Live state saw `live` only; a backfill over `live + missed` corrects it (with the
    live watermark before or past the windows' ends); then `later` arrives and the watermark
    passes everything. Every window then holds what one window set that saw everything
    holds, a later pane retracts exactly the correction, and each window's panes
    (live, correction, later) keep one history: one ON_TIME pane, indexes consecutive."""
    window_fn = FixedWindows(100 * S) if shape == "fixed" else Sessions(30 * S)
    mode = AccumulationMode.RETRACTING if retracting else AccumulationMode.ACCUMULATING
    strategy = WindowingStrategy(
        window_fn=window_fn,
        trigger=AfterWatermark(early=AfterProcessingTime(1), late=AfterCount(1)),
        accumulation=mode, allowed_lateness=10_000 * S, combiner=SumFn())
    els = lambda times: [Element(1, t * S) for t in times]  # noqa: E731
    ks = KeyedWindowSet("k", strategy)
    emitted = ks.add_bundle(els(live), at=0, watermark=0)
    emitted += ks.fire_processing_timers(10, 0)
    wm = 0 if early else 1_000 * S  # live is still early in every window, or past them all
    if wm:
        emitted += ks.advance_watermark(0, wm, at=15)
    standing = _standing(emitted)
    backfilled = {w: acc for w, (acc, _, _) in rebuild_windows("k", strategy, els(live + missed)).items()}
    fixes = [Correction(w, p, total, present=False) for w, (p, total) in standing.items() if w not in backfilled]
    fixes += [Correction(w, standing.get(w, (None, None))[0], standing.get(w, (None, None))[1], acc, w.max_timestamp)
              for w, acc in backfilled.items() if standing.get(w, (None, None))[1] != acc]
    corrected = correct(ks, fixes, at=20, watermark=wm, elements=els(live + missed))
    emitted += corrected.panes
    assert {w: s.acc for w, s in ks.windows.items()} == backfilled
    assert all(s.pending == 0 for s in ks.windows.values())
    later_panes = ks.add_bundle(els(later), at=30, watermark=wm)
    later_panes += ks.advance_watermark(wm, 5_000 * S, at=40)
    later_panes += ks.advance_watermark(5_000 * S, 100_000 * S, at=50)
    emitted += later_panes
    everything = {w: acc for w, (acc, _, _) in rebuild_windows("k", strategy, els(live + missed + later)).items()}
    finals = {w: p.value for w, (p, _) in _standing(emitted).items()}
    if not retracting:  # merged-away sessions keep their (unretracted) panes
        finals = {w: v for w, v in finals.items() if w in everything}
    assert finals == everything
    for window, panes in _by_window(emitted).items():
        assert history_breaks(panes) == [], (window, panes)
        if wm == 0 and window in everything:
            assert sum(p.timing is PaneTiming.ON_TIME and not p.retraction for p in panes) == 1
    if retracting:  # a later pane of a corrected window retracts the correction itself
        for p in later_panes:
            if p.retraction and p.window in {c.window for c in corrected.panes}:
                assert p.emitted_at == 30 or p.emitted_at >= 40
                assert any(c == replace(p, retraction=False, emitted_at=c.emitted_at) for c in corrected.panes) or \
                    any(q == replace(p, retraction=False, emitted_at=q.emitted_at) for q in later_panes)
    else:
        assert not any(p.retraction for p in emitted)


@settings(max_examples=80, deadline=None)
@given(_times, _times, st.sampled_from(["fixed", "sessions"]), st.sampled_from(list(AccumulationMode)),
       st.sampled_from([0, 150, 1_000]), st.booleans())
def test_a_live_run_takes_over_a_backfills_windows_and_continues_their_histories(  # noqa: PLR0913
    backfilled, later, shape, mode, live_wm, new_only_later,
):
    """A batch backfill (perfect watermark) emitted one ON_TIME pane per window of
    `backfilled`; a live window set takes those windows over at its watermark `live_wm`
    (behind, inside or past them), then `later` arrives and the watermark passes
    everything. Each window's panes (backfill + live) keep one history, and the final
    totals are those of one window set that saw all the input."""
    window_fn = FixedWindows(100 * S) if shape == "fixed" else Sessions(30 * S)
    strategy = WindowingStrategy(
        window_fn=window_fn, trigger=AfterWatermark(early=AfterProcessingTime(1), late=AfterCount(1)),
        accumulation=mode, allowed_lateness=10_000 * S, combiner=SumFn())
    els = lambda times: [Element(1, t * S) for t in times]  # noqa: E731
    backfill = KeyedWindowSet("k", strategy)
    totals = {w: acc for w, (acc, _, _) in rebuild_windows("k", strategy, els(backfilled)).items()}
    emitted = correct(backfill, [Correction(w, None, None, acc, w.max_timestamp) for w, acc in totals.items()],
                               at=5, watermark=END_OF_TIME).panes
    live = KeyedWindowSet("k", strategy)
    take_over(live, [p for p in emitted if not p.retraction], live_wm * S, elements=els(backfilled))
    assert all(ws.pending == 0 for ws in live.windows.values())
    arrivals = [t for t in later if not new_only_later or t * S >= live_wm * S]
    emitted += live.add_bundle(els(arrivals), at=30, watermark=live_wm * S)
    emitted += live.fire_processing_timers(40, live_wm * S)
    emitted += live.advance_watermark(live_wm * S, 100_000 * S, at=50)
    for window, panes in _by_window(emitted).items():
        assert history_breaks(panes) == [], (window, panes)
        assert sum(p.timing is PaneTiming.ON_TIME and not p.retraction for p in panes) <= 1
    if mode.accumulates:
        everything = {w: acc for w, (acc, _, _) in rebuild_windows("k", strategy, els(backfilled + arrivals)).items()}
        finals = {w: p.value for w, (p, _) in _standing(emitted).items()}
        if mode is AccumulationMode.ACCUMULATING:  # merged-away sessions keep their (unretracted) panes
            finals = {w: v for w, v in finals.items() if w in everything}
        assert finals == everything
    else:  # discarding: the panes of a window add up to its total
        sums: dict = defaultdict(int)
        for p in emitted:
            sums[p.window] += p.value
        if shape == "fixed":
            assert dict(sums) == {w: acc for w, (acc, _, _) in rebuild_windows("k", strategy, els(backfilled + arrivals)).items()}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([FixedWindows(100 * S), SlidingWindows(100 * S, 50 * S), Sessions(30 * S), GlobalWindows()]),
       st.sampled_from(list(AccumulationMode)), st.sampled_from([SumFn(), CountFn(), MeanFn(), MaxFn()]),
       st.sampled_from(list(TimestampCombiner)), st.integers(0, 600), st.sampled_from([0, 100, 250, 1_000, None]))
def test_fresh_correction_is_what_correct_emits_for_a_window_no_run_emitted(  # noqa: PLR0913
    window_fn, mode, combiner, tc, time, watermark,
):
    """A runner restates windows the results do not have from `fresh_correction` alone (in
    Spark SQL); the model, asked window by window, emits exactly that pane and results row."""
    if mode is AccumulationMode.RETRACTING and not combiner.can_retract:
        mode = AccumulationMode.ACCUMULATING
    strategy = WindowingStrategy(window_fn, AfterWatermark(late=AfterCount(1)), mode, 0, combiner, tc)
    wm = END_OF_TIME if watermark is None else watermark * S
    fresh = fresh_correction(20, wm)
    for w in window_fn.assign(AssignContext("k", 1, time * S)):
        done = correct(KeyedWindowSet("k", strategy), [Correction(w, None, None, 7, w.max_timestamp)], 20, wm)
        pane = fresh.pane("k", w, 7, w.max_timestamp)
        assert done.panes == [pane]
        assert done.results == [(w, pane, 7)]
