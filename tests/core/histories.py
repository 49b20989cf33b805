"""Random histories for property tests: bundles in processing-time order and watermark moves."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from dataflow_core.model.time import END_OF_TIME

START = 0
SECOND = 1000


@dataclass(frozen=True)
class Step:
    at: int
    add: tuple[tuple[str, int, int], ...] = ()  # (key, value, event time)
    watermark: int | None = None


@st.composite
def histories(draw, keys=("a", "b", "c"), span_s: int = 600, max_steps: int = 25) -> list[Step]:
    """Elements arrive out of order; the watermark trails the event times and may leave
    some data late; the history ends with the watermark at the end of time."""
    n = draw(st.integers(1, max_steps))
    at = START
    watermark = START
    steps = []
    for _ in range(n):
        at += draw(st.integers(0, 90)) * SECOND
        if draw(st.booleans()) or watermark >= span_s * SECOND:
            size = draw(st.integers(1, 4))
            add = tuple(
                (
                    draw(st.sampled_from(keys)),
                    draw(st.integers(-5, 20)),
                    draw(st.integers(0, span_s)) * SECOND + draw(st.sampled_from([0, 1, 999])),
                )
                for _ in range(size)
            )
            steps.append(Step(at, add=add))
        else:
            watermark = watermark + draw(st.integers(0, 120)) * SECOND
            steps.append(Step(at, watermark=watermark))
    steps.append(Step(at + 1000 * SECOND, watermark=END_OF_TIME))
    return steps


def run(runner, history: list[Step]) -> list:
    panes = []
    for step in history:
        panes += runner.advance_processing_time(step.at)
        if step.add:
            panes += runner.add(step.add)
        if step.watermark is not None:
            panes += runner.advance_watermark(step.watermark)
    return panes
