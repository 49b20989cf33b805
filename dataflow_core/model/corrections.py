"""Correcting the past: a batch backfill's recomputed windows as panes that continue each
window's history (`correct`), and a backfill's windows adopted by the first live run
(`take_over`).

Both work on one key's `KeyedWindowSet` through its public window operations
(`remove_window`, `restore_window`, `publish`), so the streaming core's rules (pane
metadata from `describe_next_pane`, retractions of what a pane replaces, timers) apply to
a correction exactly as to a live pane. `fresh_correction` states, from the pane rules
alone, what `correct` emits for a window no run has emitted yet, so that a runner can
restate many such windows at once without running the model per window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Sequence

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.group_by_window import Element, KeyedWindowSet, in_end_order
from dataflow_core.model.panes import Pane, PaneHistory, PaneInfo, describe_next_pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant, earliest, latest
from dataflow_core.model.trigger_machine import TriggerContext
from dataflow_core.model.window_state import WindowState
from dataflow_core.model.windows import AssignContext, Window

__all__ = ["Corrected", "Correction", "FreshCorrection", "correct", "fresh_correction", "merged_into",
           "rebuild_windows", "take_over"]


@dataclass(frozen=True)
class Correction:
    """A batch backfill's recomputation of one window, beside what the results say of it."""

    window: Window
    standing: Pane | None  # the results' pane of the window (None: the results have no row)
    standing_total: Any = None  # the results' value: the window's total so far
    value: Any = None  # the recomputed output
    timestamp: Instant | None = None  # the recomputed pane timestamp (None: end of time)
    present: bool = True  # False: the window has lost all its input


@dataclass
class Corrected:
    """What corrections emit: the panes, and per window what its results row becomes
    (the pane whose metadata it takes and the window's total; None deletes the row)."""

    panes: list[Pane] = field(default_factory=list)
    results: list[tuple[Window, Pane | None, Any]] = field(default_factory=list)


Rebuilt = dict[Window, tuple[Any, "Instant | None", "Instant | None"]]
"""Per window: its accumulator and the least and greatest element time in it."""


@dataclass(frozen=True)
class FreshCorrection:
    """What `correct` emits, outside live state, for a window that no run has emitted (the
    results have no row for it): one pane carrying the recomputed value and timestamp,
    which is also the window's results row. Its metadata depends on the window only
    through whether the watermark has passed its end, so a runner can restate many such
    windows at once from `passed` and `early`."""

    watermark: Instant
    emitted_at: Instant
    passed: PaneInfo  # for a window ending at or before the watermark
    early: PaneInfo | None  # for one ending after it (None: the watermark is the end of time)

    def info(self, window: Window) -> PaneInfo:
        return self.passed if self.early is None or window.end <= self.watermark else self.early

    def pane(self, key: Hashable, window: Window, value: Any, timestamp: Instant) -> Pane:
        """The pane `correct` emits for `window` (also its results row, with `value`)."""
        i = self.info(window)
        return Pane.build(key, window, value, timestamp, i.timing, i.index, i.on_time_index, i.first, i.last,
                          self.emitted_at)


def fresh_correction(at: Instant, watermark: Instant) -> FreshCorrection:
    """`FreshCorrection` for corrections at `at` under `watermark`: the first pane of a window
    with no history (`PaneHistory.after(None, ...)`) as `describe_next_pane` describes it.
    No pane precedes it, so there is nothing to retract and its value is the total
    (`correct` asks `output_difference` only of a window with a previous total)."""

    def first_pane(end: Instant) -> PaneInfo:
        return describe_next_pane(PaneHistory.after(None, end, watermark), end, watermark, last=False)

    early = first_pane(watermark + 1) if watermark < END_OF_TIME else None
    return FreshCorrection(watermark, at, first_pane(watermark), early)


