"""What is computed: associative combiners, optionally retractable (the paper's uncombine).

A combiner also declares what runners need to keep and add up its results:

- `encode_accumulator` / `decode_accumulator`: its accumulator as a JSON value, so live
  state is data (never pickled code) and survives a renamed class;
- `output_merge`: how the outputs of a window's discarding panes add up to the window's
  total ("sum", "min" or "max", the name of an associative SQL aggregate), with
  `merge_outputs` its meaning in Python; None when outputs do not add up;
- `output_difference`: the discarding pane that takes a window from one total to another
  (a backfill's correction of a discarding stage);
- `sql_partial` / `from_partial` / `retract_accumulator`: its partial aggregate as Spark
  SQL aggregates over a column `value`, the accumulator that partial stands for, and how
  to take a partial's accumulator back out (combiner lifting: a runner may reduce a
  step's elements per window in SQL and hand the model one accumulator; see
  `model.lifting`). A combiner without `sql_partial` is fed element by element;
- `output_type` / `accepts` / `empty_output`: the Spark SQL type of its output for an input
  type, whether it can take inputs of a type at all (`model.value_types` names them), and
  the value of a pane with nothing in it. `dataflow check`, type inference and the pane
  gate ask these rather than guess from the combiner's class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import Any, Callable, Generic, Iterable, TypeVar

from dataflow_core.model.value_types import is_atomic, is_numeric, normalized, sum_type

Acc = TypeVar("Acc")


class CombineFn(ABC, Generic[Acc]):
    """create / add / merge / extract, and `retract_input` when the combiner can undo an add."""

    name: str = "combine"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__  # messages name the user's combiner class
        meaning = ("create_accumulator", "add_input", "merge_accumulators", "extract_output")
        redefines = [m for m in meaning if m in cls.__dict__]
        if "sql_output" not in cls.__dict__ and redefines:
            cls.sql_output = None
        # What a parent declares about its outputs and inputs describes the parent's
        # meaning: a subclass that changes it and does not restate them declares nothing.
        if "output_type" not in cls.__dict__ and redefines:
            cls.output_type = CombineFn.output_type  # type: ignore[method-assign]
        if "empty_output" not in cls.__dict__ and {"create_accumulator", "extract_output"} & set(redefines):
            cls.empty_output = CombineFn.empty_output  # type: ignore[method-assign]
        if "accepts" not in cls.__dict__ and {"create_accumulator", "add_input"} & set(redefines):
            cls.accepts = CombineFn.accepts  # type: ignore[method-assign]

    @abstractmethod
    def create_accumulator(self) -> Acc: ...

    @abstractmethod
    def add_input(self, acc: Acc, value: Any) -> Acc:
        """`acc` with `value` added. It may change `acc` and return it (as Beam allows):
        callers keep the accumulator returned and never use the one they passed again (so
        does `retract_input`); one that must keep a snapshot copies it there."""

    @abstractmethod
    def merge_accumulators(self, accs: Iterable[Acc]) -> Acc: ...

    @abstractmethod
    def extract_output(self, acc: Acc) -> Any: ...

    def retract_input(self, acc: Acc, value: Any) -> Acc:
        """Undo one earlier `add_input(value)`; needed to consume retractions."""
        raise NotImplementedError(f"combiner {self.name!r} cannot retract inputs")

    @property
    def can_retract(self) -> bool:
        return type(self).retract_input is not CombineFn.retract_input

    # --- what it takes and gives (types as Spark SQL type names, `model.value_types`) -----

    def output_type(self, input_type: str | None) -> str | None:
        """The type of this combiner's output over inputs of `input_type` (None: not known,
        then only a type that does not depend on the input is given), as Spark aggregates
        them: a sum of decimal(10,2) is decimal(20,2). None when not known; a user's
        combiner declares none unless it overrides this."""
        return None

    def accepts(self, input_type: str | None) -> bool:
        """Whether inputs of `input_type` can be combined at all (a sum needs numbers; a
        boolean is not one). An unknown type (None) is accepted; a user's combiner accepts
        every type unless it overrides this."""
        return True

    def empty_output(self) -> Any:
        """`extract_output` of an empty accumulator: the value of a pane with nothing in it
        (a discarding pane with nothing new since the window's last pane, or a window whose
        inputs were all retracted). A pane may carry None exactly when this is None
        (`value_present`, the pane gate's rule)."""
        return self.extract_output(self.create_accumulator())

    # --- how results add up (discarding panes) ------------------------------------------

    output_merge: str | None = None
    """"sum", "min" or "max": the associative aggregate over a window's discarding pane
    outputs that gives its total; None when outputs do not merge (no results table)."""

    def merge_outputs(self, outputs: Iterable[Any]) -> Any:
        """The total of a window whose discarding panes had these outputs."""
        values = list(outputs)
        if self.output_merge == "sum":
            return sum(values[1:], values[0]) if values else self.empty_output()
        if self.output_merge in ("min", "max") and values:
            present = [v for v in values if v is not None]
            if not present:
                return None
            return min(present) if self.output_merge == "min" else max(present)
        raise ValueError(f"combiner {self.name!r}: outputs of discarding panes do not merge")

    def output_possible(self, output: Any) -> bool:
        """Whether `output` is one this combiner can produce (the pane gate asks it of
        every pane); a count's is never negative."""
        return True

    def output_difference(self, total: Any, previous_total: Any) -> Any:
        """The discarding pane that follows a pane history totalling `previous_total` when
        the window's total is now `total`. A sum's is the difference; an extremum cannot be
        undone by a later pane, so its correction carries the new total. Asked only of a
        window that has a history: a window's first pane carries its total."""
        if self.output_merge == "sum" and total is not None and previous_total is not None:
            return total - previous_total
        return total

    # --- SQL forms (combiner lifting, batch aggregation) --------------------------------

    sql_output: str | None = None
    """A Spark SQL aggregate over the column `value` that gives `extract_output` of all the
    aggregated elements (a batch runner's whole-window aggregate); None: no such form. A
    subclass that redefines how inputs add up or what comes out and does not restate it has
    none (`__init_subclass__`), so an inherited form never misstates a user's combiner."""

    sql_partial: tuple[tuple[str, str], ...] | None = None
    """(field, Spark SQL aggregate over the column `value`) pairs whose results, read back
    as a dict, give `from_partial` the accumulator of the elements aggregated; None: no
    SQL form (the runner feeds elements one by one)."""

    partial_exact_for_floats: bool = False
    """Whether the partial equals adding the elements one by one even for inexact
    (floating-point) values, whose sums depend on the order of addition; a sum's does not
    (it is exact for integers and decimals only)."""

    def from_partial(self, partial: dict[str, Any]) -> Acc:
        """The accumulator of the elements a `sql_partial` row aggregated."""
        raise NotImplementedError(f"combiner {self.name!r} has no SQL partial form")

    def retract_accumulator(self, acc: Acc, other: Acc) -> Acc:
        """Undo `merge_accumulators([acc, other])`: retract every input `other` holds."""
        raise NotImplementedError(f"combiner {self.name!r} cannot retract an accumulator")

    # --- how state is stored ----------------------------------------------------------

    def encode_accumulator(self, acc: Acc) -> Any:
        """The accumulator as a JSON value (numbers, strings, lists, dicts with string keys)."""
        return acc

    def decode_accumulator(self, data: Any) -> Acc:
        return data  # type: ignore[return-value]

    def add_inputs(self, acc: Acc, values: Iterable[Any]) -> Acc:
        for v in values:
            acc = self.add_input(acc, v)
        return acc

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SumFn(CombineFn[Any]):
    name = "sum"
    output_merge = "sum"
    sql_output = "sum(value)"

    def create_accumulator(self) -> Any:
        return 0

    def add_input(self, acc: Any, value: Any) -> Any:
        return acc + value

    def merge_accumulators(self, accs: Iterable[Any]) -> Any:
        return sum(accs, 0)

    def extract_output(self, acc: Any) -> Any:
        return acc

    def retract_input(self, acc: Any, value: Any) -> Any:
        return acc - value

    def output_type(self, input_type: str | None) -> str | None:
        return sum_type(input_type) if input_type is not None else None

    def accepts(self, input_type: str | None) -> bool:
        return input_type is None or is_numeric(input_type)

    def empty_output(self) -> Any:
        return 0

    sql_partial = (("sum", "sum(value)"),)

    def from_partial(self, partial: dict[str, Any]) -> Any:
        return partial["sum"]

    def retract_accumulator(self, acc: Any, other: Any) -> Any:
        return acc - other


class CountFn(CombineFn[int]):
    name = "count"
    output_merge = "sum"
    sql_output = "count(1)"

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, acc: int, value: Any) -> int:
        return acc + 1

    def merge_accumulators(self, accs: Iterable[int]) -> int:
        return sum(accs, 0)

    def extract_output(self, acc: int) -> int:
        return acc

    def retract_input(self, acc: int, value: Any) -> int:
        return acc - 1

    def output_possible(self, output: Any) -> bool:
        return output >= 0

    def output_type(self, input_type: str | None) -> str | None:
        return "bigint"  # whatever it counts

    def empty_output(self) -> int:
        return 0

    sql_partial = (("n", "count(1)"),)
    partial_exact_for_floats = True

    def from_partial(self, partial: dict[str, Any]) -> int:
        return int(partial["n"])

    def retract_accumulator(self, acc: int, other: int) -> int:
        return acc - other


