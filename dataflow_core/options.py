"""User-given times (command-line options, Airflow params, job arguments) as instants and
intervals."""

from __future__ import annotations

import datetime as dt

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import Duration, Instant, parse_duration


def parse_time(text: str | dt.datetime, option: str) -> Instant:
    """An ISO date (midnight UTC) or instant, for options such as --start, --end, --now."""
    if isinstance(text, dt.datetime):
        moment = text
    else:
        raw = str(text).strip()
        try:
            moment = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise DataflowError(
                f"{option}: {text!r} is not an ISO date or time (e.g. 2024-05-01 or 2024-05-01T06:00:00Z)"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_interval(text: str, option: str) -> Duration:
    """A positive duration in the model's syntax (`30s`, `10m`, `1h`, `1d`), in ms, for
    options such as --batch-interval, --loop, --wait."""
    try:
        ms = parse_duration(text)
    except ValueError as exc:
        raise DataflowError(f"{option}: {exc}") from None
    if ms <= 0:
        raise DataflowError(f"{option}: {text!r} is no interval; give one above zero, e.g. 1m")
    return ms
