"""Combiners that keep every input (a multiset), so that any input can be retracted
exactly: min, max, the list of inputs, the number of distinct inputs."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from dataflow_core.model.combiners.base import CombineFn
from dataflow_core.model.value_types import is_atomic, normalized


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
