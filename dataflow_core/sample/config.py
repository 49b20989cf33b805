"""Parameters of the sample video-event generator, checked before any Spark work starts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone

from dataflow_core.errors import DataflowError

DEFAULT_START = "2024-05-01T00:00:00+00:00"

# The largest seed xxhash64 accepts as a Spark long.
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def parse_start(text: str | datetime, option: str = "start (--start)") -> datetime:
    """An ISO-8601 instant; a time without an offset is taken as UTC."""
    if isinstance(text, datetime):
        moment = text
    else:
        try:
            moment = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            raise DataflowError(
                f"invalid sample parameter {option}: {text!r} is not an ISO-8601 time "
                "(example: 2024-05-01T00:00:00Z)"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True)
class SampleConfig:
    """What to generate. Shares are fractions of all rows written (approximately: each row
    draws its kind from a hash, so small samples wander around the configured share).

    rows               rows written, duplicates included
    seed               same seed and rows -> identical rows
    start              first event time (UTC); events spread uniformly over `span_hours`
    late_minutes_share rows ingested 1-30 minutes after their event time
    late_hours_share   rows ingested 1-12 hours late: offline mobile viewers (ios/android only)
    duplicate_share    re-deliveries of the previous row's event (same event_id, 1 s - 10 min
                       later ingest_time)
    malformed_share    rows with one defect: null user_id, null video_id, unparseable time
                       text, event time ten years ahead of ingest, negative watch time or an
                       unknown device
    ad_share           views that are ad impressions (ad_id set, 5-30 s watched)
    users, videos      id space sizes; default scales with rows
    ads                how many distinct ads impressions name (default 200)
    """

    rows: int
    seed: int = 42
    start: datetime = field(default_factory=lambda: parse_start(DEFAULT_START))
    span_hours: float = 48.0
    late_minutes_share: float = 0.05
    late_hours_share: float = 0.01
    duplicate_share: float = 0.01
    malformed_share: float = 0.005
    ad_share: float = 0.2
    users: int | None = None
    videos: int | None = None
    ads: int = 200

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", parse_start(self.start))
        self.validate()

    # --- derived values -------------------------------------------------------------
    @property
    def user_count(self) -> int:
        return self.users if self.users is not None else max(100, self.rows // 20)

    @property
    def video_count(self) -> int:
        return self.videos if self.videos is not None else max(20, self.rows // 1000)

    @property
    def start_millis(self) -> int:
        return int(self.start.timestamp() * 1000)

    @property
    def span_millis(self) -> int:
        return int(self.span_hours * 3_600_000)

    @property
    def duplicate_candidate_share(self) -> float:
        """Chance p that a row is a duplicate candidate. A candidate becomes a duplicate only
        if the previous row is not a candidate and not malformed (so it never copies a copy
        or a broken row): share = p (1 - p) (1 - malformed), solved here for p."""
        target = self.duplicate_share / (1.0 - self.malformed_share)
        return (1.0 - math.sqrt(1.0 - 4.0 * target)) / 2.0

    # --- validation -----------------------------------------------------------------
    def validate(self) -> None:
        _whole(self.rows, "rows", minimum=1)
        _whole(self.seed, "seed", minimum=_LONG_MIN, maximum=_LONG_MAX)
        if not isinstance(self.span_hours, (int, float)) or not 0 < self.span_hours <= 24 * 366:
            _fail("span_hours", f"must be more than 0 and at most {24 * 366}", self.span_hours)
        for name in ("late_minutes_share", "late_hours_share", "duplicate_share",
                     "malformed_share", "ad_share"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                _fail(name, "must be a fraction between 0 and 1", value)
        kinds = self.late_minutes_share + self.late_hours_share + self.malformed_share
        if kinds > 1.0:
            _fail("late_minutes_share", "plus late_hours_share plus malformed_share must not "
                  "exceed 1", kinds)
        if self.malformed_share > 0.5:
            _fail("malformed_share", "must be at most 0.5", self.malformed_share)
        if self.duplicate_share > 0.2:
            _fail("duplicate_share", "must be at most 0.2", self.duplicate_share)
        if self.duplicate_share / (1.0 - self.malformed_share) > 0.25:
            _fail("duplicate_share", "must be at most a quarter of the well-formed share "
                  "(1 - malformed_share)", self.duplicate_share)
        if self.users is not None:
            _whole(self.users, "users", minimum=1)
        if self.videos is not None:
            _whole(self.videos, "videos", minimum=1)
        _whole(self.ads, "ads", minimum=1)
        if self.start.year < 1971 or self.start.year > 2200:
            _fail("start", "must be between 1971 and 2200", self.start.isoformat())


def _option(name: str) -> str:
    return f"{name} (--{name.replace('_', '-')})"


def _fail(name: str, what: str, value: object) -> None:
    raise DataflowError(f"invalid sample parameter {_option(name)}: {what}, got {value!r}")


def _whole(value: object, name: str, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(name, "must be a whole number", value)
    if value < minimum:
        _fail(name, f"must be at least {minimum}", value)
    if maximum is not None and value > maximum:
        _fail(name, f"must be at most {maximum}", value)
