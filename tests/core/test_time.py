"""Scenario times and durations (FORMAT.md: `HH:MM:SS[.fff]`, ISO-8601, bare numbers; `2m`)."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.time import (
    END_OF_TIME,
    SCENARIO_EPOCH,
    format_duration,
    format_instant,
    parse_duration,
    parse_instant,
)

S = 1000
H = 3_600_000


def test_scenario_epoch_is_2000_01_01_utc():
    assert SCENARIO_EPOCH == int(dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize(
    "text, offset_ms",
    [
        ("00:00:00", 0),
        ("12:00:00", 12 * H),
        ("12:04:59", 12 * H + 4 * 60 * S + 59 * S),
        ("9:05:00", 9 * H + 5 * 60 * S),
        ("23:59:59.999", 24 * H - 1),
        ("12:00:00.5", 12 * H + 500),
        ("12:00:00.05", 12 * H + 50),
        ("12:00:00.123", 12 * H + 123),
        (" 12:00:00 ", 12 * H),
    ],
)
def test_time_of_day_is_on_2000_01_01(text: str, offset_ms: int):
    assert parse_instant(text) == SCENARIO_EPOCH + offset_ms


@pytest.mark.parametrize(
    "text",
    [
        "2000-01-01T12:00:00Z",
        "2000-01-01T12:00:00.000Z",
        "2000-01-01T13:00:00+01:00",
        "2000-01-01T07:30:00-04:30",
        "2000-01-01T12:00:00",  # no zone: UTC
        "2000-01-01 12:00:00Z",
    ],
)
def test_iso_8601_instants_with_z_and_offsets(text: str):
    assert parse_instant(text) == SCENARIO_EPOCH + 12 * H


def test_iso_8601_keeps_milliseconds_and_works_on_other_days():
    assert parse_instant("2024-02-29T23:59:59.250Z") == int(
        dt.datetime(2024, 2, 29, 23, 59, 59, tzinfo=dt.timezone.utc).timestamp() * 1000
    ) + 250
    assert parse_instant("1969-12-31T23:59:59.999Z") == -1


@pytest.mark.parametrize("number, offset_ms", [(0, 0), (90, 90 * S), (1.5, 1500), (0.001, 1), (-1, -S), (43_200, 12 * H)])
def test_bare_numbers_are_seconds_after_2000_01_01(number: float, offset_ms: int):
    assert parse_instant(number) == SCENARIO_EPOCH + offset_ms


def test_yaml_values_parse_as_scenarios_write_them():
    doc = yaml.safe_load(
        "quoted: '12:04:59'\nbare: 12:04:59\nseconds: 90\niso: 2000-01-01T12:00:00Z\nfrac: '12:00:00.250'\n"
    )
    assert parse_instant(doc["quoted"]) == SCENARIO_EPOCH + 12 * H + 299 * S
    # YAML 1.1 reads an unquoted 12:04:59 as the base-60 number 43499: the same instant
    assert parse_instant(doc["bare"]) == parse_instant(doc["quoted"])
    assert parse_instant(doc["seconds"]) == SCENARIO_EPOCH + 90 * S
    assert parse_instant(doc["iso"]) == SCENARIO_EPOCH + 12 * H  # a datetime after YAML
    assert parse_instant(doc["frac"]) == SCENARIO_EPOCH + 12 * H + 250


def test_datetime_objects_naive_ones_being_utc():
    aware = dt.datetime(2000, 1, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert parse_instant(aware) == parse_instant(dt.datetime(2000, 1, 1, 12, 0)) == SCENARIO_EPOCH + 12 * H


@pytest.mark.parametrize(
    "bad",
    ["noon", "", "12:00", "24:00:00", "12:60:00", "12:00:60", "12:00:00.1234", "12:00:00Z", "2000-13-01T00:00:00Z",
     "12h", True, None],
)
def test_unparseable_times_are_value_errors_that_quote_the_input(bad: object):
    with pytest.raises(ValueError) as err:
        parse_instant(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(err.value)


def test_format_instant_is_iso_with_milliseconds_and_z():
    assert format_instant(SCENARIO_EPOCH + 12 * H + 1) == "2000-01-01T12:00:00.001Z"
    assert format_instant(-1) == "1969-12-31T23:59:59.999Z"


@settings(deadline=None)  # timing varies on a loaded CI machine
@given(st.integers(-(10**13), 10**13))
def test_format_then_parse_gives_back_the_instant(t: int):
    assert parse_instant(format_instant(t)) == t


def test_end_of_time_is_after_any_parseable_instant():
    assert parse_instant("9999-12-31T23:59:59.999Z") < END_OF_TIME


# --- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, ms",
    [("500ms", 500), ("0s", 0), ("30s", 30 * S), ("2m", 120 * S), ("1h", H), ("1d", 24 * H), ("1000d", 1000 * 24 * H),
     (" 2m ", 120 * S), ("2 m", 120 * S)],
)
def test_duration_units(text: str, ms: int):
    assert parse_duration(text) == ms


def test_a_number_is_milliseconds_whatever_its_type():
    assert parse_duration(0) == 0
    assert parse_duration(5) == 5
    assert parse_duration(3.6e6) == H
    assert parse_duration(dt.timedelta(minutes=2)) == 120 * S


@pytest.mark.parametrize("bad", ["2", "1.5m", "-1s", "2x", "m", "2min", "1D", "", "2m30s", True, -1, 1.5,
                                 float("nan"), float("inf"), None, [60], dt.timedelta(microseconds=1)])
def test_bad_durations_are_one_line_value_errors_that_quote_the_input(bad: object):
    with pytest.raises(ValueError) as err:
        parse_duration(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(err.value) and "\n" not in str(err.value)


def test_a_bad_duration_names_its_parameter_and_the_forms():
    with pytest.raises(ValueError, match=r"^max_skew: '90' is not a duration \(give milliseconds as a whole number, "
                                         r"or text such as 500ms, 90s, 10m, 1h, 1d\)$"):
        parse_duration("90", "max_skew")
    with pytest.raises(ValueError, match="^allowed_lateness: -1 is negative"):
        parse_duration(-1, "allowed_lateness")


@pytest.mark.parametrize("ms, text", [(500, "500ms"), (30 * S, "30s"), (120 * S, "2m"), (90 * S, "90s"), (H, "1h"), (48 * H, "2d")])
def test_format_duration_uses_the_largest_exact_unit(ms: int, text: str):
    assert format_duration(ms) == text
    assert parse_duration(text) == ms


# --- every duration argument reads durations the same way ------------------------------


def _arguments():
    """(parameter name as errors give it, a function giving the argument's value in ms)."""
    from dataflow_core import api
    from dataflow_core.model.strategy import WindowingStrategy
    from dataflow_core.model.triggers import AfterProcessingTime, AlignedProcessingTime
    from dataflow_core.model.watermarks import HeuristicWatermark
    from dataflow_core.model.windows import FixedWindows, Sessions, SlidingWindows
    from dataflow_core.pipelines import PipelineSpec

    def spec(skew):
        return PipelineSpec(name="skewed", input_table="t", key="k", value="v", watermark=HeuristicWatermark(0),
                            stages=(api.stage("skewed", FixedWindows("1h"), api.SumFn()),), max_skew=skew).max_skew

    return [
        ("FixedWindows size", lambda d: FixedWindows(d).size),
        ("FixedWindows offset", lambda d: FixedWindows("1000d", d).offset),
        ("SlidingWindows size", lambda d: SlidingWindows(d, 1).size),
        ("SlidingWindows period", lambda d: SlidingWindows("1000d", d).period),
        ("SlidingWindows offset", lambda d: SlidingWindows("1000d", "1000d", d).offset),
        ("Sessions gap", lambda d: Sessions(d).gap),
        ("AfterProcessingTime delay", lambda d: AfterProcessingTime(d).delay),
        ("AlignedProcessingTime period", lambda d: AlignedProcessingTime(d).period),
        ("AlignedProcessingTime offset", lambda d: AlignedProcessingTime("1000d", d).offset),
        ("allowed_lateness", lambda d: WindowingStrategy(allowed_lateness=d).allowed_lateness),
        ("allowed_lateness", lambda d: api.stage("s", FixedWindows("1h"), api.SumFn(), allowed_lateness=d)
         .strategy.allowed_lateness),
        ("HeuristicWatermark bound", lambda d: HeuristicWatermark(bound=d).bound),
        ("max_skew", spec),
        ("duration", api.duration),
    ]


ARGUMENTS = _arguments()
IDS = [f"{name}-{i}" for i, (name, _) in enumerate(ARGUMENTS)]


@pytest.mark.parametrize("name, value_of", ARGUMENTS, ids=IDS)
@pytest.mark.parametrize("given", [90_000, 90_000.0, "90s", " 90 s ", "90000ms", dt.timedelta(seconds=90)])
def test_every_duration_argument_takes_the_same_forms(name, value_of, given):
    assert value_of(given) == 90_000
    assert value_of("1h") == H and value_of("1d") == 24 * H and value_of(3_600_000) == H


@pytest.mark.parametrize("name, value_of", ARGUMENTS, ids=IDS)
@pytest.mark.parametrize("bad", ["1 hour", "90", -1, 1.5, None])
def test_every_duration_argument_refuses_a_bad_form_in_one_line_naming_itself(name, value_of, bad):
    from dataflow_core.errors import DataflowError

    with pytest.raises((ValueError, DataflowError)) as err:
        value_of(bad)
    message = str(err.value)
    assert name in message and repr(bad) in message and "\n" not in message


def test_a_scenarios_duration_keeps_format_md_meaning():
    """FORMAT.md: a duration is an integer and a unit. A bare number (FORMAT.md's bare numbers
    are seconds, for times) is refused, not read as the model's milliseconds; 0 is 0."""
    from dataflow_core.scenario import ScenarioError, load_scenario

    def lateness(value):
        return {"name": "d", "pipeline": {"window": "FixedWindows(1m)", "allowed_lateness": value},
                "start": "12:00:00", "events": [], "expect": []}

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.yaml"
        for value, ms in (("2m", 120 * S), (0, 0)):
            path.write_text(yaml.safe_dump(lateness(value)))
            assert load_scenario(path).strategy.allowed_lateness == ms
        path.write_text(yaml.safe_dump(lateness(60)))
        with pytest.raises(ScenarioError, match=r"pipeline.allowed_lateness: 60 has no unit \(FORMAT.md: an integer "
                                                r"and a unit, e.g. 60s or 60ms\)"):
            load_scenario(path)


def test_zero_as_text_needs_no_unit():
    assert parse_duration("0", "allowed_lateness") == parse_duration(0) == 0
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration("00x")
