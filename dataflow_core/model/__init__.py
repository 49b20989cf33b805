"""The Dataflow model, engine-agnostic and pure Python.

One obvious place per concept of the paper:

- what:  `combiners.CombineFn` (with the optional `retract_input`, the paper's uncombine)
- where: `windows.WindowFn` and the built-in window functions
- when:  `trigger_machine.Trigger` (built-ins in `triggers`), `watermarks.WatermarkEstimator`, allowed lateness in `strategy`
- how:   `accumulation.AccumulationMode`; what comes out is a `panes.Pane`

`group_by_window.KeyedWindowSet` applies a `strategy.WindowingStrategy` to one key's
elements; runners (reference, Spark) only decide what arrives when.
"""

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CombineFn
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.trigger_machine import Trigger
from dataflow_core.model.windows import GlobalWindow, IntervalWindow, Window, WindowFn

__all__ = [
    "AccumulationMode",
    "CombineFn",
    "GlobalWindow",
    "IntervalWindow",
    "Pane",
    "PaneTiming",
    "TimestampCombiner",
    "Trigger",
    "Window",
    "WindowFn",
    "WindowingStrategy",
]
