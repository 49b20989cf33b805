"""The vocabulary combiners declare their types in: Spark SQL type names as text
("bigint", "decimal(10,2)", "array<string>"), so `CombineFn.output_type` and
`CombineFn.accepts` can be asked before any Spark starts (`dataflow check`, type inference)
and the model stays free of Spark. Names are compared after `normalized` (a Delta log's
"long" and "integer" are Spark SQL's "bigint" and "int")."""

from __future__ import annotations

import re

INTEGERS = ("tinyint", "smallint", "int", "bigint")
"""Integral types, narrowest first."""
_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 19}
"""Decimal digits each integral type needs (a decimal(p, 0) with p at least this holds it)."""
FRACTIONAL = ("float", "double")
ATOMIC = (*INTEGERS, *FRACTIONAL, "boolean", "string", "date", "timestamp", "timestamp_ntz", "binary")
"""Types whose values are plain hashable Python values (a multiset combiner's inputs)."""

_ALIASES = {"integer": "int", "long": "bigint", "short": "smallint", "byte": "tinyint", "real": "float",
            "decimal": "decimal(10,0)", "dec": "decimal(10,0)", "numeric": "decimal(10,0)"}
_DECIMAL = re.compile(r"(?:decimal|dec|numeric)\((\d+),(\d+)\)")
_ARRAY = re.compile(r"array<(.+)>")
MAX_PRECISION = 38


def normalized(type_name: str) -> str:
    """`type_name` as Spark SQL writes it: lower case, no blanks, aliases resolved."""
    t = re.sub(r"\s+", "", type_name).lower()
    array = _ARRAY.fullmatch(t)
    if array:
        return f"array<{normalized(array.group(1))}>"
    decimal = _DECIMAL.fullmatch(t)
    if decimal:
        return f"decimal({int(decimal.group(1))},{int(decimal.group(2))})"
    return _ALIASES.get(t, t)


def decimal_of(type_name: str) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type, else None."""
    match = _DECIMAL.fullmatch(normalized(type_name))
    return (int(match.group(1)), int(match.group(2))) if match else None


def element_of(type_name: str) -> str | None:
    """The element type of an array type, else None."""
    match = _ARRAY.fullmatch(normalized(type_name))
    return match.group(1) if match else None


def is_numeric(type_name: str) -> bool:
    """Integral, fractional or decimal: what a sum or a mean adds up (booleans are not numbers)."""
    t = normalized(type_name)
    return t in INTEGERS or t in FRACTIONAL or decimal_of(t) is not None


def is_atomic(type_name: str) -> bool:
    """A type whose values are plain hashable Python values (numbers, text, times, bytes)."""
    t = normalized(type_name)
    return t in ATOMIC or decimal_of(t) is not None


def sum_type(type_name: str) -> str | None:
    """What Spark's `sum` gives over values of `type_name`: bigint for integers, double for
    fractions, decimal(p + 10, s) for decimal(p, s); None for what it cannot sum."""
    t = normalized(type_name)
    if t in INTEGERS:
        return "bigint"
    if t in FRACTIONAL:
        return "double"
    decimal = decimal_of(t)
    if decimal:
        return f"decimal({min(MAX_PRECISION, decimal[0] + 10)},{decimal[1]})"
    return None


def holds(declared: str, actual: str) -> bool:
    """Whether a column of type `declared` keeps every value of type `actual` as it is (a
    wider integer, a decimal with as many digits either side of the point, a double for any
    number); never a number as text or a boolean, nor a fraction as an integer."""
    d, a = normalized(declared), normalized(actual)
    if d == a:
        return True
    if d in INTEGERS:
        return a in INTEGERS and INTEGERS.index(a) <= INTEGERS.index(d)
    if d == "double":
        return is_numeric(a)
    if d == "float":
        return a in ("tinyint", "smallint")
    if decimal_of(d):
        p, s = decimal_of(d)  # type: ignore[misc]
        if a in INTEGERS:
            return p - s >= _DIGITS[a]
        other = decimal_of(a)
        return other is not None and s >= other[1] and p - s >= other[0] - other[1]
    if d == "timestamp":
        return a == "date"
    if element_of(d) and element_of(a):
        return holds(element_of(d), element_of(a))  # type: ignore[arg-type]
    return False


def family(type_name: str) -> str:
    """The kind of value a type holds, whatever its width: "integral", "fractional",
    "decimal", "array", or the type itself (a type of a family of one)."""
    t = normalized(type_name)
    if t in INTEGERS:
        return "integral"
    if t in FRACTIONAL:
        return "fractional"
    if decimal_of(t):
        return "decimal"
    return "array" if element_of(t) else t
