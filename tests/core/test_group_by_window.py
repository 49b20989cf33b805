"""KeyedWindowSet details that the scenarios reach only in combination."""

from __future__ import annotations

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount
from dataflow_core.model.windows import Sessions
from dataflow_core.runners.reference import ReferenceRunner

S = 1000


def test_closed_session_owes_its_on_time_pane_until_collected_later():
    """A closed session that merged in unemitted data: the watermark passes its end (no
    trigger may fire) and garbage collection comes later; its final pane is ON_TIME."""
    strategy = WindowingStrategy(window_fn=Sessions(10 * S), trigger=AfterCount(2),
                                 accumulation=AccumulationMode.ACCUMULATING,
                                 allowed_lateness=1000 * S, combiner=SumFn())
    runner = ReferenceRunner(strategy, 0)
    runner.advance_processing_time(1 * S)
    fired = runner.add([("k", 1, 0), ("k", 2, 5 * S)])  # [0, 15s) fires and closes
    assert [(p.value, p.last) for p in fired] == [(3, True)]
    runner.add([("k", 4, 20 * S)])  # [20s, 30s) open, one element waiting
    assert runner.add([("k", 8, 12 * S)]) == []  # [12s, 22s) bridges both: closed, the 8 is dropped
    assert runner.dropped == 1
    assert runner.advance_watermark(100 * S) == []  # past the end, nothing may fire
    final = runner.advance_watermark(END_OF_TIME)
    assert [(p.value, p.timing.value, p.last) for p in final] == [(7, "ON_TIME", True)]


def test_keys_are_woken_only_when_the_watermark_reaches_their_windows():
    strategy = WindowingStrategy(window_fn=Sessions(10 * S), combiner=SumFn())
    runner = ReferenceRunner(strategy, 0)
    runner.add([("early", 1, 0), ("late", 1, 100 * S)])
    first = runner.advance_watermark(50 * S)
    assert [(p.key, p.value) for p in first] == [("early", 1)]
    second = runner.advance_watermark(200 * S)
    assert [(p.key, p.value) for p in second] == [("late", 1)]


# --- a backfill's corrections, adopted by live state (KeyedWindowSet.correct) ----------

from collections import defaultdict  # noqa: E402
from dataclasses import replace  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dataflow_core.model.group_by_window import Correction, Element, KeyedWindowSet  # noqa: E402
from dataflow_core.model.panes import PaneTiming, history_breaks  # noqa: E402
from dataflow_core.model.triggers import AfterProcessingTime, AfterWatermark  # noqa: E402
from dataflow_core.model.windows import FixedWindows  # noqa: E402

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
    truth = KeyedWindowSet("k", strategy)
    backfilled = {w: acc for w, (acc, _, _) in truth._rebuild(els(live + missed)).items()}
    fixes = [Correction(w, p, total, present=False) for w, (p, total) in standing.items() if w not in backfilled]
    fixes += [Correction(w, standing.get(w, (None, None))[0], standing.get(w, (None, None))[1], acc, w.max_timestamp)
              for w, acc in backfilled.items() if standing.get(w, (None, None))[1] != acc]
    corrected = ks.correct(fixes, at=20, watermark=wm, elements=els(live + missed))
    emitted += corrected.panes
    assert {w: s.acc for w, s in ks.windows.items()} == backfilled
    assert all(s.pending == 0 for s in ks.windows.values())
    later_panes = ks.add_bundle(els(later), at=30, watermark=wm)
    later_panes += ks.advance_watermark(wm, 5_000 * S, at=40)
    later_panes += ks.advance_watermark(5_000 * S, 100_000 * S, at=50)
    emitted += later_panes
    everything = {w: acc for w, (acc, _, _) in truth._rebuild(els(live + missed + later)).items()}
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
    totals = {w: acc for w, (acc, _, _) in backfill._rebuild(els(backfilled)).items()}
    emitted = backfill.correct([Correction(w, None, None, acc, w.max_timestamp) for w, acc in totals.items()],
                               at=5, watermark=END_OF_TIME).panes
    live = KeyedWindowSet("k", strategy)
    live.take_over([p for p in emitted if not p.retraction], live_wm * S, elements=els(backfilled))
    assert all(ws.pending == 0 for ws in live.windows.values())
    arrivals = [t for t in later if not new_only_later or t * S >= live_wm * S]
    emitted += live.add_bundle(els(arrivals), at=30, watermark=live_wm * S)
    emitted += live.fire_processing_timers(40, live_wm * S)
    emitted += live.advance_watermark(live_wm * S, 100_000 * S, at=50)
    for window, panes in _by_window(emitted).items():
        assert history_breaks(panes) == [], (window, panes)
        assert sum(p.timing is PaneTiming.ON_TIME and not p.retraction for p in panes) <= 1
    if mode.accumulates:
        everything = {w: acc for w, (acc, _, _) in KeyedWindowSet("k", strategy)._rebuild(
            els(backfilled + arrivals)).items()}
        finals = {w: p.value for w, (p, _) in _standing(emitted).items()}
        if mode is AccumulationMode.ACCUMULATING:  # merged-away sessions keep their (unretracted) panes
            finals = {w: v for w, v in finals.items() if w in everything}
        assert finals == everything
    else:  # discarding: the panes of a window add up to its total
        sums: dict = defaultdict(int)
        for p in emitted:
            sums[p.window] += p.value
        if shape == "fixed":
            assert dict(sums) == {w: acc for w, (acc, _, _) in KeyedWindowSet("k", strategy)._rebuild(
                els(backfilled + arrivals)).items()}
