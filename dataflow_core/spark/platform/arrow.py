"""Spark schemas as Arrow schemas, for Python that hands rows back to Spark in Arrow batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def arrow_schema_of(schema: str) -> "pa.Schema":
    """The Arrow schema of a Spark DDL schema string (`"a string, n bigint"`); timestamps
    are instants in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_schema(_parse_datatype_string(schema), timezone="UTC")
