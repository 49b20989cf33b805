"""Event and processing time as integer milliseconds since the Unix epoch.

Integers keep window arithmetic exact; the end of time is a finite sentinel so that the
watermark can be moved "to the end" and compared like any other instant.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any, Iterable

Instant = int  # milliseconds since 1970-01-01T00:00:00Z
Duration = int  # milliseconds

END_OF_TIME: Instant = 2**62
"""The watermark's final value: every window's end is at or before it."""

SCENARIO_EPOCH: Instant = 946_684_800_000
"""2000-01-01T00:00:00Z: the day short `HH:MM:SS` times and bare numbers refer to."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_HMS_RE = re.compile(r"^(\d{1,2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?$")


DURATION_FORMS = "milliseconds as a whole number, or text such as 500ms, 90s, 10m, 1h, 1d"
"""What every duration argument accepts, for messages."""


def parse_duration(value: Any, name: str = "") -> Duration:
    """The one reading of a duration, for every argument that takes one (window sizes, trigger
    delays, allowed lateness, a watermark's bound, a pipeline's skew): milliseconds as a whole
    number (`90_000`, `3.6e6`), a `datetime.timedelta`, or text with a unit (`"90s"`, `"1h"`).
    Text without a unit is refused, not guessed: "60" would be seconds to one reader and
    milliseconds to another ("0" is zero to all). Raises a one-line ValueError naming `name` (the parameter)."""
    ms = _milliseconds(value, name)
    if ms < 0:
        raise ValueError(f"{_said(value, name)} is negative; a duration is zero or more")
    return ms


def positive_duration(value: Any, name: str) -> Duration:
    """`parse_duration`, for arguments that must be above zero (a window's size, a period)."""
    if _milliseconds(value, name) <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return _milliseconds(value, name)


def _milliseconds(value: Any, name: str) -> int:
    if isinstance(value, dt.timedelta):
        ms = value / dt.timedelta(milliseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = value
    elif isinstance(value, str) and value.strip() == "0":  # zero needs no unit: no reader takes it otherwise
        return 0
    else:
        match = _DURATION_RE.match(value) if isinstance(value, str) else None
        if not match:
            raise ValueError(f"{_said(value, name)} is not a duration (give {DURATION_FORMS})")
        return int(match.group(1)) * _UNITS[match.group(2)]
    if isinstance(ms, float) and (not math.isfinite(ms) or not ms.is_integer()):
        raise ValueError(f"{_said(value, name)} is not a whole number of milliseconds (give {DURATION_FORMS})")
    return int(ms)


def _said(value: Any, name: str) -> str:
    return f"{name}: {value!r}" if name else repr(value)


def parse_instant(text: str | int | float | dt.datetime) -> Instant:
    """`HH:MM:SS[.fff]` on 2000-01-01, an ISO-8601 instant, or seconds after 2000-01-01."""
    if isinstance(text, bool):
        raise ValueError(f"not a time: {text!r}")
    if isinstance(text, dt.datetime):
        return _from_datetime(text)
    if isinstance(text, (int, float)):
        if not math.isfinite(text):
            raise ValueError(f"not a time: {text!r} (must be finite)")
        return SCENARIO_EPOCH + round(text * 1000)
    raw = str(text).strip()
    match = _HMS_RE.match(raw)
    if match:
        h, m, s = (int(match.group(i)) for i in (1, 2, 3))
        if h > 23 or m > 59 or s > 59:
            raise ValueError(f"not a time of day: {text!r}")
        frac = int((match.group(4) or "0").ljust(3, "0"))
        return SCENARIO_EPOCH + ((h * 60 + m) * 60 + s) * 1000 + frac
    try:
        return _from_datetime(dt.datetime.fromisoformat(raw.replace("Z", "+00:00")))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (expected HH:MM:SS, an ISO-8601 instant or a number of seconds)"
        ) from None


def _from_datetime(value: dt.datetime) -> Instant:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_GREGORIAN_CYCLE_MS = 146_097 * 86_400_000
"""400 Gregorian years: the calendar repeats exactly after them."""


def format_instant(t: Instant) -> str:
    """ISO-8601 with milliseconds and `Z`, as `dataflow replay` prints times. Any instant
    (a row stamped year 10000, the end of time): Python's datetime stops at year 9999, so
    the instant is brought into range by whole 400-year cycles and the year put back after;
    a year past 9999 or before 0 is written with its sign (ISO 8601's expanded form)."""
    cycles, within = divmod(t, _GREGORIAN_CYCLE_MS)
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=within)
    year = moment.year + 400 * cycles
    shown = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
    return shown + moment.strftime("-%m-%dT%H:%M:%S.") + f"{t % 1000:03d}Z"


def format_duration(d: Duration) -> str:
    for unit in ("d", "h", "m", "s"):
        if d and d % _UNITS[unit] == 0:
            return f"{d // _UNITS[unit]}{unit}"
    return f"{d}ms"


def format_watermark(t: Instant) -> str:
    """A watermark for messages: an instant, or the beginning or end of time."""
    if t >= END_OF_TIME:
        return "the end of time"
    if t <= -END_OF_TIME:
        return "the beginning of time"
    return format_instant(t)


def is_due(timer: Any, deadline: Any, time: Any, watermark: Any) -> Any:
    """Whether a key has something due at a step at processing time `time` with the
    watermark at `watermark`: a processing-time timer before that time, or a watermark
    deadline the watermark reaches (as `runners.keyed.run_key` fires them). On numbers (None: no timer,
    no deadline) and on Spark columns (null: none) alike."""
    by_timer = False if timer is None else timer < time
    by_watermark = False if deadline is None else deadline <= watermark
    return by_timer | by_watermark


def earliest(times: Iterable[Instant | None]) -> Instant | None:
    """The least of `times` that are known (None: none is)."""
    known = [t for t in times if t is not None]
    return min(known) if known else None


def latest(times: Iterable[Instant | None]) -> Instant | None:
    """The greatest of `times` that are known (None: none is)."""
    known = [t for t in times if t is not None]
    return max(known) if known else None
