"""A stage's definition as the model states it, and what differs between two of them."""

from __future__ import annotations

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import MeanFn, SumFn
from dataflow_core.model.strategy import WindowingStrategy, definition_changes
from dataflow_core.model.triggers import AfterCount, AfterWatermark
from dataflow_core.model.windows import FixedWindows, Sessions

H = 3_600_000


def strategy(**changes) -> WindowingStrategy:
    base = dict(window_fn=FixedWindows(H), trigger=AfterWatermark(late=AfterCount(1)),
                accumulation=AccumulationMode.ACCUMULATING, allowed_lateness=24 * H, combiner=SumFn())
    return WindowingStrategy(**{**base, **changes})


def test_equal_strategies_have_no_changes():
    assert definition_changes(strategy().definition(), strategy().definition()) == []


def test_each_part_of_a_stage_is_named_when_it_changes():
    before = strategy().definition()
    cases = {
        "window": strategy(window_fn=FixedWindows(H // 2)),
        "trigger": strategy(trigger=AfterWatermark()),
        "accumulation": strategy(accumulation=AccumulationMode.DISCARDING),
        "allowed lateness": strategy(allowed_lateness=H),
        "combiner": strategy(combiner=MeanFn()),
    }
    for part, after in cases.items():
        changes = definition_changes(before, after.definition())
        assert len(changes) == 1 and changes[0].startswith(part + " "), (part, changes)
    assert definition_changes(before, strategy(window_fn=FixedWindows(H // 2)).definition()) == [
        "window FixedWindows(1h) -> FixedWindows(30m)"]
    assert definition_changes(before, strategy(window_fn=Sessions(H)).definition())


def test_a_combiner_with_parameters_of_its_own_is_told_apart_by_its_repr():
    class Capped(SumFn):
        def __init__(self, cap: int) -> None:
            self.cap = cap

        def add_input(self, acc, value):
            return min(self.cap, acc + value)

        def __repr__(self) -> str:
            return f"Capped({self.cap})"

    assert definition_changes(strategy(combiner=Capped(3)).definition(), strategy(combiner=Capped(5)).definition()) \
        == ["combiner Capped(3) -> Capped(5)"]


def test_parts_another_build_did_not_record_are_not_compared():
    recorded = {k: v for k, v in strategy().definition().items() if k != "timestamp combiner"}
    assert definition_changes(recorded, strategy().definition()) == []
