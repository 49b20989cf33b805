"""Where in event time: window assignment and merging (FORMAT.md, "Windows")."""

from __future__ import annotations

from typing import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import combiner_named
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration, parse_instant
from dataflow_core.model.triggers import AfterWatermark, Repeatedly
from dataflow_core.model.windows import (
    GLOBAL_WINDOW,
    AssignContext,
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    Window,
    WindowFn,
    merge_overlapping,
)
from dataflow_core.runners.reference import ReferenceRunner

S = 1000
M = 60 * S


def assign(fn: WindowFn, t: int, key: str = "k", value: object = 1) -> list[Window]:
    return list(fn.assign(AssignContext(key, value, t)))


def bounds(windows: Sequence[Window]) -> list[tuple[int, int]]:
    return [(w.start, w.end) for w in windows]


# --- FixedWindows -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "t, expected",
    [(0, (0, 10 * S)), (9_999, (0, 10 * S)), (10 * S, (10 * S, 20 * S)), (-1, (-10 * S, 0)), (-10 * S, (-10 * S, 0))],
)
def test_fixed_windows_half_open_including_negative_times(t: int, expected: tuple[int, int]):
    assert bounds(assign(FixedWindows(10 * S), t)) == [expected]


@pytest.mark.parametrize(
    "t, expected",
    [(3 * S, (3 * S, 13 * S)), (2_999, (-7 * S, 3 * S)), (-1, (-7 * S, 3 * S)), (-7 * S, (-7 * S, 3 * S)), (-7_001, (-17 * S, -7 * S))],
)
def test_fixed_windows_with_offset(t: int, expected: tuple[int, int]):
    assert bounds(assign(FixedWindows(10 * S, offset=3 * S), t)) == [expected]


def test_fixed_windows_offset_is_taken_modulo_the_size():
    for t in (-25 * S, -1, 0, 7 * S, 12_345):
        assert assign(FixedWindows(10 * S, offset=13 * S), t) == assign(FixedWindows(10 * S, offset=3 * S), t)


@settings(deadline=None)  # timing varies on a loaded CI machine
@given(
    size=st.integers(1, 10**7),
    offset=st.integers(0, 10**7),
    t=st.integers(-(10**12), 10**12),
)
def test_fixed_windows_formula(size: int, offset: int, t: int):
    (w,) = assign(FixedWindows(size, offset), t)
    start = (t - offset) // size * size + offset  # FORMAT.md's formula
    assert (w.start, w.end) == (start, start + size)
    assert w.start <= t < w.end
    assert w.max_timestamp == w.end - 1


@pytest.mark.parametrize("bad", [0, -5])
def test_fixed_windows_reject_a_non_positive_size(bad: int):
    with pytest.raises(ValueError, match="size must be positive"):
        FixedWindows(bad)


# --- SlidingWindows ---------------------------------------------------------------------


def test_sliding_windows_assign_size_over_period_windows_with_half_open_boundaries():
    fn = SlidingWindows(3 * M, M)
    assert bounds(assign(fn, 90 * S)) == [(-M, 2 * M), (0, 3 * M), (M, 4 * M)]
    # exactly on a start: belongs to the window starting there, not to the one ending there
    assert bounds(assign(fn, 2 * M)) == [(0, 3 * M), (M, 4 * M), (2 * M, 5 * M)]
    assert bounds(assign(fn, 2 * M - 1)) == [(-M, 2 * M), (0, 3 * M), (M, 4 * M)]


def test_sliding_windows_with_offset():
    fn = SlidingWindows(2 * M, M, offset=15 * S)
    assert bounds(assign(fn, 0)) == [(-105 * S, 15 * S), (-45 * S, 75 * S)]
    assert bounds(assign(fn, 15 * S)) == [(-45 * S, 75 * S), (15 * S, 135 * S)]


