"""Reference runner throughput and memory against a plain dict group-by of the same data.

The baseline is the cheapest correct answer for the default trigger (sum per key and
fixed window); the ratio says what the model's generality (triggers, panes, merging)
costs per element. Both run in this process, on the same data, in the same run.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import SumFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterCount, AfterWatermark, Default
from dataflow_core.model.windows import FixedWindows, Sessions
from dataflow_core.runners.reference import ReferenceRunner

MINUTE = 60_000


def make_data(n: int, keys: int, seed: int) -> list[list[tuple[str, int, int]]]:
    rnd = random.Random(seed)
    bundles, bundle = [], []
    for i in range(n):
        t = i * 50 + rnd.randint(-30_000, 0)  # 20 elements a second, up to 30 s out of order
        bundle.append((f"k{rnd.randrange(keys)}", rnd.randint(1, 10), t))
        if len(bundle) == 100:
            bundles.append(bundle)
            bundle = []
    if bundle:
        bundles.append(bundle)
    return bundles


def baseline(bundles, size_ms: int) -> dict:
    out: dict = {}
    for bundle in bundles:
        for key, value, t in bundle:
            k = (key, t - t % size_ms)
            out[k] = out.get(k, 0) + value
    return out


def reference(bundles, strategy: WindowingStrategy) -> int:
    runner = ReferenceRunner(strategy, 0)
    panes = 0
    for i, bundle in enumerate(bundles):
        runner.advance_processing_time(i * 5_000)
        panes += len(runner.add(bundle))
        panes += len(runner.advance_watermark(max(t for _, _, t in bundle) - 60_000))
    panes += len(runner.advance_watermark(END_OF_TIME))
    return panes


def measure(fn, *args):
    """Time a clean run, then measure peak memory in a second run (tracing slows Python
    down several times, so it must not be inside the timed run)."""
    start = time.perf_counter()
    result = fn(*args)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, seconds, peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    bundles = make_data(args.elements, args.keys, args.seed)
    _, base_s, base_mem = measure(baseline, bundles, 2 * MINUTE)
    print(f"baseline dict group-by: {args.elements / base_s:,.0f} elements/s, peak {base_mem / 2**20:.1f} MiB")
    cases = {
        "fixed 2m, default trigger": WindowingStrategy(FixedWindows(2 * MINUTE), Default(), AccumulationMode.DISCARDING, 0, SumFn()),
        "fixed 2m, early/late, retracting": WindowingStrategy(
            FixedWindows(2 * MINUTE), AfterWatermark(early=AfterCount(10), late=AfterCount(1)),
            AccumulationMode.RETRACTING, 10 * MINUTE, SumFn()),
        "sessions 1m, default trigger": WindowingStrategy(Sessions(MINUTE), Default(), AccumulationMode.ACCUMULATING, 0, SumFn()),
    }
    for name, strategy in cases.items():
        panes, secs, mem = measure(reference, bundles, strategy)
        print(
            f"reference runner, {name}: {args.elements / secs:,.0f} elements/s "
            f"(time ratio {secs / base_s:.1f}x baseline), peak {mem / 2**20:.1f} MiB "
            f"(memory ratio {mem / max(base_mem, 1):.1f}x), {panes} panes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
