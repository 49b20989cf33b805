"""Watermark estimators: how a runner guesses, batch by batch, how complete its input is.

Each estimator sees one `Progress` observation per batch and returns the new watermark.
Whatever the guess, a watermark never moves back, and never goes past the batch's
processing time plus the pipeline's `max_skew` (`WatermarkEstimator.update` clamps both).

Each estimator declares what it observes (`observes`, facts of `Progress` named by
`Observation`); a runner gives it those facts and may give nothing else. What the Spark
runners can observe is stated here (`SPARK_LIVE`, `SPARK_BOUNDED`), so that a pipeline whose
estimator they cannot feed is refused when it is registered (`spark_refusal`), not left with
a watermark that never moves.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable, Mapping, Sequence

from dataflow_core.model.time import END_OF_TIME, Duration, Instant, format_duration, parse_duration

BEGINNING_OF_TIME: Instant = -END_OF_TIME


def advanced(watermark: Instant, to: Instant) -> Instant:
    """A watermark moved to `to`: never back, never past the end of time (the one rule,
    every estimator and runner)."""
    return max(watermark, min(to, END_OF_TIME))


class Observation(Enum):
    """A fact of `Progress` an estimator may need. The value says it in words (messages)."""

    MAX_EVENT_TIME = "the batch's greatest event time"
    EVENT_TIME_QUANTILES = "quantiles of the batch's event times"
    PENDING = "the least event time not yet processed (complete input)"
    PARTITIONS = "each input partition's least unread event time"
    PROCESSING_TIME = "the batch's processing time"


SPARK_LIVE: frozenset[Observation] = frozenset(
    {Observation.MAX_EVENT_TIME, Observation.EVENT_TIME_QUANTILES, Observation.PROCESSING_TIME})
"""What a Spark micro-batch observes: one aggregation over each batch's rows in the
executors (greatest event time, the quantiles asked for) and its processing time. Live input
is unbounded, so it cannot promise what is still pending; partitions are not tracked."""

SPARK_BOUNDED: frozenset[Observation] = SPARK_LIVE | {Observation.PENDING}
"""What a Spark arrival-order replay (`dataflow backfill --replay`) observes: the same per
batch, and, its input being a bounded range read whole first, the least event time of the
batches still to replay."""

ALTERNATIVES = "HeuristicWatermark(bound=...) or PercentileWatermark(quantile=...)"
"""What to use instead of an estimator a Spark runner cannot feed (both are fed everywhere)."""


def quantile_rank(count: int, quantile: float) -> int:
    """The 1-based nearest rank of `quantile` among `count` sorted values: ceil(q * count)
    in floating point (as a Spark SQL `ceil(q * count(...))` computes it), at least 1 and at
    most `count`. The one definition of "the quantile" every runner uses."""
    return min(count, max(1, math.ceil(quantile * count)))


@dataclass(frozen=True)
class BatchSummary:
    """A batch's event times as a runner that cannot hand over every one reports them (the
    Spark runners: one aggregation per batch, computed in the executors): the greatest, and
    the nearest-rank quantile (`quantile_rank`) of each fraction the estimator asks for
    (`WatermarkEstimator.quantiles`). `summarize` is its definition; an empty batch has
    `greatest` None and no quantiles."""

    greatest: Instant | None = None
    quantiles: Mapping[float, Instant] = field(default_factory=dict)

    def capped(self, limit: Instant) -> "BatchSummary":
        """Every time at most `limit` (which commutes with summarizing: min is monotone)."""
        return BatchSummary(None if self.greatest is None else min(self.greatest, limit),
                            {q: min(t, limit) for q, t in self.quantiles.items()})


def summarize(event_times: Iterable[Instant], quantiles: Iterable[float] = ()) -> BatchSummary:
    """The summary of a batch's event times (what the reference feeding computes from every
    time, and what the Spark runners' aggregation must equal)."""
    ordered = sorted(event_times)
    if not ordered:
        return BatchSummary()
    return BatchSummary(ordered[-1], {q: ordered[quantile_rank(len(ordered), q) - 1] for q in quantiles})


def pending_after(least_by_batch: Mapping[int, Instant], last: int) -> list[tuple[Instant, ...]]:
    """For each batch 0..last of a bounded replay, what is still pending once it is read: the
    least event time of the batches after it (empty after the last one). What a replay gives
    an estimator observing PENDING, from its batches' least event times (one aggregation)."""
    out: list[tuple[Instant, ...]] = [()] * (last + 1)
    least: Instant | None = None
    for b in range(last, -1, -1):
        out[b] = () if least is None else (least,)
        if (lo := least_by_batch.get(b)) is not None:
            least = lo if least is None else min(least, lo)
    return out


