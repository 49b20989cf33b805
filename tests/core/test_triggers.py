"""Every trigger's edge cases, replayed on the reference runner (FORMAT.md, processing rules).

Each test scripts a tiny history (arrivals, clock moves, watermark moves) in the order
FORMAT.md's rule 2 prescribes and checks exactly which panes come out, when, and how they
are labelled. Values are powers of ten so that a pane's sum says which elements it holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import combiner_named
from dataflow_core.model.dsl import parse_trigger, parse_window_fn
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, SCENARIO_EPOCH, format_instant, parse_duration, parse_instant
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.triggers import (
    AfterAll,
    AfterCount,
    AfterEach,
    AfterFirst,
    AfterPercentileWatermark,
    AfterProcessingTime,
    AfterWatermark,
    Never,
    OrFinally,
    RepeatUntil,
    Repeatedly,
)
from dataflow_core.model.windows import GlobalWindow
from dataflow_core.runners.reference import ReferenceRunner

# --- a tiny history language -----------------------------------------------------------


def add(at: str, *elements: tuple) -> tuple:
    """Elements arriving together at `at`: (value, time) for key "k", or (key, value, time)."""
    return ("add", at, [e if len(e) == 3 else ("k", *e) for e in elements])


def wm(at: str, to: str) -> tuple:
    return ("wm", at, to)


def tick(at: str) -> tuple:
    return ("tick", at, None)


def strategy(
    trigger: Trigger | str,
    window: str = "FixedWindows(1m)",
    accumulation: str = "discarding",
    lateness: str = "0s",
    combiner: str = "sum",
) -> WindowingStrategy:
    return WindowingStrategy(
        window_fn=parse_window_fn(window),
        trigger=parse_trigger(trigger) if isinstance(trigger, str) else trigger,
        accumulation=AccumulationMode.parse(accumulation),
        allowed_lateness=parse_duration(lateness),
        combiner=combiner_named(combiner),
    )


class Run:
    """Replays a history on a `ReferenceRunner`; keeps the panes each step emitted."""

    def __init__(self, strat: WindowingStrategy, history: list[tuple], start: str = "12:00:00"):
        self.runner = ReferenceRunner(strat, parse_instant(start))
        self.panes: list[Pane] = []
        self.by_step: list[list[Pane]] = []
        for kind, at, arg in history:
            out = self.runner.advance_processing_time(parse_instant(at))
            if kind == "add":
                out += self.runner.add([(k, v, parse_instant(t)) for k, v, t in arg])
            elif kind == "wm":
                out += self.runner.advance_watermark(END_OF_TIME if arg == "end" else parse_instant(arg))
            self.by_step.append(out)
            self.panes += out

    @property
    def dropped_pairs(self) -> int:
        return self.runner.dropped_pairs


def hms(t: int) -> str:
    """Short time for assertions: `12:01:00` or `12:01:00.500`."""
    if t >= END_OF_TIME - 1:
        return "end"
    text = format_instant(t)[11:23]
    return text[:8] if text.endswith(".000") else text


def view(p: Pane, *names: str) -> tuple:
    def one(name: str) -> Any:
        v = getattr(p, name)
        if name == "window":
            return "global" if isinstance(v, GlobalWindow) else f"{hms(v.start)}-{hms(v.end)}"
        if name in ("emitted_at", "timestamp"):
            return hms(v)
        if name == "timing":
            return v.value
        return v

    return tuple(one(n) for n in names)


def views(panes: list[Pane], *names: str) -> list[tuple]:
    return [view(p, *names) for p in panes]


WHAT = ("value", "timing", "index", "last", "emitted_at")


# --- AfterCount -------------------------------------------------------------------------


def test_after_count_fires_at_exactly_n_elements_then_finishes_and_closes_the_window():
    r = Run(
        strategy(AfterCount(3), window="GlobalWindows()"),
        [add("12:00:01", (1, "12:00:00")), add("12:00:02", (10, "12:00:00")),
         add("12:00:03", (100, "12:00:00")), add("12:00:04", (1000, "12:00:00"))],
    )
    assert [len(s) for s in r.by_step] == [0, 0, 1, 0]
    assert views(r.panes, *WHAT) == [(111, "EARLY", 0, True, "12:00:03")]
    assert r.dropped_pairs == 1  # the fourth element came for a closed window


def test_after_count_bundle_reaching_the_count_fires_once_for_the_whole_bundle():
    r = Run(
        strategy(Repeatedly(AfterCount(2)), window="GlobalWindows()"),
        [add("12:00:01", *[(10**i, "12:00:00") for i in range(5)]),
         add("12:00:02", (100000, "12:00:00")),
         add("12:00:03", (1000000, "12:00:00"))],
    )
    assert views(r.panes, "value", "index", "emitted_at") == [
        (11111, 0, "12:00:01"),
        (1100000, 1, "12:00:03"),
    ]


def test_after_count_counts_each_window_on_its_own():
    r = Run(
        strategy(Repeatedly(AfterCount(2))),
        [add("12:05:00", (1, "12:00:10"), (10, "12:00:20"), (100, "12:01:10"))],
    )
    assert views(r.panes, "window", "value") == [("12:00:00-12:01:00", 11)]


# --- AfterProcessingTime ----------------------------------------------------------------


def test_after_processing_time_timer_due_exactly_at_an_event_fires_only_when_clock_moves_past():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")),
         add("12:01:10", (10, "12:00:00")),  # arrives exactly when the timer is due
         tick("12:01:10"),  # the clock does not move past it yet
         tick("12:01:10.001")],
    )
    assert r.by_step[:3] == [[], [], []]
    # the element that arrived at the timer's time is in the pane; emitted_at is the timer's time
    assert views(r.panes, *WHAT) == [(11, "EARLY", 0, False, "12:01:10")]


def test_after_processing_time_counts_from_the_first_element_of_each_pane():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), add("12:00:50", (10, "12:00:00")),
         add("12:02:00", (100, "12:00:00")), tick("12:10:00")],
    )
    assert views(r.panes, "value", "emitted_at") == [(11, "12:01:10"), (100, "12:03:00")]


def test_after_processing_time_nothing_fires_after_the_last_event():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), tick("12:01:10")],
    )
    assert r.panes == []


def test_processing_time_timers_fire_in_time_order_across_keys_between_events():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:00", ("a", 1, "12:00:00")), add("12:00:30", ("b", 10, "12:00:00")),
         add("12:00:40", ("a", 100, "12:00:00")), tick("12:05:00")],
    )
    # a's timer (12:01:00) comes before b's (12:01:30); both fire during the one clock move
    assert views(r.panes, "key", "value", "emitted_at") == [("a", 101, "12:01:00"), ("b", 10, "12:01:30")]
    assert len(r.by_step[-1]) == 2


def test_after_processing_time_alone_finishes_with_its_pane_and_closes_the_window():
    r = Run(
        strategy(AfterProcessingTime(parse_duration("30s")), window="GlobalWindows()"),
        [add("12:00:00", (1, "12:00:00")), tick("12:01:00"), add("12:02:00", (10, "12:00:00")),
         tick("12:05:00")],
    )
    assert views(r.panes, *WHAT) == [(1, "EARLY", 0, True, "12:00:30")]
    assert r.dropped_pairs == 1


# --- AlignedProcessingTime --------------------------------------------------------------


def test_aligned_processing_time_fires_at_the_next_period_boundary():
    r = Run(
        strategy("Repeatedly(AlignedProcessingTime(1m))", window="GlobalWindows()"),
        [add("12:00:10", ("a", 1, "12:00:00")), add("12:00:50", ("b", 10, "12:00:00")),
         tick("12:05:00")],
    )
    # every key's pane comes out at the same aligned boundary
    assert views(r.panes, "key", "value", "emitted_at") == [("a", 1, "12:01:00"), ("b", 10, "12:01:00")]


def test_aligned_processing_time_arrival_exactly_on_a_boundary_fires_at_the_next_one():
    r = Run(
        strategy("Repeatedly(AlignedProcessingTime(1m))", window="GlobalWindows()"),
        [add("12:02:00", (1, "12:00:00")), tick("12:02:59.999"), tick("12:05:00")],
    )
    assert r.by_step[1] == []
    assert views(r.panes, "value", "emitted_at") == [(1, "12:03:00")]


@pytest.mark.parametrize(
    "arrival, fires_at",
    [("12:00:10", "12:00:15"), ("12:00:14.999", "12:00:15"), ("12:00:15", "12:01:15"), ("12:00:16", "12:01:15")],
)
def test_aligned_processing_time_with_offset(arrival: str, fires_at: str):
    r = Run(
        strategy("Repeat(AtPeriod(1m, offset=15s))", window="GlobalWindows()"),
        [add(arrival, (1, "12:00:00")), tick("12:05:00")],
    )
    assert views(r.panes, "value", "emitted_at") == [(1, fires_at)]


# --- AfterWatermark ---------------------------------------------------------------------


def test_after_watermark_early_on_time_and_late_phases_with_pane_indexes():
    r = Run(
        strategy(
            AfterWatermark(early=AfterCount(1), late=AfterCount(1)),
            accumulation="accumulating",
            lateness="1h",
        ),
        [add("12:00:20", (1, "12:00:10")),
         add("12:00:40", (10, "12:00:30")),
         wm("12:01:05", "12:01:00"),
         add("12:01:30", (100, "12:00:50")),
         add("12:01:40", (1000, "12:00:55")),
         wm("12:02:00", "end")],
    )
    assert views(r.panes, "value", "timing", "index", "on_time_index", "first", "last", "emitted_at") == [
        (1, "EARLY", 0, None, True, False, "12:00:20"),
        (11, "EARLY", 1, None, False, False, "12:00:40"),
        (11, "ON_TIME", 2, 0, False, False, "12:01:05"),
        (111, "LATE", 3, 1, False, False, "12:01:30"),
        (1111, "LATE", 4, 2, False, False, "12:01:40"),
    ]  # the garbage collection at the end has nothing new to emit


def test_after_watermark_fires_when_the_watermark_reaches_the_end_exactly():
    r = Run(
        strategy(AfterWatermark()),
        [add("12:00:10", (1, "12:00:10")), wm("12:00:20", "12:00:59.999"), wm("12:00:30", "12:01:00")],
    )
    assert r.by_step[1] == []
    assert views(r.panes, "value", "timing", "on_time_index", "emitted_at") == [(1, "ON_TIME", 0, "12:00:30")]


def test_after_watermark_on_time_pane_is_emitted_even_when_empty():
    r = Run(
        strategy(AfterWatermark(early=AfterCount(1)), lateness="1h"),
        [add("12:00:10", (5, "12:00:10")), wm("12:02:00", "12:01:00")],
    )
    assert views(r.panes, "value", "timing", "index", "emitted_at") == [
        (5, "EARLY", 0, "12:00:10"),
        (0, "ON_TIME", 1, "12:02:00"),
    ]


def test_after_watermark_without_late_finishes_with_on_time_pane_and_drops_later_data():
    r = Run(
        strategy(AfterWatermark(early=AfterCount(1)), accumulation="accumulating", lateness="1h"),
        [add("12:00:10", (1, "12:00:10")),
         wm("12:02:00", "12:01:00"),
         add("12:02:10", (10, "12:00:20"), (100, "12:00:30")),  # window still kept (lateness), but closed
         wm("12:03:00", "end")],
    )
    assert views(r.panes, *WHAT) == [(1, "EARLY", 0, False, "12:00:10"), (1, "ON_TIME", 1, True, "12:02:00")]
    assert r.dropped_pairs == 2


def test_after_watermark_on_time_pane_cancels_pending_early_timers():
    r = Run(
        strategy(AfterWatermark(early=AfterProcessingTime(parse_duration("1m")), late=AfterCount(5)), lateness="1h"),
        [add("12:00:10", (1, "12:00:10")), wm("12:00:30", "12:01:00"), tick("12:05:00")],
    )
    assert views(r.panes, "value", "timing", "emitted_at") == [(1, "ON_TIME", "12:00:30")]


def test_default_trigger_fires_on_time_then_once_per_late_bundle():
    r = Run(
        strategy("Default()", lateness="10m"),
        [add("12:00:10", (1, "12:00:10")),
         wm("12:01:30", "12:01:00"),
         add("12:02:00", (10, "12:00:20"), (100, "12:00:30")),
         wm("12:20:00", "end")],
    )
    assert views(r.panes, "value", "timing", "index", "on_time_index", "last") == [
        (1, "ON_TIME", 0, 0, False),
        (110, "LATE", 1, 1, False),
    ]


# --- Repeatedly, AfterEach, AfterFirst, AfterAll, OrFinally, RepeatUntil ----------------


def test_repeatedly_resets_after_each_firing_and_never_finishes():
    r = Run(
        strategy(Repeatedly(AfterCount(2)), window="GlobalWindows()"),
        [add(f"12:00:0{i}", (10**i, "12:00:00")) for i in range(5)] + [wm("12:01:00", "end")],
    )
    # 2 + 2 elements fire; the fifth is only emitted by garbage collection, as the last pane
    assert views(r.panes, "value", "timing", "index", "last", "emitted_at") == [
        (11, "EARLY", 0, False, "12:00:01"),
        (1100, "EARLY", 1, False, "12:00:03"),
        (10000, "ON_TIME", 2, True, "12:01:00"),
    ]
    assert r.panes[-1].window == GlobalWindow()


def test_after_each_moves_to_the_next_trigger_when_one_finishes():
    r = Run(
        strategy("SequenceOf(AtCount(2), AtCount(3))", window="GlobalWindows()"),
        [add(f"12:00:0{i}", (10**i, "12:00:00")) for i in range(6)],
    )
    assert views(r.panes, "value", "index", "last", "emitted_at") == [
        (11, 0, False, "12:00:01"),
        (11100, 1, True, "12:00:04"),
    ]
    assert r.dropped_pairs == 1


def test_after_each_moves_on_from_a_processing_time_trigger():
    r = Run(
        strategy(AfterEach(AfterProcessingTime(parse_duration("1m")), AfterCount(2)), window="GlobalWindows()"),
        [add("12:00:00", (1, "12:00:00")), add("12:00:30", (10, "12:00:00")),
         add("12:01:30", (100, "12:00:00")), add("12:01:40", (1000, "12:00:00")),
         add("12:01:50", (10000, "12:00:00"))],
    )
    assert views(r.panes, "value", "last", "emitted_at") == [(11, False, "12:01:00"), (1100, True, "12:01:40")]
    assert r.dropped_pairs == 1


def test_after_first_fires_with_the_first_ready_trigger_and_finishes():
    count_first = Run(
        strategy(AfterFirst(AfterCount(3), AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), add("12:00:20", (10, "12:00:00")),
         add("12:00:30", (100, "12:00:00")), tick("12:05:00")],
    )
    assert views(count_first.panes, "value", "last", "emitted_at") == [(111, True, "12:00:30")]
    time_first = Run(
        strategy("FirstOf(AtCount(3), AfterProcessingTime(1m))", window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), add("12:00:20", (10, "12:00:00")),
         tick("12:05:00"), add("12:05:10", (100, "12:00:00"))],
    )
    assert views(time_first.panes, "value", "last", "emitted_at") == [(11, True, "12:01:10")]
    assert time_first.dropped_pairs == 1


def test_after_all_waits_for_every_trigger_then_finishes():
    count_last = Run(
        strategy(AfterAll(AfterCount(2), AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), tick("12:03:00"), add("12:03:10", (10, "12:00:00")),
         add("12:03:20", (100, "12:00:00"))],
    )
    assert views(count_last.panes, "value", "last", "emitted_at") == [(11, True, "12:03:10")]
    assert count_last.dropped_pairs == 1
    time_last = Run(
        strategy(AfterAll(AfterCount(2), AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), add("12:00:20", (10, "12:00:00")), tick("12:05:00")],
    )
    assert views(time_last.panes, "value", "last", "emitted_at") == [(11, True, "12:01:10")]


def test_or_finally_fires_as_its_trigger_until_the_until_trigger_fires():
    r = Run(
        strategy(OrFinally(Repeatedly(AfterCount(2)), AfterWatermark()), lateness="1h"),
        [add("12:00:10", (1, "12:00:10"), (10, "12:00:20")),
         add("12:00:20", (100, "12:00:30")),
         wm("12:01:10", "12:01:00"),
         add("12:01:20", (1000, "12:00:40"), (10000, "12:00:50"))],
    )
    assert views(r.panes, "value", "timing", "last", "emitted_at") == [
        (11, "EARLY", False, "12:00:10"),
        (100, "ON_TIME", True, "12:01:10"),
    ]
    assert r.dropped_pairs == 2


def test_or_finally_finishes_when_its_trigger_finishes():
    r = Run(
        strategy(OrFinally(AfterCount(2), Never()), window="GlobalWindows()"),
        [add("12:00:01", (1, "12:00:00")), add("12:00:02", (10, "12:00:00")), add("12:00:03", (100, "12:00:00"))],
    )
    assert views(r.panes, "value", "last") == [(11, True)]
    assert r.dropped_pairs == 1


def test_or_finally_until_firing_with_nothing_new_emits_nothing_but_closes_the_window():
    r = Run(
        strategy(OrFinally(Repeatedly(AfterCount(1)), AfterProcessingTime(parse_duration("1m"))), window="GlobalWindows()"),
        [add("12:00:10", (1, "12:00:00")), tick("12:05:00"), add("12:05:10", (10, "12:00:00"))],
    )
    assert views(r.panes, "value", "last", "emitted_at") == [(1, False, "12:00:10")]
    assert r.dropped_pairs == 1


def test_repeat_until_repeats_then_stops_with_the_until_pane():
    trigger = parse_trigger("RepeatUntil(AtCount(2), AtCount(5))")
    assert trigger == RepeatUntil(AfterCount(2), AfterCount(5)) == OrFinally(Repeatedly(AfterCount(2)), AfterCount(5))
    r = Run(
        strategy(trigger, window="GlobalWindows()"),
        [add(f"12:00:0{i}", (10**i, "12:00:00")) for i in range(6)],
    )
    assert views(r.panes, "value", "index", "last", "emitted_at") == [
        (11, 0, False, "12:00:01"),
        (1100, 1, False, "12:00:03"),
        (10000, 2, True, "12:00:04"),
    ]
    assert r.dropped_pairs == 1


# --- Never, AfterPercentileWatermark ----------------------------------------------------


def test_never_emits_only_at_garbage_collection_as_the_last_pane():
    r = Run(
        strategy(Never(), lateness="5m"),
        [add("12:00:10", (1, "12:00:10")), add("12:00:20", (10, "12:00:20")),
         wm("12:01:30", "12:01:00"),  # end passed, but the window is kept for the lateness
         add("12:02:00", (100, "12:00:30")),
         tick("12:30:00"),
         wm("12:30:00", "12:06:00")],
    )
    assert views(r.panes, "value", "timing", "index", "on_time_index", "first", "last", "emitted_at") == [
        (111, "ON_TIME", 0, 0, True, True, "12:30:00"),
    ]


def test_never_emits_nothing_while_the_window_lives():
    r = Run(strategy(Never(), window="GlobalWindows()"), [add("12:00:10", (1, "12:00:10")), wm("13:00:00", "12:59:00")])
    assert r.panes == []


def test_after_percentile_watermark_fires_once_that_share_of_element_times_is_behind_the_watermark():
    r = Run(
        strategy(AfterPercentileWatermark(0.5), window="FixedWindows(10m)", accumulation="accumulating"),
        [add("12:00:05", (1, "12:00:01"), (10, "12:00:02"), (100, "12:00:03"), (1000, "12:00:04")),
         wm("12:00:10", "12:00:01.500"),  # one of four elements is behind the watermark
         wm("12:00:20", "12:00:03"),  # two of four are
         add("12:00:30", (10000, "12:00:05"))],
    )
    assert r.by_step[1] == []
    assert views(r.panes, "value", "timing", "last", "emitted_at") == [(1111, "EARLY", True, "12:00:20")]
    assert r.dropped_pairs == 1


def test_after_percentile_watermark_counts_elements_of_merged_sessions():
    r = Run(
        strategy(AfterPercentileWatermark(1.0), window="Sessions(1m)"),
        [add("12:00:05", (1, "12:00:00")), add("12:00:06", (10, "12:01:30")),
         add("12:00:20", (100, "12:00:45")),  # bridges both: [12:00:00, 12:02:30)
         wm("12:00:30", "12:01:20"),  # the element at 12:01:30 is not behind it yet
         wm("12:00:40", "12:01:31")],
    )
    assert r.by_step[3] == []
    assert views(r.panes, "window", "value", "last", "emitted_at") == [("12:00:00-12:02:30", 111, True, "12:00:40")]


# --- merging windows --------------------------------------------------------------------


def test_merged_sessions_add_up_their_element_counts():
    history = [add("12:00:01", (1, "12:00:00")), add("12:00:02", (10, "12:01:30"))]
    apart = Run(strategy(Repeatedly(AfterCount(3)), window="Sessions(1m)"), history)
    assert apart.panes == []
    bridged = Run(strategy(Repeatedly(AfterCount(3)), window="Sessions(1m)"), history + [add("12:00:03", (100, "12:00:45"))])
    assert views(bridged.panes, "window", "value", "index", "first", "emitted_at") == [
        ("12:00:00-12:02:30", 111, 0, True, "12:00:03")
    ]


def test_merged_sessions_keep_the_earliest_pending_processing_time_firing():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), window="Sessions(1m)"),
        [add("12:00:00", (1, "12:00:00")),  # timer 12:01:00
         add("12:00:30", (10, "12:01:30")),  # another session, timer 12:01:30
         add("12:00:40", (100, "12:00:45")),  # bridges them
         tick("12:05:00")],
    )
    assert views(r.panes, "window", "value", "emitted_at") == [("12:00:00-12:02:30", 111, "12:01:00")]


def test_merged_window_keeps_the_on_time_phase_a_part_has_passed():
    r = Run(
        strategy(AfterWatermark(late=AfterCount(1)), window="Sessions(1m)", accumulation="accumulating", lateness="1h"),
        [add("12:00:10", (1, "12:00:00")),
         wm("12:01:05", "12:01:00"),  # [12:00:00, 12:01:00) gets its on-time pane
         add("12:01:10", (10, "12:00:30")),  # [12:00:30, 12:01:30) merges into [12:00:00, 12:01:30)
         wm("12:02:05", "12:02:00"),  # passes the merged end: no second on-time pane
         add("12:02:10", (100, "12:00:20"))],  # inside the merged window: same window, next index
    )
    assert views(r.panes, "window", "value", "timing", "index", "emitted_at") == [
        ("12:00:00-12:01:00", 1, "ON_TIME", 0, "12:01:05"),
        # the late phase fires at once, although the watermark is before the merged end (EARLY)
        ("12:00:00-12:01:30", 11, "EARLY", 0, "12:01:10"),
        ("12:00:00-12:01:30", 111, "LATE", 1, "12:02:10"),
    ]


def test_merged_window_judges_the_watermark_on_its_own_end():
    r = Run(
        strategy(AfterWatermark(), window="Sessions(1m)"),
        [add("12:00:10", (1, "12:00:00")),
         add("12:00:20", (10, "12:00:50")),  # merged [12:00:00, 12:01:50)
         wm("12:01:05", "12:01:00"),  # the first part's end, not the merged one's
         wm("12:02:05", "12:01:50")],
    )
    assert views(r.panes, "window", "value", "timing", "last", "emitted_at") == [
        ("12:00:00-12:01:50", 11, "ON_TIME", True, "12:02:05"),
    ]


def test_window_absorbing_another_without_new_bounds_keeps_counting_panes():
    r = Run(
        strategy(Repeatedly(AfterCount(1)), window="Sessions(1m)", accumulation="accumulating"),
        [add("12:00:01", (1, "12:00:00"), (10, "12:01:30")),  # two sessions
         add("12:00:02", (100, "12:00:45")),  # merges into [12:00:00, 12:02:30): a new window
         add("12:00:03", (1000, "12:01:00"))],  # [12:01:00, 12:02:00) lies inside it
    )
    assert views(r.panes, "window", "value", "index", "first") == [
        ("12:00:00-12:01:00", 1, 0, True),
        ("12:01:30-12:02:30", 10, 0, True),
        ("12:00:00-12:02:30", 111, 0, True),
        ("12:00:00-12:02:30", 1111, 1, False),
    ]


# --- last flag and garbage collection ----------------------------------------------------


def test_on_time_pane_at_the_garbage_collection_moment_is_last():
    r = Run(
        strategy(AfterWatermark(early=AfterCount(1), late=AfterCount(1)), lateness="1m"),
        [add("12:00:10", (1, "12:00:10")), add("12:00:20", (10, "12:00:20")),
         wm("12:00:30", "12:00:40"),
         wm("12:05:00", "12:03:00")],  # passes end and end + lateness at once
    )
    assert views(r.panes, "value", "timing", "last", "emitted_at") == [
        (1, "EARLY", False, "12:00:10"),
        (10, "EARLY", False, "12:00:20"),
        (0, "ON_TIME", True, "12:05:00"),
    ]


def test_garbage_collection_emits_pending_late_data_as_the_last_pane():
    r = Run(
        strategy(AfterWatermark(late=AfterCount(2)), lateness="1m"),
        [add("12:00:10", (1, "12:00:10")),
         wm("12:01:00", "12:01:00"),
         add("12:01:10", (10, "12:00:20")),  # one late element; the late trigger wants two
         wm("12:03:00", "12:02:00")],
    )
    assert views(r.panes, "value", "timing", "index", "on_time_index", "last", "emitted_at") == [
        (1, "ON_TIME", 0, 0, False, "12:01:00"),
        (10, "LATE", 1, 1, True, "12:03:00"),
    ]


def test_garbage_collection_without_pending_data_emits_nothing():
    r = Run(
        strategy("Default()", lateness="1m"),
        [add("12:00:10", (1, "12:00:10")), wm("12:01:00", "12:01:00"), wm("12:03:00", "12:02:00")],
    )
    assert views(r.panes, "value", "timing", "last") == [(1, "ON_TIME", False)]
    assert r.by_step[-1] == []


def test_data_for_a_collected_window_is_dropped_and_counted():
    r = Run(
        strategy("Default()", lateness="1m"),
        [wm("12:00:00", "12:03:00"), add("12:00:10", (1, "12:01:59"), (10, "12:02:00"))],
    )
    # [12:01, 12:02) + 1m expired at 12:03; [12:02, 12:03) has not yet
    assert r.dropped_pairs == 1
    assert views(r.panes, "window", "value", "timing") == [("12:02:00-12:03:00", 10, "LATE")]


def test_window_made_only_of_late_data_emits_late_panes():
    r = Run(
        strategy(AfterWatermark(early=AfterCount(1), late=AfterCount(1)), lateness="1h"),
        [wm("12:00:00", "12:05:00"), add("12:00:10", (1, "12:00:30")), wm("12:00:20", "end")],
    )
    assert views(r.panes, "value", "timing", "index", "on_time_index", "first") == [(1, "LATE", 0, 0, True)]


def test_first_pane_after_an_unfired_watermark_crossing_with_waiting_data_is_on_time():
    r = Run(
        strategy(Repeatedly(AfterCount(2)), lateness="1h"),
        [add("12:00:10", (1, "12:00:10")),
         wm("12:01:10", "12:01:00"),  # no pane now, but data waits: the window is owed an on-time pane
         add("12:01:20", (10, "12:00:20")),
         add("12:01:30", (100, "12:00:30"), (1000, "12:00:40"))],
    )
    assert r.by_step[1] == []
    assert views(r.panes, "value", "timing", "index", "on_time_index") == [
        (11, "ON_TIME", 0, 0),
        (1100, "LATE", 1, 1),
    ]


def test_processing_time_pane_after_the_end_passed_is_the_owed_on_time_pane():
    r = Run(
        strategy(Repeatedly(AfterProcessingTime(parse_duration("1m"))), lateness="1h"),
        [add("12:00:10", (1, "12:00:10")), wm("12:00:20", "12:01:00"), tick("12:05:00")],
    )
    assert views(r.panes, "value", "timing", "on_time_index", "emitted_at") == [(1, "ON_TIME", 0, "12:01:10")]


def test_merged_window_is_on_time_when_a_part_was_owed_an_on_time_pane():
    history = [
        add("12:00:10", (1, "12:00:00"), (10, "12:01:30")),  # sessions [12:00, 12:01) and [12:01:30, 12:02:30)
        wm("12:00:20", "12:03:00"),  # both ends pass without a pane: both are owed one
        add("12:00:30", (100, "12:00:45")),  # bridges them into [12:00:00, 12:02:30)
    ]
    r = Run(strategy(Repeatedly(AfterCount(3)), window="Sessions(1m)", lateness="1h"), history)
    assert views(r.panes, "window", "value", "timing", "index", "on_time_index") == [
        ("12:00:00-12:02:30", 111, "ON_TIME", 0, 0)
    ]


def test_start_is_both_the_initial_clock_and_watermark():
    r = Run(strategy("Default()", window="FixedWindows(1m)"), [add("12:00:00", (1, "11:59:30"))], start="12:00:00")
    assert r.runner.watermark == parse_instant("12:00:00") == SCENARIO_EPOCH + 12 * 3_600_000
    assert r.dropped_pairs == 1 and r.panes == []
