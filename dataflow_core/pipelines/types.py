"""Value types in the model's terms: a stage's `value_type` as a Python type (`int`, `float`,
`Decimal`, `str`, `bool`) or a Spark SQL type name, and what a combiner's output type is
for an input type, so a pipeline may leave types out (`infer_output_type`). Spark is not
imported: types are checked and inferred before any Spark starts."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from dataflow_core.errors import DataflowError
from dataflow_core.model.combiners import CombineFn, CountFn, DistinctCountFn, MaxFn, MeanFn, MinFn, SumFn

PYTHON_TYPES = {int: "bigint", float: "double", Decimal: "decimal(38,18)", str: "string", bool: "boolean"}
"""A Python type as the Spark SQL type its values are stored as."""

_SPARK = re.compile(
    r"(tinyint|smallint|int|integer|bigint|long|float|double|string|boolean|date|timestamp|timestamp_ntz|binary"
    r"|decimal\(\s*\d+\s*,\s*\d+\s*\)|decimal|array<.+>|map<.+>|struct<.+>)", re.IGNORECASE)
_INTEGERS = ("tinyint", "smallint", "int", "integer", "bigint", "long")
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def declared_type(value_type: Any, what: str) -> str | None:
    """`value_type` as a Spark SQL type name (None stays None: to be inferred)."""
    if value_type is None or isinstance(value_type, str) and _SPARK.fullmatch(value_type.strip()):
        return None if value_type is None else value_type.strip().lower()
    if isinstance(value_type, type) and value_type in PYTHON_TYPES:
        return PYTHON_TYPES[value_type]
    names = ", ".join(t.__name__ for t in PYTHON_TYPES)
    raise DataflowError(f"{what}: {value_type!r} is not a value type (use one of {names}, or a Spark SQL type name)")


def fixed_output_type(combiner: CombineFn) -> str | None:
    """The output type of a combiner whatever its input (a count's), else None."""
    return "bigint" if isinstance(combiner, (CountFn, DistinctCountFn)) else None


def infer_output_type(combiner: CombineFn, input_type: str) -> str | None:
    """The type of `combiner`'s output over values of Spark SQL type `input_type`, as Spark
    aggregates it (a sum of decimal(p, s) is decimal(p + 10, s)); None when not known."""
    fixed = fixed_output_type(combiner)
    if fixed is not None:
        return fixed
    t = input_type.strip().lower()
    if isinstance(combiner, (MinFn, MaxFn)):
        return t
    if isinstance(combiner, MeanFn):
        return "double"
    if isinstance(combiner, SumFn):
        if t in _INTEGERS:
            return "bigint"
        if t in ("float", "double"):
            return "double"
        match = _DECIMAL.fullmatch(t)
        if match:
            return f"decimal({min(38, int(match.group(1)) + 10)},{match.group(2)})"
    return None


def is_numeric(spark_type: str) -> bool:
    t = spark_type.strip().lower()
    return t in _INTEGERS or t in ("float", "double") or t.startswith("decimal")