def correct(
    ks: KeyedWindowSet, corrections: Sequence[Correction], at: Instant, watermark: Instant,
    elements: Iterable[Element] | None = None,
) -> Corrected:
    """Emit a batch backfill's corrections of key `ks` as panes that continue each window's
    history.

    Each pane's metadata comes from `describe_next_pane` over the window's history: the
    set's window when it holds one (live state), else the history the results' standing
    pane implies. In retracting mode the standing pane is retracted first; a discarding
    pane carries the combiner's `output_difference` from the standing total. A window that
    lost all its input is retracted (retracting), or gets the empty aggregate (otherwise,
    where there is one); one that merged into a recomputed window (`merged_into`) is deleted
    in every mode, and the pane of the window it merged into declares it (`Pane.replaces`).
    Corrections are restatements: none is marked last, since the input
    can be rewritten again.

    With `elements` (all of the key's input the backfill read) `ks` is live state: each
    corrected window is kept, its accumulator rebuilt from them and nothing pending, so
    later input carries on from the corrected figures."""
    s = ks.strategy
    keep = elements is not None
    rebuilt = rebuild_windows(ks.key, s, elements) if elements is not None and s.accumulation.accumulates else {}
    empty = s.combiner.empty_output()
    into = merged_into(corrections) if s.window_fn.is_merging else {}
    out = Corrected()
    for c in sorted(corrections, key=lambda c: (c.present, c.window.end, c.window.start)):
        ws = _standing_window(ks, c, at, watermark)
        gone = c.window in into
        if not c.present and (gone or s.accumulation is AccumulationMode.RETRACTING or empty is None):
            out.panes += _withdrawn(ws, s, at)
            out.results.append((c.window, None, None))
            continue
        if c.present:  # its pane declares the windows merged into it (`Pane.replaces`)
            ws.merged_away += [w for w, target in into.items() if target == c.window and w not in ws.merged_away]
        total = c.value if c.present else empty
        parts = [d.standing_total for d in corrections if into.get(d.window) == c.window] if s.folds_merged_away else []
        emitted = _restated(ks, ws, c, total, at, watermark, parts)
        out.panes += emitted
        out.results.append((c.window, emitted[-1], total))
        if keep and c.present and s.gc_time(c.window) > watermark:
            _keep_corrected(ks, ws, rebuilt)
    return out


def merged_into(corrections: Sequence[Correction]) -> dict[Window, Window]:
    """Of a merging WindowFn's corrections of one key: each window that lost its input
    because it merged into a recomputed one (it has a standing pane and overlaps a present
    window), mapped to that window. It ceased to exist: deleted from the results in every
    accumulation mode, never restated at the empty aggregate."""
    present = [c.window for c in corrections if c.present]
    return {c.window: target for c in corrections if not c.present and c.standing is not None
            for target in present if _overlap(c.window, target)}


def _withdrawn(ws: WindowState, s: WindowingStrategy, at: Instant) -> list[Pane]:
    """The retractions of a window that lost all its input (retracting mode; none otherwise)."""
    return ws.replaced_at(at) if s.accumulation is AccumulationMode.RETRACTING else []


def _restated(
    ks: KeyedWindowSet, ws: WindowState, c: Correction, total: Any, at: Instant, watermark: Instant,
    parts: Sequence[Any] = (),
) -> list[Pane]:
    """The pane that restates window `ws` at `total` (preceded by the retractions of what it
    replaces): a discarding pane carries the difference from the standing total, which takes
    in the totals `parts` of the windows merged into it (`WindowingStrategy.current_panes`
    folds them into its total, so its pane log nets to `total`)."""
    s = ks.strategy
    ts = c.timestamp if c.present else (c.standing.timestamp if c.standing else c.window.max_timestamp)
    value = total
    before = ([c.standing_total] if c.standing is not None else []) + list(parts)
    if not s.accumulation.accumulates and before:
        value = s.combiner.output_difference(total, s.combiner.merge_outputs(before) if s.folds_merged_away
                                             else c.standing_total)
    info = describe_next_pane(ws.history, c.window.end, watermark, last=False)
    return ks.publish(ws, info, value, END_OF_TIME - 1 if ts is None else ts, at)


