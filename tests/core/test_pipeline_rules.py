"""Rules a pipeline is held to before any engine runs: stage outputs are unique across
pipelines, and how long a live pipeline must remember event ids (the seen-ids horizon)."""

from __future__ import annotations

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, HeuristicWatermark
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows, WindowFn
from dataflow_core.pipelines import PipelineSpec, StageSpec, register
from dataflow_core.spark.sinks.seen_ids import SEEN_HORIZON, horizon

H = parse_duration("1h")


def _spec(name: str, output: str, window_fn: WindowFn = FixedWindows(H), lateness: int = H) -> PipelineSpec:
    return PipelineSpec(
        name=name, input_table="t_in", key={"k": "k"}, value="v", watermark=lambda: HeuristicWatermark(bound=0),
        stages=(StageSpec(output, WindowingStrategy(window_fn=window_fn, allowed_lateness=lateness), ("k",), "bigint"),),
    )


def test_two_pipelines_cannot_write_the_same_stage_output():
    register(_spec("t_rules_one", "t_rules_shared"))
    with pytest.raises(DataflowError, match="stage output 't_rules_shared' is already pipeline 't_rules_one'"):
        register(_spec("t_rules_two", "t_rules_shared"))


@pytest.mark.parametrize("window_fn, reach", [
    (FixedWindows(H), H), (SlidingWindows(3 * H, H), 3 * H), (Sessions(parse_duration("30m")), parse_duration("30m")),
    (FixedWindows(parse_duration("7d")), parse_duration("7d")),
])
def test_seen_ids_are_kept_while_a_duplicate_could_still_count(window_fn, reach):
    """A duplicate is dropped as too late only once all its windows are past the allowed
    lateness, so ids are kept for the window's reach on top of it (multi-day windows too)."""
    spec = _spec(f"t_rules_h_{reach}", f"t_rules_h_{reach}_out", window_fn, lateness=2 * H)
    wm = 10**12
    assert horizon(spec, wm) == wm - 2 * H - reach - SEEN_HORIZON
    element_time = horizon(spec, wm) - 1  # forgotten: every window of it is past the lateness
    assert all(w.end + 2 * H <= wm for w in window_fn.assign(_ctx(element_time)))


def test_global_windows_keep_every_id_and_no_watermark_forgets_any():
    spec = _spec("t_rules_global", "t_rules_global_out", GlobalWindows())
    assert horizon(spec, 10**12) is None
    fixed = _spec("t_rules_fixed", "t_rules_fixed_out")
    assert horizon(fixed, BEGINNING_OF_TIME) is None and horizon(fixed, END_OF_TIME) is None


def _ctx(t: int):
    from dataflow_core.model.windows import AssignContext

    return AssignContext("k", 1, t)
