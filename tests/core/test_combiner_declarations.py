"""What every combiner declares (`output_type`, `accepts`, `empty_output`) against what it
does, and the pane gate's model rules over every history the reference runner emits, for
every built-in combiner, window function, accumulation mode and trigger family (not only
`SumFn`, and not only the sample pipelines' shapes)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN, CombineFn, MinFn, SumFn, value_present
from dataflow_core.model.panes import PaneTiming, pane_breaks
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration as d
from dataflow_core.model.triggers import (
    AfterCount, AfterEach, AfterFirst, AfterPercentileWatermark, AfterProcessingTime, AfterWatermark,
    AlignedProcessingTime, Default, Never, OrFinally, Repeatedly,
)
from dataflow_core.model.value_types import decimal_of, element_of, is_numeric, normalized
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.runners.reference import ReferenceRunner
from tests.core.histories import START, histories, run

COMBINERS = st.sampled_from(sorted(BUILT_IN))
WINDOWS = st.sampled_from([FixedWindows(d("2m")), SlidingWindows(d("3m"), d("1m")), Sessions(d("1m")), GlobalWindows()])
TRIGGERS = st.sampled_from([
    Default(),  # the watermark's
    AfterWatermark(early=AfterCount(1)),  # early firings: a discarding pane may carry nothing new
    AfterWatermark(early=AfterProcessingTime(d("1m")), late=AfterCount(1)),
    Repeatedly(AfterCount(2)),  # counts
    AfterCount(3),  # one that finishes
    Repeatedly(AlignedProcessingTime(d("1m"))),  # processing time
    AfterPercentileWatermark(0.5),  # percentiles
    AfterEach(AfterProcessingTime(d("30s")), AfterWatermark(late=AfterCount(2))),  # composites
    AfterFirst(AfterCount(3), AlignedProcessingTime(d("1m"))),
    OrFinally(Repeatedly(AfterProcessingTime(d("20s"))), AfterWatermark()),
    Never(),
])
MODES = st.sampled_from(list(AccumulationMode))
LATENESS = st.sampled_from([d("1000d"), d("2m"), 0])


def by_window(panes: Iterable[Any]) -> dict:
    """Each (key, window)'s panes in emission order (the runner emits them in that order)."""
    out: dict = defaultdict(list)
    for p in panes:
        out[(p.key, p.window)].append(p)
    return out


@settings(max_examples=400, deadline=None)
@given(histories(), WINDOWS, TRIGGERS, MODES, LATENESS, COMBINERS)
def test_every_history_the_reference_runner_emits_passes_the_pane_gates_model_rules(
        history, window_fn, trigger, mode, lateness, name):
    """The rules the pane gate derives its columns from (`pane_breaks` per window,
    `value_present` and `output_possible` per pane) accept every pane the model emits."""
    combiner = BUILT_IN[name]()
    strategy = WindowingStrategy(window_fn=window_fn, trigger=trigger, accumulation=mode,
                                 allowed_lateness=lateness, combiner=combiner)
    for window, panes in by_window(run(ReferenceRunner(strategy, START), history)).items():
        assert pane_breaks(panes) == [[] for _ in panes], window
        for p in panes:
            assert value_present(combiner, p.value), p
            if not p.retraction and p.value is not None:
                assert combiner.output_possible(p.value), p


@pytest.mark.parametrize("name", ["min", "max", "mean"])
def test_a_discarding_on_time_pane_with_nothing_new_is_empty_and_passes(name):
    """The issue's case: an early pane takes everything, the on-time pane then has nothing
    new and carries None, which the value rule accepts for these combiners only."""
    combiner = BUILT_IN[name]()
    strategy = WindowingStrategy(window_fn=FixedWindows(d("1m")), trigger=AfterWatermark(early=AfterCount(1)),
                                 accumulation=AccumulationMode.DISCARDING, combiner=combiner)
    runner = ReferenceRunner(strategy, START)
    panes = runner.add([("k", 5, 1_000)]) + runner.advance_watermark(d("1m"))
    assert [(p.timing, p.value) for p in panes] == [(PaneTiming.EARLY, 5), (PaneTiming.ON_TIME, None)]
    assert all(value_present(combiner, p.value) for p in panes)


@pytest.mark.parametrize("name, empty", [("sum", 0), ("count", 0), ("list", []), ("distinct_count", 0)])
def test_a_null_value_breaks_the_rule_where_the_empty_pane_is_not_null(name, empty):
    combiner = BUILT_IN[name]()
    assert combiner.empty_output() == empty
    assert not value_present(combiner, None)
    assert value_present(combiner, empty)


# --- declared types against extract_output ----------------------------------------------

