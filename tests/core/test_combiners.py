"""What is computed: the built-in combiners, their retraction, and the retracting-mode check."""

from __future__ import annotations

from typing import Any, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import BUILT_IN, CombineFn, combiner_named
from dataflow_core.model.strategy import InvalidStrategy, WindowingStrategy

NAMES = ["sum", "count", "min", "max", "mean", "list", "distinct_count"]

values = st.lists(st.integers(-1000, 1000), max_size=20)


def fold(fn: CombineFn, xs: Iterable[Any]) -> Any:
    return fn.add_inputs(fn.create_accumulator(), xs)


def out(fn: CombineFn, xs: Iterable[Any]) -> Any:
    return fn.extract_output(fold(fn, xs))


def test_every_format_md_combiner_is_built_in():
    assert set(NAMES) <= set(BUILT_IN)
    assert all(combiner_named(n).name == n for n in NAMES)
    assert combiner_named(" Sum ").name == "sum"


def test_unknown_combiner_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown combiner 'median' \(expected one of: .*sum"):
        combiner_named("median")


@pytest.mark.parametrize(
    "name, expected",
    [("sum", 9), ("count", 5), ("min", -2), ("max", 5), ("mean", 1.8), ("list", [-2, 1, 1, 4, 5]), ("distinct_count", 4)],
)
def test_built_in_outputs(name: str, expected: Any):
    assert out(combiner_named(name), [5, 1, -2, 4, 1]) == expected


@pytest.mark.parametrize("name, empty", [("sum", 0), ("count", 0), ("min", None), ("max", None), ("mean", None), ("list", []), ("distinct_count", 0)])
def test_built_in_outputs_of_nothing(name: str, empty: Any):
    fn = combiner_named(name)
    assert fn.extract_output(fn.create_accumulator()) == empty


@pytest.mark.parametrize("name", NAMES)
def test_every_built_in_can_retract(name: str):
    assert combiner_named(name).can_retract


@pytest.mark.parametrize("name", NAMES)
@settings(deadline=None)  # timing varies on a loaded CI machine
@given(xs=values, y=st.integers(-1000, 1000))
def test_retract_input_undoes_add_input(name: str, xs: list[int], y: int):
    fn = combiner_named(name)
    acc = fold(fn, xs)
    assert fn.extract_output(fn.retract_input(fn.add_input(acc, y), y)) == fn.extract_output(acc)


@pytest.mark.parametrize("name", NAMES)
@settings(deadline=None)  # timing varies on a loaded CI machine
@given(xs=values, data=st.data())
def test_retracting_any_added_inputs_leaves_the_rest(name: str, xs: list[int], data: st.DataObject):
    fn = combiner_named(name)
    gone = data.draw(st.lists(st.sampled_from(range(len(xs))), unique=True) if xs else st.just([]))
    acc = fold(fn, xs)
    for i in gone:
        acc = fn.retract_input(acc, xs[i])
    assert fn.extract_output(acc) == out(fn, [x for i, x in enumerate(xs) if i not in gone])


@pytest.mark.parametrize("name", NAMES)
@settings(deadline=None)  # timing varies on a loaded CI machine
@given(a=values, b=values, c=values)
def test_merge_is_associative_and_commutative_on_outputs(name: str, a: list[int], b: list[int], c: list[int]):
    fn = combiner_named(name)
    A, B, C = fold(fn, a), fold(fn, b), fold(fn, c)
    left = fn.merge_accumulators([fn.merge_accumulators([A, B]), C])
    right = fn.merge_accumulators([A, fn.merge_accumulators([B, C])])
    assert fn.extract_output(left) == fn.extract_output(right) == out(fn, a + b + c)
    assert fn.extract_output(fn.merge_accumulators([A, B])) == fn.extract_output(fn.merge_accumulators([B, A]))
    assert fn.extract_output(fn.merge_accumulators([])) == fn.extract_output(fn.create_accumulator())


@pytest.mark.parametrize("name", ["min", "max", "list", "distinct_count"])
def test_retracting_a_value_never_added_is_an_error(name: str):
    fn = combiner_named(name)
    with pytest.raises(ValueError, match="cannot retract 7"):
        fn.retract_input(fold(fn, [1, 2]), 7)


def test_min_and_max_after_retracting_the_extreme_fall_back_to_the_next():
    for name, expected in (("min", 3), ("max", 3)):
        fn = combiner_named(name)
        extreme = 1 if name == "min" else 9
        assert fn.extract_output(fn.retract_input(fold(fn, [extreme, 3, extreme]), extreme)) == extreme
        assert fn.extract_output(fn.retract_input(fn.retract_input(fold(fn, [extreme, 3, extreme]), extreme), extreme)) == expected


# --- user combiners and retracting mode -------------------------------------------------


class FirstSeen(CombineFn):
    """Keeps the first value: there is no way to take an input back out."""

    name = "first_seen"

    def create_accumulator(self) -> Any:
        return None

    def add_input(self, acc: Any, value: Any) -> Any:
        return value if acc is None else acc

    def merge_accumulators(self, accs: Iterable[Any]) -> Any:
        return next((a for a in accs if a is not None), None)

    def extract_output(self, acc: Any) -> Any:
        return acc


class Unnamed(CombineFn):
    """A user combiner that never sets `name`: messages use its class name."""

    create_accumulator = FirstSeen.create_accumulator
    add_input = FirstSeen.add_input
    merge_accumulators = FirstSeen.merge_accumulators
    extract_output = FirstSeen.extract_output


class Total(CombineFn):
    name = "total"

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, acc: int, value: int) -> int:
        return acc + value

    def merge_accumulators(self, accs: Iterable[int]) -> int:
        return sum(accs)

    def extract_output(self, acc: int) -> int:
        return acc

    def retract_input(self, acc: int, value: int) -> int:
        return acc - value


def test_can_retract_tells_whether_retract_input_is_implemented():
    assert not FirstSeen().can_retract
    assert Total().can_retract
    with pytest.raises(NotImplementedError, match="first_seen"):
        FirstSeen().retract_input(1, 1)


def test_retracting_mode_rejects_a_combiner_without_retract_input_and_says_why():
    with pytest.raises(InvalidStrategy) as err:
        WindowingStrategy(accumulation=AccumulationMode.RETRACTING, combiner=FirstSeen())
    message = str(err.value)
    assert "first_seen" in message and "retract_input" in message and "retracting" in message


def test_retracting_mode_accepts_a_user_combiner_with_retract_input():
    strategy = WindowingStrategy(accumulation=AccumulationMode.RETRACTING, combiner=Total())
    assert strategy.combiner.name == "total"


@pytest.mark.parametrize("mode", [AccumulationMode.DISCARDING, AccumulationMode.ACCUMULATING])
def test_other_modes_accept_a_combiner_without_retract_input(mode: AccumulationMode):
    assert WindowingStrategy(accumulation=mode, combiner=FirstSeen()).accumulation is mode


def test_retracting_mode_error_names_a_user_combiner_that_sets_no_name():
    with pytest.raises(InvalidStrategy, match="Unnamed"):
        WindowingStrategy(accumulation=AccumulationMode.RETRACTING, combiner=Unnamed())


def test_combine_fn_is_abstract():
    with pytest.raises(TypeError):
        CombineFn()  # type: ignore[abstract]
