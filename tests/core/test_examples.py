"""The shipped examples of the public WindowFn and Trigger APIs work through the runner."""

from __future__ import annotations

from dataflow_core.examples.triggers import AfterMatchingElement
from dataflow_core.examples.windows import PerKeyPhasedFixedWindows
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME
from dataflow_core.model.triggers import Repeatedly
from dataflow_core.model.windows import Sessions
from dataflow_core.runners.reference import ReferenceRunner

M = 60_000


def test_phased_windows_are_per_key_and_stable():
    fn = PerKeyPhasedFixedWindows(10 * M)
    runner = ReferenceRunner(WindowingStrategy(window_fn=fn), 0)
    keys = [f"user{i}" for i in range(20)]
    runner.add([(k, 1, 25 * M) for k in keys])
    panes = runner.advance_watermark(END_OF_TIME)
    windows = {p.key: p.window for p in panes}
    assert len({w.start for w in windows.values()}) > 1  # not all aligned
    for k, w in windows.items():
        assert w.end - w.start == 10 * M
        assert w.start <= 25 * M < w.end
        assert (w.start - fn.phase(k)) % (10 * M) == 0
    assert fn.phase("user3") == PerKeyPhasedFixedWindows(10 * M).phase("user3")


def test_matching_element_trigger_fires_on_match_only():
    trigger = Repeatedly(AfterMatchingElement(lambda v: v == "purchase", "purchase"))
    runner = ReferenceRunner(
        WindowingStrategy(window_fn=Sessions(5 * M), trigger=trigger,
                          accumulation=AccumulationMode.ACCUMULATING,
                          combiner=CountFn()),
        0,
    )
    assert runner.add([("u", "view", 1 * M), ("u", "view", 2 * M)]) == []
    runner.advance_processing_time(10)
    panes = runner.add([("u", "purchase", 3 * M)])
    assert [(p.value, p.timing.value) for p in panes] == [(3, "EARLY")]
    runner.advance_processing_time(20)
    assert runner.add([("u", "view", 4 * M)]) == []
    # at the end the view that no pane included comes out when the window is collected
    final = runner.advance_watermark(END_OF_TIME)
    assert [(p.value, p.last) for p in final] == [(4, True)]