@settings(deadline=None)  # timing varies on a loaded CI machine
@given(
    period=st.integers(1, 10**6),
    factor=st.integers(1, 12),
    offset=st.integers(0, 10**6),
    t=st.integers(-(10**11), 10**11),
)
def test_sliding_windows_every_window_containing_the_time_and_no_other(period: int, factor: int, offset: int, t: int):
    size = period * factor
    windows = assign(SlidingWindows(size, period, offset), t)
    assert len(windows) == factor  # size / period
    assert all(w.start <= t < w.end and w.end - w.start == size for w in windows)
    assert all((w.start - offset) % period == 0 for w in windows)
    assert len(set(windows)) == len(windows)


def test_sliding_windows_period_not_dividing_size_still_cover_exactly_the_containing_windows():
    fn = SlidingWindows(50 * S, 20 * S)
    for t in range(-60 * S, 60 * S, 1700):
        got = bounds(assign(fn, t))
        want = [(s, s + 50 * S) for s in range(-200 * S, 200 * S, 20 * S) if s <= t < s + 50 * S]
        assert got == want, t


def test_sliding_windows_drop_only_the_expired_windows_of_an_element():
    strategy = WindowingStrategy(window_fn=SlidingWindows(3 * M, M), combiner=combiner_named("count"))
    runner = ReferenceRunner(strategy, parse_instant("12:02:00"))
    runner.add([("k", 1, parse_instant("12:01:30"))])
    # [11:59, 12:02) is already expired at watermark 12:02; [12:00, 12:03) and [12:01, 12:04) are not
    assert runner.dropped_pairs == 1
    panes = runner.advance_watermark(END_OF_TIME)
    assert sorted((p.window.start, p.value) for p in panes) == [
        (parse_instant("12:00:00"), 1),
        (parse_instant("12:01:00"), 1),
    ]


# --- Sessions ---------------------------------------------------------------------------


def test_session_window_is_time_to_time_plus_gap():
    assert bounds(assign(Sessions(10 * S), 5 * S)) == [(5 * S, 15 * S)]
    assert Sessions(10 * S).is_merging and not FixedWindows(10 * S).is_merging


def test_sessions_merge_transitively_and_leave_touching_windows_apart():
    a, b, c = IntervalWindow(0, 10), IntervalWindow(20, 30), IntervalWindow(8, 22)
    d, e = IntervalWindow(30, 40), IntervalWindow(100, 110)
    assert Sessions(10).merge([a, b]) == []
    groups = Sessions(10).merge([b, e, a, c, d])
    # a-c-b merge through c; d only touches b's end (half-open), e is far away
    assert groups == [(IntervalWindow(0, 30), [a, c, b])]


def test_merge_overlapping_groups_each_cluster_separately():
    ws = [IntervalWindow(0, 10), IntervalWindow(5, 15), IntervalWindow(50, 60), IntervalWindow(55, 70), IntervalWindow(80, 90)]
    assert merge_overlapping(ws) == [
        (IntervalWindow(0, 15), ws[0:2]),
        (IntervalWindow(50, 70), ws[2:4]),
    ]


def test_sessions_merge_transitively_through_the_runner():
    strategy = WindowingStrategy(window_fn=Sessions(parse_duration("1m")), combiner=combiner_named("list"))
    runner = ReferenceRunner(strategy, parse_instant("12:00:00"))
    for value, t in ((1, "12:00:00"), (2, "12:01:30"), (3, "12:03:00"), (4, "12:00:45"), (5, "12:02:15")):
        runner.add([("k", value, parse_instant(t))])
        if value == 3:  # three sessions so far, none touching another
            assert len(runner.keys["k"].windows) == 3
    runner.add([("other", 9, parse_instant("12:00:30"))])  # other keys never merge with k
    assert sorted(bounds(runner.keys["k"].windows)) == [(parse_instant("12:00:00"), parse_instant("12:04:00"))]
    panes = runner.advance_watermark(END_OF_TIME)
    assert sorted((p.key, p.value) for p in panes) == [("k", [1, 2, 3, 4, 5]), ("other", [9])]


def test_sessions_gap_must_be_positive():
    with pytest.raises(ValueError, match="gap must be positive"):
        Sessions(0)


