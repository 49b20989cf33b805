"""The global clock every key of a stage shares, and how the keys' holds make the next
stage's.

A *schedule* is a list of steps, each a processing time and the input watermark after it
(one small aggregation over all keys, computed before the keys run), so that a runner may
split a stage by key (`keyed.run_key`) and every key still sees the same clock.

Between stages, the downstream watermark is the upstream's input watermark held back by
each key's pending work (`KeyedWindowSet.output_hold`). Each key reports the spans of
sub-steps during which its hold is below the input watermark (`HoldSpan`); only those can
hold the downstream back, and they are few. `downstream_schedule` folds them into the next
stage's schedule:

- a step `s` of a stage's schedule is processed in three phases, `TIMERS`, `ELEMENTS`,
  `WATERMARK` (sub-steps `(*s, phase, n)`);
- a downstream stage's steps are the upstream's sub-steps, so sequence numbers grow by
  two integers per stage and compare as tuples.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass
from typing import Iterable, Sequence

from dataflow_core.model.time import Instant

Seq = tuple[int, ...]
TIMERS, ELEMENTS, WATERMARK = 0, 1, 2  # the phases of a step, in the order they run


@dataclass(frozen=True)
class Step:
    """A moment of the stage's input: its processing time and the watermark after it."""

    seq: Seq
    time: Instant
    watermark: Instant


class Schedule:
    """A stage's steps in order; times and watermarks never decrease along it."""

    def __init__(self, steps: Sequence[Step], start: Instant, start_time: Instant | None = None):
        self.steps = list(steps)
        self.start = start  # the watermark before the first step
        self.start_time = start_time  # the processing time before it (a resumed run's last)
        self.seqs = [s.seq for s in self.steps]
        self.index = {seq: i for i, seq in enumerate(self.seqs)}  # a step's place, without bisecting tuples
        self.times = [s.time for s in self.steps]
        self.watermarks = [s.watermark for s in self.steps]
        for a, b in zip(self.steps, self.steps[1:]):
            if not (a.seq < b.seq and a.time <= b.time and a.watermark <= b.watermark):
                raise ValueError(f"schedule out of order between {a} and {b}")

    def __len__(self) -> int:
        return len(self.steps)

    def watermark_through(self, seq: Seq, inclusive: bool = True) -> Instant:
        """The input watermark after the last step at (or before) `seq`."""
        i = (bisect.bisect_right if inclusive else bisect.bisect_left)(self.seqs, seq)
        return self.watermarks[i - 1] if i else self.start

    def first_time_after(self, t: Instant, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose time is after `t`."""
        return bisect.bisect_right(self.times, t, lo)

    def first_watermark_at(self, w: Instant, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose watermark reaches `w`."""
        return bisect.bisect_left(self.watermarks, w, lo)

    def first_watermark_above(self, w: Instant, lo: int) -> int:
        return bisect.bisect_right(self.watermarks, w, lo)

    def index_after(self, seq: Seq, lo: int = 0) -> int:
        """Index of the first step at or after `lo` whose seq is after `seq`."""
        return bisect.bisect_right(self.seqs, seq, lo)


@dataclass(frozen=True)
class HoldSpan:
    """Sub-steps `[start, end)` during which a key holds the downstream watermark at `hold`
    (below the input watermark); `end` None means to the end of the run."""

    start: Seq
    start_time: Instant
    end: Seq | None
    end_time: Instant | None
    hold: Instant


def downstream_schedule(
    schedule: Schedule, spans: Iterable[HoldSpan], start: Instant | None = None
) -> Schedule:
    """The next stage's schedule: this stage's input watermark held back by its keys' hold
    spans, as a step at every sub-step where that changes, plus a step at each of this
    stage's watermark sub-steps (so downstream timers see the clock move).

    `start` is the downstream watermark before the schedule (default this stage's start;
    a resumed run passes where the downstream stood)."""
    times: dict[Seq, Instant] = {(*s.seq, WATERMARK, 0): s.time for s in schedule.steps}
    clock = set(times)
    starts: dict[Seq, list[Instant]] = {}
    ends: dict[Seq, list[Instant]] = {}
    for span in spans:
        times.setdefault(span.start, span.start_time)
        starts.setdefault(span.start, []).append(span.hold)
        if span.end is not None:
            times.setdefault(span.end, span.end_time)  # type: ignore[arg-type]
            ends.setdefault(span.end, []).append(span.hold)
    active: list[Instant] = []  # a heap with lazy removal
    removed: dict[Instant, int] = {}
    steps: list[Step] = []
    out = schedule.start if start is None else start
    for seq in sorted(times):
        for h in ends.get(seq, ()):
            removed[h] = removed.get(h, 0) + 1
        for h in starts.get(seq, ()):
            heapq.heappush(active, h)
        while active and removed.get(active[0], 0):
            removed[active[0]] -= 1
            heapq.heappop(active)
        wm_in = schedule.watermark_through(seq[:-2], inclusive=seq[-2] == WATERMARK)
        held = min(wm_in, active[0]) if active else wm_in
        if held > out or seq in clock:
            out = max(out, held)
            steps.append(Step(seq, times[seq], out))
    return Schedule(steps, schedule.start if start is None else start, schedule.start_time)
