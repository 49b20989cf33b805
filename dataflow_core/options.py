"""User-given times (command-line options, Airflow params, job arguments) as instants."""

from __future__ import annotations

import datetime as dt

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import Instant


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
