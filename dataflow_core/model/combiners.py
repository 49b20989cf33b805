"""What is computed: associative combiners, optionally retractable (the paper's uncombine).

Accumulators are plain Python values (numbers, tuples, dicts, lists) so that runners can
persist them between micro-batches.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import Any, Callable, Generic, Iterable, TypeVar

Acc = TypeVar("Acc")


class CombineFn(ABC, Generic[Acc]):
    """create / add / merge / extract, and `retract_input` when the combiner can undo an add."""

    name: str = "combine"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__  # messages name the user's combiner class

    @abstractmethod
    def create_accumulator(self) -> Acc: ...

    @abstractmethod
    def add_input(self, acc: Acc, value: Any) -> Acc: ...

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

    def add_inputs(self, acc: Acc, values: Iterable[Any]) -> Acc:
        for v in values:
            acc = self.add_input(acc, v)
        return acc

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class SumFn(CombineFn[Any]):
    name = "sum"

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


class CountFn(CombineFn[int]):
    name = "count"

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
        return acc[0] / acc[1] if acc[1] else None

    def retract_input(self, acc: tuple, value: Any) -> tuple:
        return (acc[0] - value, acc[1] - 1)


class _MultisetFn(CombineFn[Counter]):
    """Keeps a multiset of inputs so that any input can be retracted exactly."""

    def create_accumulator(self) -> Counter:
        return Counter()

    def add_input(self, acc: Counter, value: Any) -> Counter:
        acc = Counter(acc)
        acc[value] += 1
        return acc

    def merge_accumulators(self, accs: Iterable[Counter]) -> Counter:
        merged: Counter = Counter()
        for a in accs:
            merged.update(a)
        return merged

    def retract_input(self, acc: Counter, value: Any) -> Counter:
        if acc.get(value, 0) <= 0:
            raise ValueError(f"{self.name}: cannot retract {value!r}, it was never added")
        acc = Counter(acc)
        acc[value] -= 1
        if not acc[value]:
            del acc[value]
        return acc


class MinFn(_MultisetFn):
    name = "min"

    def extract_output(self, acc: Counter) -> Any:
        return min(acc) if acc else None


class MaxFn(_MultisetFn):
    name = "max"

    def extract_output(self, acc: Counter) -> Any:
        return max(acc) if acc else None


class ToListFn(_MultisetFn):
    """All inputs, sorted ascending (sorting makes panes comparable across runners)."""

    name = "list"

    def extract_output(self, acc: Counter) -> list:
        return sorted(acc.elements())


class DistinctCountFn(_MultisetFn):
    """Exact number of distinct inputs."""

    name = "distinct_count"

    def extract_output(self, acc: Counter) -> int:
        return len(acc)


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