def _keep_corrected(ks: KeyedWindowSet, ws: WindowState, rebuilt: Rebuilt) -> None:
    """Keep a corrected window in live state with nothing pending: an accumulating window
    carries on from the rebuilt accumulator, a discarding one from an empty one."""
    s = ks.strategy
    acc, lo, hi = rebuilt.get(ws.window, (s.combiner.create_accumulator(), None, None))
    if not s.accumulation.accumulates:
        acc, lo, hi = s.combiner.create_accumulator(), None, None
    ws.acc, ws.ts_min, ws.ts_max, ws.pending = acc, lo, hi, 0
    ks.restore_window(ws)


def take_over(ks: KeyedWindowSet, standing: Sequence[Pane], watermark: Instant, elements: Iterable[Element] = ()) -> None:
    """Adopt into `ks` windows that another run emitted (a batch backfill before the pipeline
    went live), so that live input continues their histories instead of starting new ones.

    Each window keeps the history its `standing` pane implies (`PaneHistory.after`) and,
    in retracting mode, that pane as the one to retract; accumulating windows get their
    accumulator rebuilt from `elements` (the input that run counted). Nothing is emitted,
    nothing is pending, and windows `watermark` has already collected are not kept."""
    s = ks.strategy
    rebuilt = rebuild_windows(ks.key, s, elements) if s.accumulation.accumulates else {}
    for pane in standing:
        w = pane.window
        if w in ks.windows or s.gc_time(w) <= watermark:
            continue
        ws = _window_after(s, w, pane, watermark)
        ws.acc, ws.ts_min, ws.ts_max = rebuilt.get(w, (ws.acc, None, None))
        ks.restore_window(ws)


def _standing_window(ks: KeyedWindowSet, c: Correction, at: Instant, watermark: Instant) -> WindowState:
    """The corrected window's state, taken out of `ks`: the live window (merged with the
    live windows it now covers, for a merging WindowFn), or one whose history is what the
    results' standing pane implies."""
    s = ks.strategy
    w = c.window
    covered = [v for v in ks.windows if v == w or (c.present and s.window_fn.is_merging and _overlap(v, w))]
    parts = [ks.remove_window(v) for v in in_end_order(covered)]
    same = next((p for p in parts if p.window == w), None)
    ws = same if same is not None else _window_after(s, w, c.standing, watermark)
    others = [p for p in parts if p is not same]
    if others:
        ws.trigger = s.trigger.on_merge([p.trigger for p in [ws, *others]], TriggerContext(w, at, watermark))
        for p in others:
            ws.absorb(p)
    return ws


def _window_after(s: WindowingStrategy, w: Window, standing: Pane | None, watermark: Instant) -> WindowState:
    """A window known only by its standing pane (a results row): the history that pane
    implies, that pane to retract (retracting mode), an empty accumulator."""
    h = PaneHistory.after(standing, w.end, watermark)
    return WindowState(
        window=w, trigger=s.trigger.new_state(), acc=s.combiner.create_accumulator(), on_time=h.on_time,
        next_index=h.next_index, next_on_time_index=h.next_on_time_index,
        standing=standing if s.accumulation is AccumulationMode.RETRACTING else None,
    )


def rebuild_windows(key: Hashable, s: WindowingStrategy, elements: Iterable[Element]) -> Rebuilt:
    """Every window of `elements` (merged, for a merging WindowFn) with its accumulator and
    the least and greatest element time in it."""
    got: Rebuilt = {}
    for el in elements:
        for w in s.window_fn.assign(AssignContext(key, el.value, el.timestamp)):
            acc, lo, hi = got.get(w, (s.combiner.create_accumulator(), None, None))
            acc = s.combiner.retract_input(acc, el.value) if el.retraction else s.combiner.add_input(acc, el.value)
            got[w] = (acc, earliest((lo, el.timestamp)), latest((hi, el.timestamp)))
    if s.window_fn.is_merging:
        for result, parts in s.window_fn.merge(list(got)):
            merged = [got.pop(p) for p in parts]
            got[result] = (
                s.combiner.merge_accumulators([m[0] for m in merged]),
                earliest(m[1] for m in merged), latest(m[2] for m in merged),
            )
    return got


def _overlap(a: Window, b: Window) -> bool:
    return a.start < b.end and b.start < a.end
