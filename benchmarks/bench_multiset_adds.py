"""Multiset combiners (min, max, list, distinct count) on the paths that are not lifted:
the reference runner adding one window's distinct inputs one by one, with `add_input`
changing the window's Counter in place against the former copy of the Counter per add
(quadratic per window). A timing to run by hand, not a test:

    PYTHONPATH=. python benchmarks/bench_multiset_adds.py
"""

from __future__ import annotations

import time
from collections import Counter

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import MinFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.windows import GlobalWindows
from dataflow_core.runners.reference import ReferenceRunner


class CopyingMinFn(MinFn):
    """MinFn with the former `add_input`: a new Counter on every add."""

    def add_input(self, acc: Counter, value: object) -> Counter:
        acc = Counter(acc)
        acc[value] += 1
        return acc

    output_type = MinFn.output_type
    empty_output = MinFn.empty_output


def seconds(combiner: MinFn, n: int) -> float:
    """One key, one global window, `n` distinct values in bundles of 100, then the watermark."""
    strategy = WindowingStrategy(window_fn=GlobalWindows(), trigger=AfterWatermark(),
                                 accumulation=AccumulationMode.DISCARDING, combiner=combiner)
    runner = ReferenceRunner(strategy, 0)
    started = time.perf_counter()
    for at in range(0, n, 100):
        runner.advance_processing_time(at)
        runner.add([("k", v, v) for v in range(at, min(n, at + 100))])
    (pane,) = runner.advance_watermark(END_OF_TIME)
    assert pane.value == 0
    return time.perf_counter() - started


if __name__ == "__main__":
    for n in (1_000, 10_000, 30_000):
        copying, in_place = seconds(CopyingMinFn(), n), seconds(MinFn(), n)
        print(f"{n:6d} inputs in one window: copying {copying:7.3f} s, in place {in_place:7.3f} s "
              f"({copying / in_place:5.1f}x)")