# --- GlobalWindows ----------------------------------------------------------------------


def test_global_windows_put_every_element_in_the_one_global_window():
    fn = GlobalWindows()
    assert assign(fn, -(10**12)) == assign(fn, 0) == assign(fn, 10**12) == [GLOBAL_WINDOW]
    assert GLOBAL_WINDOW == GlobalWindow() and GLOBAL_WINDOW.end == END_OF_TIME


def test_global_window_is_emitted_only_when_the_watermark_reaches_the_end_of_time():
    strategy = WindowingStrategy(window_fn=GlobalWindows(), trigger=Repeatedly(AfterWatermark()))
    runner = ReferenceRunner(strategy, parse_instant("12:00:00"))
    runner.add([("k", 1, parse_instant("11:00:00")), ("k", 2, parse_instant("13:00:00"))])
    assert runner.advance_watermark(parse_instant("2999-01-01T00:00:00Z")) == []
    (pane,) = runner.advance_watermark(END_OF_TIME)
    assert (pane.window, pane.value, pane.timing.value, pane.last) == (GLOBAL_WINDOW, 3, "ON_TIME", True)


# --- custom WindowFns -------------------------------------------------------------------


class PerKeyFixedWindows(WindowFn):
    """Fixed windows whose size depends on the key: a user-defined WindowFn."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes = sizes

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        size = self.sizes[ctx.key]
        start = ctx.timestamp // size * size
        return (IntervalWindow(start, start + size),)


class SpanSessions(WindowFn):
    """A user-defined merging WindowFn: an element's value is how long its session lasts."""

    @property
    def is_merging(self) -> bool:
        return True

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        return (IntervalWindow(ctx.timestamp, ctx.timestamp + ctx.value * S),)

    def merge(self, windows: Sequence[Window]) -> list[tuple[Window, list[Window]]]:
        return merge_overlapping(windows)


def run_to_end(fn: WindowFn, elements: list[tuple[str, int, str]], combiner: str = "sum") -> list[tuple]:
    strategy = WindowingStrategy(window_fn=fn, combiner=combiner_named(combiner), accumulation=AccumulationMode.DISCARDING)
    runner = ReferenceRunner(strategy, parse_instant("12:00:00"))
    runner.add([(k, v, parse_instant(t)) for k, v, t in elements])
    base = parse_instant("12:00:00")
    panes = runner.advance_watermark(END_OF_TIME)
    return sorted((p.key, (p.window.start - base) // S, (p.window.end - base) // S, p.value) for p in panes)


def test_custom_window_fn_runs_through_the_reference_runner():
    fn = PerKeyFixedWindows({"fast": 30 * S, "slow": 2 * M})
    got = run_to_end(fn, [("fast", 1, "12:00:10"), ("fast", 2, "12:00:40"), ("slow", 3, "12:00:10"), ("slow", 4, "12:01:40")])
    assert got == [("fast", 0, 30, 1), ("fast", 30, 60, 2), ("slow", 0, 120, 7)]


def test_custom_merging_window_fn_merges_through_the_reference_runner():
    got = run_to_end(SpanSessions(), [("k", 10, "12:00:00"), ("k", 5, "12:00:08"), ("k", 1, "12:00:20")], combiner="count")
    # [0, 10) and [8, 13) merge; [20, 21) stays apart
    assert got == [("k", 0, 13, 2), ("k", 20, 21, 1)]


def test_window_fn_is_abstract_and_does_not_merge_by_default():
    with pytest.raises(TypeError):
        WindowFn()  # type: ignore[abstract]
    fn = PerKeyFixedWindows({"k": 10})
    assert not fn.is_merging and fn.merge([IntervalWindow(0, 10), IntervalWindow(5, 15)]) == []


def test_interval_window_rejects_empty_or_inverted_bounds():
    with pytest.raises(ValueError):
        IntervalWindow(10, 10)
    with pytest.raises(ValueError):
        IntervalWindow(10, 5)
