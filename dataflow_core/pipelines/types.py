"""A stage's `value_type` / `input_type` as given by a user: a Python type (`int`, `float`,
`Decimal`, `str`, `bool`) or a Spark SQL type name, turned into the Spark SQL type name the
model's combiners declare their types in (`model.value_types`). What a combiner gives for
an input type is the combiner's to say (`CombineFn.output_type`), not this module's."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from dataflow_core.errors import DataflowError
from dataflow_core.model.value_types import normalized

PYTHON_TYPES = {int: "bigint", float: "double", Decimal: "decimal(38,18)", str: "string", bool: "boolean"}
"""A Python type as the Spark SQL type its values are stored as."""

_SPARK = re.compile(
    r"(tinyint|smallint|int|integer|bigint|long|float|double|string|boolean|date|timestamp|timestamp_ntz|binary"
    r"|decimal\(\s*\d+\s*,\s*\d+\s*\)|decimal|array<.+>|map<.+>|struct<.+>)", re.IGNORECASE)


def declared_type(value_type: Any, what: str) -> str | None:
    """`value_type` as a Spark SQL type name (None stays None: to be inferred)."""
    if value_type is None or isinstance(value_type, str) and _SPARK.fullmatch(value_type.strip()):
        return None if value_type is None else normalized(value_type)
    if isinstance(value_type, type) and value_type in PYTHON_TYPES:
        return PYTHON_TYPES[value_type]
    names = ", ".join(t.__name__ for t in PYTHON_TYPES)
    raise DataflowError(f"{what}: {value_type!r} is not a value type (use one of {names}, or a Spark SQL type name)")
