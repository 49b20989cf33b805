"""Window and trigger expressions: every name of FORMAT.md's tables, and clear errors."""

from __future__ import annotations

import pytest

from dataflow_core.model.dsl import ExpressionError, parse_trigger, parse_window_fn
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.triggers import (
    AfterAll,
    AfterCount,
    AfterEach,
    AfterFirst,
    AfterPercentileWatermark,
    AfterProcessingTime,
    AfterWatermark,
    AlignedProcessingTime,
    Never,
    OrFinally,
    Repeatedly,
)
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows

S = 1000
M = 60 * S

# (Beam spelling, paper spelling or None, the trigger it must build)
TABLE: list[tuple[str, str | None, Trigger]] = [
    ("Default()", None, Repeatedly(AfterWatermark())),
    ("AfterWatermark()", "AtWatermark()", AfterWatermark()),
    (
        "AfterWatermark(early=AfterProcessingTime(1m), late=AfterCount(1))",
        "AtWatermark(early=AfterProcessingTime(1m), late=AtCount(1))",
        AfterWatermark(early=AfterProcessingTime(M), late=AfterCount(1)),
    ),
    ("AfterProcessingTime(30s)", None, AfterProcessingTime(30 * S)),
    ("AlignedProcessingTime(1m)", "AtPeriod(1m)", AlignedProcessingTime(M)),
    ("AlignedProcessingTime(1m, offset=10s)", "AtPeriod(1m, offset=10s)", AlignedProcessingTime(M, 10 * S)),
    ("AfterCount(3)", "AtCount(3)", AfterCount(3)),
    ("Repeatedly(AfterCount(2))", "Repeat(AtCount(2))", Repeatedly(AfterCount(2))),
    ("AfterEach(AfterCount(1), AfterCount(2))", "SequenceOf(AtCount(1), AtCount(2))", AfterEach(AfterCount(1), AfterCount(2))),
    ("AfterFirst(AfterCount(5), AfterProcessingTime(1m))", "FirstOf(AtCount(5), AfterProcessingTime(1m))", AfterFirst(AfterCount(5), AfterProcessingTime(M))),
    ("AfterAll(AfterCount(5), AfterProcessingTime(1m))", None, AfterAll(AfterCount(5), AfterProcessingTime(M))),
    ("OrFinally(Repeatedly(AfterCount(1)), AfterWatermark())", None, OrFinally(Repeatedly(AfterCount(1)), AfterWatermark())),
    (None, "RepeatUntil(AtCount(1), AtWatermark())", OrFinally(Repeatedly(AfterCount(1)), AfterWatermark())),
    ("Never()", None, Never()),
]
SPELLINGS = [(text, built) for beam, paper, built in TABLE for text in (beam, paper) if text]


@pytest.mark.parametrize("text, built", SPELLINGS, ids=[s for s, _ in SPELLINGS])
def test_every_trigger_name_parses(text: str, built: Trigger):
    parsed = parse_trigger(text)
    assert type(parsed) is type(built)
    assert parsed.describe() == built.describe()


def test_parsed_triggers_keep_their_parameters():
    t = parse_trigger("AtWatermark(early=AtPeriod(2m, offset=30s), late=Repeat(AtCount(4)))")
    assert isinstance(t, AfterWatermark)
    assert isinstance(t.early, AlignedProcessingTime) and (t.early.period, t.early.offset) == (2 * M, 30 * S)
    assert isinstance(t.late, Repeatedly) and isinstance(t.late.trigger, AfterCount) and t.late.trigger.count == 4
    seq = parse_trigger("SequenceOf(AfterProcessingTime(1500ms), AtCount(2), Never())")
    assert [type(c) for c in seq.children] == [AfterProcessingTime, AfterCount, Never]
    assert seq.children[0].delay == 1500


def test_keyword_and_positional_arguments_are_equivalent():
    assert parse_trigger("AfterCount(count=2)") == parse_trigger("AfterCount(2)") == AfterCount(2)
    assert parse_trigger("OrFinally(trigger=AfterCount(1), until=Never())") == OrFinally(AfterCount(1), Never())


def test_whitespace_is_ignored():
    assert parse_trigger("  AfterWatermark( early = AfterCount( 1 ) ,late=Never() ) ") == AfterWatermark(
        early=AfterCount(1), late=Never()
    )


def test_describe_round_trips_through_the_parser():
    for _, built in SPELLINGS:
        assert parse_trigger(built.describe()) == built


def test_percentile_watermark_takes_a_fraction():
    assert parse_trigger("AfterPercentileWatermark(0.99)") == AfterPercentileWatermark(0.99)
    assert parse_trigger("AtPercentileWatermark(1)") == AfterPercentileWatermark(1.0)
    with pytest.raises(ExpressionError, match=r"fraction in \(0, 1\]"):
        parse_trigger("AtPercentileWatermark(99)")


# --- windows ----------------------------------------------------------------------------


def test_every_window_parses():
    assert isinstance(parse_window_fn("GlobalWindows()"), GlobalWindows)
    f = parse_window_fn("FixedWindows(2m)")
    assert isinstance(f, FixedWindows) and (f.size, f.offset) == (2 * M, 0)
    f = parse_window_fn("FixedWindows(2m, offset=30s)")
    assert (f.size, f.offset) == (2 * M, 30 * S)
    s = parse_window_fn("SlidingWindows(10m, 2m)")
    assert isinstance(s, SlidingWindows) and (s.size, s.period, s.offset) == (10 * M, 2 * M, 0)
    s = parse_window_fn("SlidingWindows(10m, 2m, offset=1m)")
    assert (s.size, s.period, s.offset) == (10 * M, 2 * M, M)
    g = parse_window_fn("Sessions(1h)")
    assert isinstance(g, Sessions) and g.gap == 3_600_000