@dataclass(frozen=True)
class Progress:
    """What a runner knows after reading a batch.

    - `batch_event_times`: event times of the elements read in this batch (every one: what
      the reference runner knows), or `batch_summary`, the same batch summarized (what the
      Spark runners compute); estimators read the batch through `summary`;
    - `pending_event_times`: event times of input known to exist but not yet processed
      (for a bounded backfill: everything not yet replayed);
    - `partitions`: per input partition (file, Kafka partition, Delta version...), the least
      event time not yet read from it, or None once it is fully read;
    - `processing_time`: the batch's processing time;
    - `bounded`: True when no input will arrive beyond what is described here (a runner
      says so only with `pending_event_times`: the two are one observation, PENDING);
    - `max_skew`: how far past the processing time event times may be (the pipeline's); with
      `processing_time` it caps every event time observed and the watermark (`limit`).
    """

    batch_event_times: Sequence[Instant] = ()
    pending_event_times: Sequence[Instant] = ()
    partitions: Mapping[str, Instant | None] = field(default_factory=dict)
    processing_time: Instant | None = None
    bounded: bool = False
    batch_summary: BatchSummary | None = None
    max_skew: Duration | None = None

    def summary(self, quantiles: Iterable[float] = ()) -> BatchSummary:
        """The batch's event times, summarized: the runner's summary when it gave one, else
        made from every event time (the reference runner)."""
        if self.batch_summary is not None:
            return self.batch_summary
        return summarize(self.batch_event_times, quantiles)

    @property
    def limit(self) -> Instant | None:
        """The latest instant a watermark may reach after this batch: no input can be known
        complete beyond processing time plus the skew rows may have (issue 63: one row stamped
        2099 must not move the watermark to 2099). None when either is not given."""
        if self.processing_time is None or self.max_skew is None:
            return None
        return self.processing_time + self.max_skew

    @property
    def complete(self) -> bool:
        """Whether the input is known to be done: bounded, nothing pending, every partition
        read. Only then may a watermark pass `limit` (to the end of time)."""
        return self.bounded and not self.pending_event_times and all(t is None for t in self.partitions.values())

    def capped(self) -> "Progress":
        """This progress with every event time at most `limit`, so that an estimator's memory
        (the greatest time seen) is not poisoned by a future-dated row either."""
        limit = self.limit
        if limit is None:
            return self
        return replace(
            self, batch_event_times=[min(t, limit) for t in self.batch_event_times],
            pending_event_times=[min(t, limit) for t in self.pending_event_times],
            partitions={p: None if t is None else min(t, limit) for p, t in self.partitions.items()},
            batch_summary=None if self.batch_summary is None else self.batch_summary.capped(limit),
        )


class WatermarkEstimator(ABC):
    observes: frozenset[Observation] | None = None
    """The facts of `Progress` it reads (None: undeclared, which no Spark runner feeds)."""

    quantiles: tuple[float, ...] = ()
    """The fractions whose quantile of the batch's event times it reads (EVENT_TIME_QUANTILES)."""

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
        """The watermark after `progress`: the estimate from what it observed, each event
        time capped at `progress.limit`, the estimate too unless the input is complete; never
        back."""
        seen = progress.capped()
        guess = self.estimate(seen)
        if guess is not None:
            limit = seen.limit
            if limit is not None and not seen.complete:
                guess = min(guess, limit)
            self.watermark = advanced(self.watermark, guess)
        return self.watermark


def unfed(estimator: WatermarkEstimator, provided: frozenset[Observation]) -> list[Observation]:
    """What `estimator` observes that a runner providing `provided` cannot give it."""
    if estimator.observes is None:
        return list(Observation)
    return [o for o in Observation if o in estimator.observes and o not in provided]


def observes_pending(estimator: WatermarkEstimator) -> bool:
    """Whether a runner should tell `estimator` what is pending (and that its input is
    bounded): only one that observes PENDING is, so that `bounded` never ends the watermark
    of an estimator fed nothing about what is left."""
    return estimator.observes is not None and Observation.PENDING in estimator.observes