# Python values of each Spark SQL type, as Spark hands them to Python.
VALUES = {
    "bigint": st.integers(-10**12, 10**12),
    "int": st.integers(-2**31, 2**31 - 1),
    "double": st.floats(-1e9, 1e9, allow_nan=False),
    "decimal(10,2)": st.decimals(min_value=-10**7, max_value=10**7, places=2, allow_nan=False, allow_infinity=False),
    "string": st.text(max_size=5),
    "boolean": st.booleans(),
    "date": st.dates(),
}


def fits(value: Any, type_name: str) -> bool:
    """Whether a Python value is one of Spark SQL type `type_name` (what a column of that
    type takes as it is): the Python type family, a decimal's digits, an integer's range."""
    t = normalized(type_name)
    if element_of(t):
        return isinstance(value, list) and all(fits(v, element_of(t)) for v in value)  # type: ignore[arg-type]
    if decimal_of(t):
        p, s = decimal_of(t)  # type: ignore[misc]
        return isinstance(value, Decimal) and -value.as_tuple().exponent <= s and abs(value) < Decimal(10) ** (p - s)
    if t in ("tinyint", "smallint", "int", "bigint"):
        bits = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}[t]
        return type(value) is int and -2 ** (bits - 1) <= value < 2 ** (bits - 1)
    python = {"double": float, "float": float, "string": str, "boolean": bool, "date": dt.date}[t]
    return type(value) is python


@settings(max_examples=300, deadline=None)
@given(COMBINERS, st.sampled_from(sorted(VALUES)), st.data())
def test_output_type_and_empty_output_are_what_extract_output_gives(name, input_type, data):
    combiner = BUILT_IN[name]()
    assert combiner.empty_output() == combiner.extract_output(combiner.create_accumulator())
    if not combiner.accepts(input_type):
        assert combiner.output_type(input_type) is None
        return
    declared = combiner.output_type(input_type)
    assert declared is not None, (name, input_type)
    values = data.draw(st.lists(VALUES[input_type], min_size=1, max_size=30))
    got = combiner.extract_output(combiner.add_inputs(combiner.create_accumulator(), values))
    assert fits(got, declared), (name, input_type, declared, got)
    empty = combiner.empty_output()  # a sum's 0 is an int whatever it adds up: any number column takes it
    assert empty is None or fits(empty, declared) or (empty == 0 and is_numeric(declared)), (name, declared, empty)


def test_a_sum_and_a_mean_take_numbers_only_and_booleans_are_not_numbers():
    for name in ("sum", "mean"):
        c = BUILT_IN[name]()
        assert [t for t in VALUES if c.accepts(t)] == ["bigint", "int", "double", "decimal(10,2)"]
    for name in ("count", "min", "max", "list", "distinct_count"):
        assert all(BUILT_IN[name]().accepts(t) for t in VALUES), name
    assert SumFn().output_type("decimal(10,2)") == "decimal(20,2)"
    assert SumFn().output_type("decimal(35,4)") == "decimal(38,4)"  # Spark caps precision at 38
    assert SumFn().output_type("integer") == SumFn().output_type("long") == "bigint"


def test_a_multiset_combiner_refuses_values_python_cannot_hash():
    assert not MinFn().accepts("array<bigint>") and not MinFn().accepts("map<string,bigint>")
    assert BUILT_IN["count"]().accepts("array<bigint>")


# --- a user's combiner ------------------------------------------------------------------


class Cents(SumFn):
    """A sum reported in cents: it changes what comes out, so it declares no output type."""

    def extract_output(self, acc: Any) -> Any:
        return int(acc * 100)


class CentsTyped(Cents):
    def output_type(self, input_type: str | None) -> str | None:
        return "bigint"


class Concat(CombineFn):
    """A user's own combiner: declares nothing."""

    def create_accumulator(self) -> str:
        return ""

    def add_input(self, acc: str, value: Any) -> str:
        return acc + str(value)

    def merge_accumulators(self, accs: Iterable[str]) -> str:
        return "".join(accs)

    def extract_output(self, acc: str) -> str:
        return acc


def test_a_subclass_that_changes_extract_output_inherits_no_output_type():
    assert SumFn().output_type("decimal(10,2)") == "decimal(20,2)"
    assert Cents().output_type("decimal(10,2)") is None
    assert Cents().sql_output is None
    assert Cents().accepts("string") is False  # it still adds its inputs up as a sum
    assert CentsTyped().output_type("decimal(10,2)") == "bigint"


def test_a_users_own_combiner_gets_unknown_types_and_its_real_empty_pane():
    c = Concat()
    assert c.output_type("string") is None and c.output_type(None) is None
    assert c.accepts("string") and c.accepts("map<string,string>")
    assert c.empty_output() == ""
    assert not value_present(c, None)


def test_a_subclass_that_changes_the_empty_accumulator_recomputes_its_empty_pane():
    class StartsAtTen(SumFn):
        def create_accumulator(self) -> int:
            return 10

    assert StartsAtTen().empty_output() == 10
    assert StartsAtTen().output_type("bigint") is None  # what a sum declares no longer describes it
    assert StartsAtTen().accepts("string")