class MeanFn(CombineFn[tuple]):
    name = "mean"

    def create_accumulator(self) -> tuple:
        return (0, 0)

    def add_input(self, acc: tuple, value: Any) -> tuple:
        return (acc[0] + value, acc[1] + 1)

    def merge_accumulators(self, accs: Iterable[tuple]) -> tuple:
        total, count = 0, 0
        for s, c in accs:
            total, count = total + s, count + c
        return (total, count)

    def extract_output(self, acc: tuple) -> Any:
        """A float, as its declared type (double) is, for decimal inputs too."""
        return float(acc[0] / acc[1]) if acc[1] else None

    def retract_input(self, acc: tuple, value: Any) -> tuple:
        return (acc[0] - value, acc[1] - 1)

    def output_type(self, input_type: str | None) -> str | None:
        return "double" if input_type is not None and self.accepts(input_type) else None

    def accepts(self, input_type: str | None) -> bool:
        return input_type is None or is_numeric(input_type)

    def empty_output(self) -> Any:
        return None

    sql_partial = (("sum", "sum(value)"), ("n", "count(1)"))

    def from_partial(self, partial: dict[str, Any]) -> tuple:
        return (partial["sum"], int(partial["n"]))

    def retract_accumulator(self, acc: tuple, other: tuple) -> tuple:
        return (acc[0] - other[0], acc[1] - other[1])

    def decode_accumulator(self, data: Any) -> tuple:
        return (data[0], data[1])


