"""Watermark estimators: how a runner guesses, batch by batch, how complete its input is.

Each estimator sees one `Progress` observation per batch and returns the new watermark.
Whatever the guess, a watermark never moves back (`WatermarkEstimator.update` clamps).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from dataflow_core.model.time import END_OF_TIME, Duration, Instant, format_duration, parse_duration

BEGINNING_OF_TIME: Instant = -END_OF_TIME


def advanced(watermark: Instant, to: Instant) -> Instant:
    """A watermark moved to `to`: never back, never past the end of time (the one rule,
    every estimator and runner)."""
    return max(watermark, min(to, END_OF_TIME))


@dataclass(frozen=True)
class Progress:
    """What a runner knows after reading a batch.

    - `batch_event_times`: event times of the elements read in this batch;
    - `pending_event_times`: event times of input known to exist but not yet processed
      (for a bounded backfill: everything not yet replayed);
    - `partitions`: per input partition (file, Kafka partition, Delta version...), the least
      event time not yet read from it, or None once it is fully read;
    - `processing_time`: the batch's processing time;
    - `bounded`: True when no input will arrive beyond what is described here.
    """

    batch_event_times: Sequence[Instant] = ()
    pending_event_times: Sequence[Instant] = ()
    partitions: Mapping[str, Instant | None] = field(default_factory=dict)
    processing_time: Instant | None = None
    bounded: bool = False


class WatermarkEstimator(ABC):
    def __init__(self, start: Instant = BEGINNING_OF_TIME):
        self.watermark = start

    @abstractmethod
    def estimate(self, progress: Progress) -> Instant | None:
        """This batch's guess, or None for no opinion (the watermark stays put)."""

    def describe(self) -> str:
        """How users would write this estimator (listed by `dataflow pipelines`)."""
        params = {k: v for k, v in vars(self).items() if k not in ("watermark", "max_seen")}
        shown = ", ".join(
            f"{k}={format_duration(v) if k == 'bound' else repr(v)}" for k, v in params.items()
        )
        return f"{type(self).__name__}({shown})"

    _STATE_FIELDS = ("watermark", "max_seen")
    """What an estimator learns as it goes (the rest of it is its definition)."""

    def to_state(self) -> dict:
        """What it has learnt, as JSON data, so a later batch's estimator carries on."""
        return {"version": 1, **{f: getattr(self, f) for f in self._STATE_FIELDS if hasattr(self, f)}}

    def load_state(self, state: dict) -> "WatermarkEstimator":
        if state.get("version") != 1:
            raise ValueError(f"watermark estimator state of version {state.get('version')!r}: this build reads version 1")
        for f in self._STATE_FIELDS:
            if f in state and hasattr(self, f):
                setattr(self, f, state[f])
        return self

    def update(self, progress: Progress) -> Instant:
        guess = self.estimate(progress)
        if guess is not None:
            self.watermark = advanced(self.watermark, guess)
        return self.watermark


class PerfectWatermark(WatermarkEstimator):
    """Exact for bounded input: the least event time not yet processed (end of time when
    none is left). With `use_arrival_time`, event time *is* arrival time, so the watermark
    is simply the processing time."""

    def __init__(self, start: Instant = BEGINNING_OF_TIME, use_arrival_time: bool = False):
        super().__init__(start)
        self.use_arrival_time = use_arrival_time

    def estimate(self, progress: Progress) -> Instant | None:
        if self.use_arrival_time:
            return progress.processing_time
        if progress.pending_event_times:
            return min(progress.pending_event_times)
        return END_OF_TIME if progress.bounded else None


class HeuristicWatermark(WatermarkEstimator):
    """The largest event time seen so far minus a fixed bound on out-of-orderness."""

    def __init__(self, bound: "Duration | str", start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        self.bound = parse_duration(bound, "HeuristicWatermark bound")
        self.max_seen: Instant | None = None

    def estimate(self, progress: Progress) -> Instant | None:
        if progress.batch_event_times:
            top = max(progress.batch_event_times)
            self.max_seen = top if self.max_seen is None else max(self.max_seen, top)
        if progress.bounded and not progress.pending_event_times:
            return END_OF_TIME
        return None if self.max_seen is None else self.max_seen - self.bound


class PercentileWatermark(WatermarkEstimator):
    """The `quantile` of the event times still pending: MillWheel's percentile low watermark.

    `quantile=0.01` gives the "99% watermark": 99% of the pending data is at or after it,
    so a straggling 1% does not hold everything back (it arrives as late data instead).
    """

    def __init__(self, quantile: float, start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        if not 0 <= quantile <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        self.quantile = quantile

    def estimate(self, progress: Progress) -> Instant | None:
        pending = sorted(progress.pending_event_times)
        if not pending:
            return END_OF_TIME if progress.bounded else None
        index = min(len(pending) - 1, max(0, math.ceil(self.quantile * len(pending)) - 1))
        return pending[index]


class SourceProgressWatermark(WatermarkEstimator):
    """The least event time of the input partitions not yet fully read (MillWheel's file
    injector): each partition reports where it stands, finished ones drop out."""

    def __init__(self, start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        self.max_seen: Instant | None = None

    def estimate(self, progress: Progress) -> Instant | None:
        if progress.batch_event_times:
            top = max(progress.batch_event_times)
            self.max_seen = top if self.max_seen is None else max(self.max_seen, top)
        unread = [t for t in progress.partitions.values() if t is not None]
        if unread:
            return min(unread)
        if progress.bounded:
            return END_OF_TIME
        return self.max_seen  # every known partition is read: caught up with what we saw