@pytest.mark.parametrize("unit, ms", [("500ms", 500), ("30s", 30 * S), ("2m", 2 * M), ("1h", 3_600_000), ("1d", 86_400_000)])
def test_window_durations_in_every_unit(unit: str, ms: int):
    assert parse_window_fn(f"FixedWindows({unit})").size == ms


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, says",
    [
        ("AfterBanana(1)", r"unknown trigger 'AfterBanana' \(known: .*AfterCount"),
        ("FixedWindows(1m)", "unknown trigger 'FixedWindows'"),
        ("Repeatedly(AtCnt(1))", "unknown trigger 'AtCnt'"),
        ("AfterCount(3", r"expected ',' or '\)'"),
        ("AfterWatermark(early=AfterCount(1)", r"expected ',' or '\)'"),
        ("AfterCount(3))", r"unexpected '\)' after the expression"),
        ("AfterCount 3", "unexpected '3' after the expression"),
        ("", "ends too early"),
        ("AfterCount()", "AfterCount is missing count"),
        ("AfterCount(0)", "at least 1"),
        ("AfterCount(2m)", "AfterCount: expected a whole number"),
        ("AfterCount(1.5)", "AfterCount: expected a whole number"),
        ("AfterCount(1, 2)", r"AfterCount takes 1 positional argument\(s\), got 2"),
        ("AfterCount(k=2)", "AfterCount has no parameter 'k'"),
        ("AfterProcessingTime(5)", "delay must be a duration"),
        ("AfterProcessingTime(-1s)", "unexpected '-1s"),
        ("AfterWatermark(early=5)", "AfterWatermark: expected a trigger, got 5"),
        ("AfterWatermark(AfterCount(1))", "AfterWatermark takes 0 positional"),
        ("AfterWatermark(soon=AfterCount(1))", "AfterWatermark has no parameter 'soon'"),
        ("AlignedProcessingTime(0s)", "period must be positive"),
        ("AfterEach()", "AfterEach needs at least one trigger"),
        ("FirstOf(early=AfterCount(1))", "FirstOf takes only triggers"),
        ("AfterAll(AfterCount(1), 3)", "expected a trigger, got 3"),
        ("OrFinally(AfterCount(1))", "OrFinally is missing until"),
        ("AfterPercentileWatermark(0)", r"expected a fraction in \(0, 1\]"),
        ("AfterCount(count=1, 2)", "positional argument after keyword"),
        ("AfterCount(#)", "unexpected '#"),
    ],
)
def test_bad_trigger_expressions_raise_clear_errors(text: str, says: str):
    with pytest.raises(ExpressionError, match=says):
        parse_trigger(text)


@pytest.mark.parametrize(
    "text, says",
    [
        ("Hourly(1h)", r"unknown window 'Hourly' \(known: FixedWindows, GlobalWindows, Sessions, SlidingWindows\)"),
        ("AfterCount(1)", "unknown window 'AfterCount'"),
        ("FixedWindows(5)", "FixedWindows: size must be a duration such as 30s or 2m, got 5"),
        ("FixedWindows(0s)", "size must be positive"),
        ("FixedWindows(2m, 30s)", "FixedWindows takes 1 positional"),
        ("FixedWindows(size=2m, 2m)", "positional argument after keyword"),
        ("FixedWindows(2m, shift=30s)", "FixedWindows has no parameter 'shift'"),
        ("FixedWindows(2.5m)", r"expected ',' or '\)' in 'FixedWindows\(2.5m\)'"),
        ("SlidingWindows(10m)", "SlidingWindows is missing period"),
        ("Sessions()", "Sessions is missing gap"),
        ("Sessions(1m", r"expected ',' or '\)'"),
        ("Sessions(1x)", r"expected ',' or '\)'"),
        ("GlobalWindows(1m)", "GlobalWindows takes 0 positional"),
    ],
)
def test_bad_window_expressions_raise_clear_errors(text: str, says: str):
    with pytest.raises(ExpressionError, match=says):
        parse_window_fn(text)


def test_expression_error_is_a_value_error_and_quotes_the_expression():
    with pytest.raises(ValueError) as err:
        parse_trigger("AfterCount(3")
    assert isinstance(err.value, ExpressionError)
    assert "'AfterCount(3'" in str(err.value)


def test_format_md_parameter_names_work_as_keywords():
    assert parse_trigger("AfterCount(n=2)") == parse_trigger("AfterCount(2)")
    assert parse_trigger("AfterProcessingTime(d=1m)") == parse_trigger("AfterProcessingTime(1m)")
    with pytest.raises(ExpressionError, match="has no parameter 'd'"):
        parse_trigger("AfterCount(d=2)")


def test_a_texts_durations_mean_what_the_same_durations_mean_in_python():
    """The text form keeps FORMAT.md's syntax (a unit on every duration: `FixedWindows(5)` is
    refused above), and reads it as the Python constructors read the same text or its
    milliseconds: one reading of durations."""
    assert parse_window_fn("FixedWindows(90s, offset=30s)").describe() == FixedWindows("90s", "30s").describe() \
        == FixedWindows(90_000, 30_000).describe()
    assert parse_window_fn("SlidingWindows(1h, 10m)").describe() == SlidingWindows("1h", 600_000).describe()
    assert parse_window_fn("Sessions(30m)").describe() == Sessions(1_800_000).describe()
    assert parse_trigger("AlignedProcessingTime(10m, offset=1m)") == AlignedProcessingTime("10m", 60_000)
    assert parse_trigger("AfterProcessingTime(500ms)") == AfterProcessingTime(500)
