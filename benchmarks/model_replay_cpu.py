"""The model alone on billing's arrival-order replay: CPU seconds of `run_key` per event,
in pure Python (no Spark), with a fingerprint of every pane so that two checkouts can be
held to the same output. A developer's tool for work on the model's hot path, not one of
`make bench`'s figures (those are `bench_*.py`: `bench_replay.py` times the same replay
on Spark against Spark SQL).

The events follow `bench_replay.generate` (per ad, decimal watch seconds over 48 hours;
most arrive within a minute, 5% up to 30 minutes late, 1% up to 6 hours late), cut into
one-minute micro-batches with billing's heuristic watermark updated per batch. Bundles
are pre-combined per window outside the timed part (Spark SQL does that in a replay), so
the figure is what executors' Python spends in the model on the lifted path.

    PYTHONPATH=. .venv/bin/python benchmarks/model_replay_cpu.py --events 200000
    ... --profile           # cProfile of the timed part (sorted by own time)
    ... --elements          # feed elements instead (and check they give the same panes)
    ... --holds             # track hold spans too (a stage with one downstream)
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from decimal import Decimal

T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
SPAN_MS = 48 * 3600 * 1000
INTERVAL_MS = 60_000


def generate(n: int, keys: int, seed: int = 1) -> list[tuple[str, Decimal, int, int]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        ad = f"ad-{int(rnd.random() * keys)}"
        value = Decimal(round(rnd.random() * 300, 3)).quantize(Decimal("0.001"))
        event = T0 + int(rnd.random() * SPAN_MS)
        r = rnd.random()
        delay = int(rnd.random() * (6 * 3600000 if r < 0.01 else 30 * 60000 if r < 0.06 else 60000))
        out.append((ad, value, event, event + delay))
    return out


def replay_input(events, strategy, estimator):
    """The schedule (a step per minute of ingest time) and each key's arrivals."""
    from dataflow_core.model.group_by_window import Element
    from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
    from dataflow_core.runners.keyed import Arrival, Schedule, Step

    t0 = min(e[3] for e in events)
    t0 -= t0 % INTERVAL_MS
    stats: dict[int, tuple[int, int]] = {}
    by_key: dict[str, dict[int, list]] = {}
    for ad, value, event, ingest in events:
        b = (ingest - t0) // INTERVAL_MS
        lo, hi = stats.get(b, (event, event))
        stats[b] = (min(lo, event), max(hi, event))
        by_key.setdefault(ad, {}).setdefault(b, []).append(Element(value, event))
    steps = []
    for b in range(max(stats) + 1):
        at = t0 + (b + 1) * INTERVAL_MS
        wm = estimator.update(Progress(batch_event_times=stats.get(b) or (), processing_time=at))
        steps.append(Step((b,), at, wm))
    arrivals = {
        k: [Arrival((b,), t0 + (b + 1) * INTERVAL_MS, tuple(sorted(els, key=lambda e: e.timestamp)))
            for b, els in sorted(v.items())]
        for k, v in sorted(by_key.items())
    }
    return Schedule(steps, BEGINNING_OF_TIME), arrivals


def fingerprint(results) -> tuple[int, str]:
    h = hashlib.sha256()
    n = 0
    for key, r in results:
        for seq, p in r.panes:
            n += 1
            h.update(repr((key, seq, p.window.start, p.window.end, str(p.value), p.timestamp, p.timing.value,
                           p.index, p.on_time_index, p.first, p.last, p.emitted_at, p.retraction)).encode())
        h.update(repr((key, [(s.start, s.start_time, s.end, s.end_time, s.hold) for s in r.holds],
                       r.elements, r.dropped, r.dropped_windows)).encode())
    return n, h.hexdigest()[:16]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="time the run this many times (best CPU)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--elements", action="store_true", help="feed elements, not pre-combined parts")
    parser.add_argument("--holds", action="store_true", help="track hold spans")
    opts = parser.parse_args(argv)

    from dataflow_core.pipelines import get
    from dataflow_core.runners import keyed

    spec = get("billing")
    strategy = spec.stages[0].strategy
    schedule, arrivals = replay_input(generate(opts.events, opts.keys), strategy, spec.watermark())
    if not opts.elements:
        arrivals = {k: keyed.lifted(strategy, k, a) for k, a in arrivals.items()}

    def run():
        return [(k, keyed.run_key(k, strategy, schedule, a, track_holds=opts.holds)) for k, a in arrivals.items()]

    best = None
    for _ in range(opts.repeat):
        if opts.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            c0 = time.process_time()
            prof.enable()
            results = run()
            prof.disable()
            cpu = time.process_time() - c0
            pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(30)
        else:
            c0 = time.process_time()
            results = run()
            cpu = time.process_time() - c0
        best = cpu if best is None else min(best, cpu)
    panes, digest = fingerprint(results)
    mode = "elements" if opts.elements else "lifted"
    print(f"{mode}{' +holds' if opts.holds else ''}: {opts.events:,} events, {len(schedule):,} steps, "
          f"{panes:,} panes, fingerprint {digest}; best CPU {best:.2f} s = {opts.events / best:,.0f} events per CPU-second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