class _MultisetFn(CombineFn[Counter]):
    """Keeps a multiset of inputs so that any input can be retracted exactly.

    `add_input` and `retract_input` change the accumulator they are given and return it
    (a window's accumulator has one owner: the window; a copy per add made a window's
    inputs cost quadratic time). `merge_accumulators` and `retract_accumulator` make new
    ones."""

    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, acc: Counter, value: Any) -> Counter:
        acc[value] += 1
        return acc

    def accepts(self, input_type: str | None) -> bool:
        """Plain values only: a member of a multiset must be hashable (an array's or a
        struct's Python value is not)."""
        return input_type is None or is_atomic(input_type)

    def merge_accumulators(self, accs: Iterable[Counter]) -> Counter:
        merged: Counter = Counter()
        for a in accs:
            merged.update(a)
        return merged

    def retract_input(self, acc: Counter, value: Any) -> Counter:
        if acc.get(value, 0) <= 0:
            raise ValueError(f"{self.name}: cannot retract {value!r}, it was never added")
        acc[value] -= 1
        if not acc[value]:
            del acc[value]
        return acc

    sql_partial = (("values", "collect_list(value)"),)
    partial_exact_for_floats = True

    def from_partial(self, partial: dict[str, Any]) -> Counter:
        return Counter(_hashable(v) for v in partial["values"])

    def retract_accumulator(self, acc: Counter, other: Counter) -> Counter:
        acc = Counter(acc)
        for value, n in other.items():
            if acc.get(value, 0) < n:
                raise ValueError(f"{self.name}: cannot retract {value!r}, it was never added")
            acc[value] -= n
            if not acc[value]:
                del acc[value]
        return acc

    def encode_accumulator(self, acc: Counter) -> Any:
        return [[value, count] for value, count in acc.items()]

    def decode_accumulator(self, data: Any) -> Counter:
        return Counter({_hashable(value): count for value, count in data})


def _hashable(value: Any) -> Any:
    """JSON gives lists back where tuples went in; multiset members must be hashable."""
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


class MinFn(_MultisetFn):
    name = "min"
    output_merge = "min"
    sql_output = "min(value)"

    def extract_output(self, acc: Counter) -> Any:
        return min(acc) if acc else None

    def output_type(self, input_type: str | None) -> str | None:
        return normalized(input_type) if input_type is not None and self.accepts(input_type) else None

    def empty_output(self) -> Any:
        return None


class MaxFn(_MultisetFn):
    name = "max"
    output_merge = "max"
    sql_output = "max(value)"

    def extract_output(self, acc: Counter) -> Any:
        return max(acc) if acc else None

    output_type = MinFn.output_type
    empty_output = MinFn.empty_output


class ToListFn(_MultisetFn):
    """All inputs, sorted ascending (sorting makes panes comparable across runners)."""

    name = "list"

    def extract_output(self, acc: Counter) -> list:
        return sorted(acc.elements())

    def output_type(self, input_type: str | None) -> str | None:
        if input_type is None or not self.accepts(input_type):
            return None
        return f"array<{normalized(input_type)}>"

    def empty_output(self) -> list:
        return []


class DistinctCountFn(_MultisetFn):
    """Exact number of distinct inputs."""

    name = "distinct_count"

    def extract_output(self, acc: Counter) -> int:
        return len(acc)

    def output_type(self, input_type: str | None) -> str | None:
        return "bigint"  # whatever it counts

    def empty_output(self) -> int:
        return 0

    def output_possible(self, output: Any) -> bool:
        return output >= 0


def value_present(combiner: CombineFn, value: Any) -> bool:
    """The pane gate's rule `value_present`: a pane carries a value, or None where the
    combiner's empty pane is None (a discarding min's on-time pane with nothing new since
    its early pane is empty). A sum's or a list's empty pane is 0 or [], never None."""
    return value is not None or combiner.empty_output() is None


BUILT_IN: dict[str, Callable[[], CombineFn]] = {
    fn.name: fn for fn in (SumFn, CountFn, MinFn, MaxFn, MeanFn, ToListFn, DistinctCountFn)
}


def combiner_named(name: str) -> CombineFn:
    try:
        return BUILT_IN[str(name).strip().lower()]()
    except KeyError:
        raise ValueError(
            f"unknown combiner {name!r} (expected one of: {', '.join(sorted(BUILT_IN))})"
        ) from None