def spark_refusal(estimator: WatermarkEstimator, provided: frozenset[Observation] = SPARK_BOUNDED,
                  runner: str = "the Spark runners") -> str | None:
    """Why `runner` (observing `provided`) cannot feed `estimator`, in one line naming it and
    what to use instead; None when it can. Registration asks with `SPARK_BOUNDED` (some Spark
    runner must feed it), a live micro-batch with `SPARK_LIVE`."""
    missing = unfed(estimator, provided)
    if not missing:
        return None
    if estimator.observes is None:
        return (f"watermark {estimator.describe()} does not declare what it observes; set its class's `observes` "
                f"to the `Observation`s it reads, or use {ALTERNATIVES}")
    return (f"watermark {estimator.describe()} observes {', '.join(o.value for o in missing)}, which {runner} "
            f"cannot observe; use {ALTERNATIVES}")


class PerfectWatermark(WatermarkEstimator):
    """Exact for bounded input: the least event time not yet processed (end of time when
    none is left). With `use_arrival_time`, event time *is* arrival time, so the watermark
    is simply the processing time.

    Observes PENDING (a Spark replay feeds it; live unbounded input cannot promise it), or
    with `use_arrival_time` only PROCESSING_TIME (every runner feeds it)."""

    def __init__(self, start: Instant = BEGINNING_OF_TIME, use_arrival_time: bool = False):
        super().__init__(start)
        self.use_arrival_time = use_arrival_time

    @property
    def observes(self) -> frozenset[Observation]:  # type: ignore[override]
        return frozenset({Observation.PROCESSING_TIME if self.use_arrival_time else Observation.PENDING})

    def estimate(self, progress: Progress) -> Instant | None:
        if self.use_arrival_time:
            return progress.processing_time
        if progress.pending_event_times:
            return min(progress.pending_event_times)
        return END_OF_TIME if progress.bounded else None


class HeuristicWatermark(WatermarkEstimator):
    """The largest event time seen so far minus a fixed bound on out-of-orderness."""

    observes = frozenset({Observation.MAX_EVENT_TIME})

    def __init__(self, bound: "Duration | str", start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        self.bound = parse_duration(bound, "HeuristicWatermark bound")
        self.max_seen: Instant | None = None

    def estimate(self, progress: Progress) -> Instant | None:
        top = progress.summary().greatest
        if top is not None:
            self.max_seen = top if self.max_seen is None else max(self.max_seen, top)
        if progress.bounded and not progress.pending_event_times:
            return END_OF_TIME
        return None if self.max_seen is None else self.max_seen - self.bound


class PercentileWatermark(WatermarkEstimator):
    """The `quantile` of the event times each batch delivers: MillWheel's percentile low
    watermark, where the work in flight when a micro-batch runner sets the watermark is the
    batch it has just read (its stages process it next, under the new watermark).

    `quantile=0.01` gives the "99% watermark": 99% of the batch's data is at or after it,
    so a straggling 1% does not hold everything back (it arrives as late data instead). The
    quantile is the nearest rank (`quantile_rank`); a batch with no elements leaves the
    watermark where it is; complete input (`Progress.complete`) ends it.
    """

    observes = frozenset({Observation.EVENT_TIME_QUANTILES})

    def __init__(self, quantile: float, start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        if not 0 <= quantile <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        self.quantile = quantile

    @property
    def quantiles(self) -> tuple[float, ...]:  # type: ignore[override]
        return (self.quantile,)

    def estimate(self, progress: Progress) -> Instant | None:
        if progress.bounded and not progress.pending_event_times:
            return END_OF_TIME
        return progress.summary(self.quantiles).quantiles.get(self.quantile)  # none: no element in the batch


class SourceProgressWatermark(WatermarkEstimator):
    """The least event time of the input partitions not yet fully read (MillWheel's file
    injector): each partition reports where it stands, finished ones drop out. No Spark
    runner tracks partitions: refused there when the pipeline is registered."""

    observes = frozenset({Observation.PARTITIONS, Observation.MAX_EVENT_TIME})

    def __init__(self, start: Instant = BEGINNING_OF_TIME):
        super().__init__(start)
        self.max_seen: Instant | None = None

    def estimate(self, progress: Progress) -> Instant | None:
        top = progress.summary().greatest
        if top is not None:
            self.max_seen = top if self.max_seen is None else max(self.max_seen, top)
        unread = [t for t in progress.partitions.values() if t is not None]
        if unread:
            return min(unread)
        if progress.bounded:
            return END_OF_TIME
        return self.max_seen  # every known partition is read: caught up with what we saw
