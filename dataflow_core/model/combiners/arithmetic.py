"""Combiners whose accumulator is a few numbers: sum, count, mean."""

from __future__ import annotations

from typing import Any, Iterable

from dataflow_core.model.combiners.base import CombineFn
from dataflow_core.model.value_types import is_numeric, sum_type


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
