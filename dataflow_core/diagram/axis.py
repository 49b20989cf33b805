"""The diagram's geometry that needs no drawing library: a processing-time axis with its empty
stretches compressed, tick labels that carry the date, and value labels thinned so that none
overlaps another.

Why a broken axis: a batch backfill's elements arrived when they were ingested (say May 2024)
and its panes were emitted when the backfill ran (say 2026). On one linear axis every element
then sits in one row at the bottom and every pane in one row at the top, two years apart.
`BrokenAxis` keeps each cluster of moments at its own readable scale and puts a short break
between clusters, saying how much time it stands for. A live run, whose moments follow each
other closely, keeps a plain linear axis.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Sequence

from dataflow_core.model.time import END_OF_TIME, Instant

MIN_BREAK_MS = 3_600_000  # a gap shorter than an hour is never compressed
BREAK_SHARE = 0.25  # ... nor one under this share of the whole span
BREAK_HEIGHT = 0.06  # of the axis, per break
MIN_SEGMENT_HEIGHT = 0.3  # of the axis: a cluster of one moment still gets room
POINT_PAD_MS = 300_000  # around a cluster of one moment: ticks in whole minutes

TICK_STEPS_MS = [
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
    60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
    3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000, 86_400_000,
]


@dataclass(frozen=True)
class Segment:
    """Moments [start, end] drawn linearly over axis positions [low, high] (0 to 1)."""

    start: Instant
    end: Instant
    low: float
    high: float

    def position(self, t: Instant) -> float:
        return self.low + (t - self.start) / (self.end - self.start) * (self.high - self.low)


@dataclass(frozen=True)
class BrokenAxis:
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, points: Sequence[Instant]) -> "BrokenAxis":
        """Clusters of `points` (split at every gap of at least an hour and a quarter of the
        whole span), each padded and given axis room in proportion to its span (at least
        `MIN_SEGMENT_HEIGHT`), with a break of `BREAK_HEIGHT` between two clusters."""
        moments = sorted(set(points)) or [0]
        whole = moments[-1] - moments[0]
        clusters: list[list[Instant]] = [[moments[0]]]
        for t in moments[1:]:
            gap = t - clusters[-1][-1]
            if gap >= MIN_BREAK_MS and gap >= BREAK_SHARE * whole:
                clusters.append([t])
            else:
                clusters[-1].append(t)
        spans = []
        for c in clusters:
            width = c[-1] - c[0]
            pad = max(width // 12, 1_000) if width else POINT_PAD_MS
            spans.append((c[0] - pad // 3 if width else c[0] - pad, c[-1] + pad))
        room = 1.0 - BREAK_HEIGHT * (len(spans) - 1)
        total = sum(hi - lo for lo, hi in spans)
        shares = [max((hi - lo) / total, MIN_SEGMENT_HEIGHT) for lo, hi in spans]
        scale = room / sum(shares)
        segments, low = [], 0.0
        for (lo, hi), share in zip(spans, shares):
            high = low + share * scale
            segments.append(Segment(lo, hi, low, high))
            low = high + BREAK_HEIGHT
        return cls(tuple(segments))

    @property
    def start(self) -> Instant:
        return self.segments[0].start

    @property
    def end(self) -> Instant:
        return self.segments[-1].end

    @property
    def breaks(self) -> list[tuple[float, float, Instant]]:
        """(low, high, how long) of each break, bottom to top."""
        return [(a.high, b.low, b.start - a.end) for a, b in zip(self.segments, self.segments[1:])]

    def position(self, t: Instant) -> float:
        """Axis position (0 to 1) of moment `t`; a moment inside a break is spread over it,
        so a pane band that spans a break is still drawn whole."""
        first, last = self.segments[0], self.segments[-1]
        if t <= first.start:
            return first.position(t)
        for seg, nxt in zip(self.segments, self.segments[1:] + (None,)):
            if t <= seg.end:
                return seg.position(t)
            if nxt is not None and t < nxt.start:
                return seg.high + (t - seg.end) / (nxt.start - seg.end) * (nxt.low - seg.high)
        return last.position(t)

    def ticks(self, max_ticks: int = 9) -> list[tuple[float, str]]:
        """(position, label) of round moments in every segment; the first label of a segment
        and any that starts a new day carry the date (with the year), the rest only the time."""
        out: list[tuple[float, str]] = []
        for seg in self.segments:
            room = max(2, round(max_ticks * (seg.high - seg.low)))
            moments = round_ticks(seg.start, seg.end, room)
            previous_day = None
            for t in moments:
                day = utc(t).date()
                out.append((seg.position(t), tick_label(t, with_date=day != previous_day,
                                                        with_seconds=any(m % 60_000 for m in moments))))
                previous_day = day
        return out


def round_ticks(lo: Instant, hi: Instant, max_ticks: int = 9) -> list[Instant]:
    """Round moments (whole seconds, minutes, hours, days) in [lo, hi], at most `max_ticks`."""
    span = max(hi - lo, 1)
    step = next((s for s in TICK_STEPS_MS if span / s <= max_ticks), None)
    if step is None:
        step = -(-span // max_ticks // 86_400_000) * 86_400_000
    first = -(-lo // step) * step
    return list(range(first, hi + 1, step))


def utc(t: Instant) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=t)


def tick_label(t: Instant, with_date: bool, with_seconds: bool = False) -> str:
    time_part = "%H:%M:%S" if with_seconds else "%H:%M"
    return utc(t).strftime(("%Y-%m-%d " if with_date else "") + time_part)


def finite(t: Instant) -> bool:
    """False for the model's beginning and end of time, which no axis can place."""
    return -END_OF_TIME < t < END_OF_TIME - 1


def instant_text(t: Instant) -> str:
    """A moment in full for tooltips; the ends of time in words rather than year 292 million."""
    if not finite(t):
        return "end of time" if t > 0 else "beginning of time"
    return utc(t).strftime("%Y-%m-%d %H:%M:%S")


def duration_text(ms: Instant) -> str:
    """A gap's length in words: `2 y 195 d`, `41 d`, `5 h`."""
    days, rest = divmod(ms, 86_400_000)
    years, days = divmod(days, 365)
    if years:
        return f"{years} y {days} d"
    if days:
        return f"{days} d {rest // 3_600_000} h" if days < 3 else f"{days} d"
    hours = rest // 3_600_000
    return f"{hours} h" if hours else f"{rest // 60_000} min"


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def overlaps(a: Box, b: Box, margin: float = 0.0) -> bool:
    return a[0] < b[2] + margin and b[0] < a[2] + margin and a[1] < b[3] + margin and b[1] < a[3] + margin


def thin(boxes: Sequence[Box], margin: float = 2.0) -> list[int]:
    """Indexes of the boxes to keep, in priority order (earlier boxes win): a box is kept when
    it overlaps no box kept before it (with `margin` around each). The labels dropped are
    still shown on hover (the diagram's marks carry their values as tooltips)."""
    kept: list[int] = []
    for i, box in enumerate(boxes):
        if all(not overlaps(box, boxes[j], margin) for j in kept):
            kept.append(i)
    return kept
