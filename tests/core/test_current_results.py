"""The results rule (`WindowingStrategy.current_panes`) and the pane gate's own window check
(`quality.output_gates._checked_window`, the Python the gate runs in executors) over every
history the reference runner emits, for every combiner the api exports, every window
function, accumulation mode and trigger family:

- once the watermark reaches the end, what the panes leave is a plain group-by of all the
  data, in every mode that has a total (accumulating, retracting, discarding panes that add
  up): a discarding session merged from sessions that had fired counts their panes too;
- the pane gate's check of each window, on the pane log's rows, passes every pane.

No Spark: `_checked_window` works on plain rows."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core import api
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CombineFn, SumFn
from dataflow_core.model.pane_codec import pane_to_row
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration as d
from dataflow_core.model.triggers import (
    AfterCount, AfterEach, AfterFirst, AfterPercentileWatermark, AfterProcessingTime, AfterWatermark,
    AlignedProcessingTime, Default, Never, OrFinally, Repeatedly,
)
from dataflow_core.model.windows import AssignContext, FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.quality.output_gates import GATE_COLUMNS, _checked_window
from dataflow_core.runners.reference import ReferenceRunner
from tests.core.histories import START, histories, run

COMBINERS = [getattr(api, n) for n in api.__all__
             if isinstance(getattr(api, n), type) and issubclass(getattr(api, n), CombineFn)
             and getattr(api, n) is not CombineFn]
WINDOWS = [FixedWindows(d("2m")), SlidingWindows(d("3m"), d("1m")), Sessions(d("1m")), GlobalWindows()]
# Triggers that never close a window before the end (a closed window drops what arrives
# later, which a group-by of all the data would count), one per family.
OPEN_TRIGGERS = [
    Default(), Never(), Repeatedly(AfterCount(2)), Repeatedly(AlignedProcessingTime(d("1m"))),
    AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
    AfterWatermark(early=AfterProcessingTime(d("1m")), late=AfterProcessingTime(d("30s"))),
    Repeatedly(AfterFirst(AfterCount(3), AfterProcessingTime(d("40s")))),
    Repeatedly(AfterPercentileWatermark(0.5)),
]
# Every family, closing ones too (the gate's check holds of any history).
TRIGGERS = OPEN_TRIGGERS + [
    AfterCount(3), AfterEach(AfterProcessingTime(d("30s")), AfterWatermark(late=AfterCount(2))),
    OrFinally(Repeatedly(AfterProcessingTime(d("20s"))), AfterWatermark()), AfterWatermark(),
]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def test_the_draws_cover_every_combiner_the_api_exports():
    assert {c.name for c in (make() for make in COMBINERS)} == {
        "sum", "count", "mean", "min", "max", "list", "distinct_count"}


def group_by(strategy: WindowingStrategy, elements) -> dict:
    """Each final window's output over all its elements, computed without the model's
    panes: assign, merge overlapping windows of a key, combine."""
    fn, combiner = strategy.window_fn, strategy.combiner
    per_key: dict = defaultdict(list)
    for key, value, t in elements:
        for w in fn.assign(AssignContext(key, value, t)):
            per_key[key].append((w, value))
    out = {}
    for key, pairs in per_key.items():
        mapping = {w: w for w, _ in pairs}
        if fn.is_merging:
            for span, parts in fn.merge(list(mapping)):
                for part in parts:
                    mapping[part] = span
        values: dict = defaultdict(list)
        for w, v in pairs:
            values[mapping[w]].append(v)
        for w, vs in values.items():
            out[(key, w)] = combiner.extract_output(combiner.add_inputs(combiner.create_accumulator(), vs))
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(histories(), st.sampled_from(WINDOWS), st.sampled_from(OPEN_TRIGGERS), st.sampled_from(list(AccumulationMode)),
       st.sampled_from(COMBINERS))
def test_what_the_panes_leave_at_the_end_is_a_group_by_of_all_the_data(history, window_fn, trigger, mode, make):
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=d("1000d"), combiner=make())
    if mode is AccumulationMode.DISCARDING and strategy.combiner.output_merge is None:
        return  # no total: each pane is its increment's aggregate (docs/model.md, Spark decision 7)
    runner = ReferenceRunner(strategy, START)
    panes = run(runner, history)
    assert runner.dropped_pairs == 0
    got = {kw: p.value for kw, p in strategy.current_panes(panes).items()}
    assert got == group_by(strategy, [el for step in history for el in step.add])


def test_a_discarding_session_merged_from_fired_sessions_counts_their_panes():
    """The issue's case: two sessions fire, a late element bridges them; the merged
    session's own pane holds the bridge only (Beam's rule, tests/conformance/extra/
    sessions_discarding.yaml), and its total is all three."""
    strategy = WindowingStrategy(Sessions(10), Repeatedly(AfterCount(1)), AccumulationMode.DISCARDING, 1000, SumFn())
    runner = ReferenceRunner(strategy, START)
    panes = runner.add([("k", 5, 0)]) + runner.add([("k", 7, 15)]) + runner.add([("k", 1, 8)])
    assert [p.value for p in panes] == [5, 7, 1]
    assert {w: p.value for (_, w), p in strategy.current_panes(panes).items()} == {panes[-1].window: 13}


def log_row(pane: Pane) -> dict:
    """A pane as a row of the pane log, as the gate reads it (timestamps, not ms)."""
    at = lambda ms: None if ms is None else EPOCH + dt.timedelta(milliseconds=ms)  # noqa: E731
    row = pane_to_row(pane)
    return {"window_start": at(row["window_start"]), "window_end": at(row["window_end"]), "value": row["value"],
            "timestamp": at(row["ts"]), "timing": row["timing"], "pane_index": row["pane_index"],
            "on_time_index": row["on_time_index"], "is_first": row["is_first"], "is_last": row["is_last"],
            "is_retraction": row["is_retraction"], "emitted_at": at(row["emitted_at"])}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(histories(), st.sampled_from(WINDOWS), st.sampled_from(TRIGGERS), st.sampled_from(list(AccumulationMode)),
       st.sampled_from(COMBINERS), st.sampled_from([d("1000d"), d("2m"), 0]))
def test_the_pane_gates_window_check_passes_every_history_the_model_emits(
        history, window_fn, trigger, mode, make, lateness):
    combiner = make()
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=lateness, combiner=combiner)
    by_window: dict = defaultdict(list)
    for p in run(ReferenceRunner(strategy, START), history):
        by_window[(p.key, p.window)].append(log_row(p))
    for kw, rows in by_window.items():
        for row in _checked_window(list(reversed(rows)), combiner):  # the gate finds the order itself
            failed = [c for c in GATE_COLUMNS.values() if row[c] is False]
            assert not failed, (kw, failed, row)
            assert row[GATE_COLUMNS["value_present"]] is True
            assert row["window_end"] is None or row["window_end"] > row["window_start"]
