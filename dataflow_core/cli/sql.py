"""`dataflow sql "SELECT ..."`: query the warehouse's Delta tables by name.

Every Delta table folder under the warehouse root is registered under its folder
name first, so `SELECT * FROM plays` just works.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Sequence

from dataflow_core.errors import DataflowError

DEFAULT_LIMIT = 20
_MAX_CELL = 60  # wider values are cut so a row still fits a terminal


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sql",
        help="run Spark SQL over the warehouse's Delta tables",
        description=(
            "Run one Spark SQL statement over the Delta tables in the warehouse. "
            "Each table folder under the warehouse root is queryable by its name."
        ),
        epilog=(
            'example: dataflow sql "SELECT user_id, count(*) FROM plays GROUP BY user_id" -n 10'
        ),
    )
    parser.add_argument("query", help="the SQL statement (quote it)")
    parser.add_argument(
        "-n", "--limit", type=int, default=DEFAULT_LIMIT,
        help=f"print at most this many rows (default {DEFAULT_LIMIT}; 0 = all)",
    )  # fmt: skip
    parser.add_argument(
        "--master", help="Spark master, e.g. spark://host:7077 (default $DATAFLOW_SPARK_MASTER or local[*])"
    )
    parser.add_argument(
        "--warehouse", help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise DataflowError(f"--limit must be 0 or more, got {args.limit}")
    from dataflow_core.spark.session import get_spark, warehouse_root
    from dataflow_core.spark.tables import list_tables, register_tables

    spark = get_spark(app_name="dataflow-sql", master=args.master, warehouse=args.warehouse)
    register_tables(spark)
    try:
        frame = spark.sql(args.query)
        rows = frame.limit(args.limit + 1).collect() if args.limit else frame.collect()
    except Exception as exc:  # Spark raises several types; all become one line below
        raise DataflowError(_explain(exc, warehouse_root(spark), list_tables(spark))) from exc
    shown = rows[: args.limit] if args.limit else rows
    print(format_table(frame.columns, [list(row) for row in shown]))
    if args.limit and len(rows) > args.limit:
        print(f"(first {args.limit} rows; use --limit to see more)")
    else:
        print(f"({len(shown)} row{'s' if len(shown) != 1 else ''})")
    return 0


def _explain(exc: Exception, warehouse: str, tables: Sequence[str]) -> str:
    """One readable line from a Spark error (its first line, minus the SQL excerpt)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    missing = re.search(r"TABLE_OR_VIEW_NOT_FOUND\].*?`?([\w.]+?)`? cannot be found", message)
    if missing:
        name = missing.group(1).split(".")[-1].strip("`")
        known = ", ".join(tables) if tables else "none"
        return f"table '{name}' not found in warehouse {warehouse} (its tables: {known})"
    return f"SQL failed: {message}"


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text grid: header, rule, rows; numbers right-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [
        max([len(column)] + [len(row[index]) for row in cells]) for index, column in enumerate(columns)
    ]
    numeric = [
        bool(rows) and all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        return " | ".join(
            value.rjust(width) if right else value.ljust(width)
            for value, width, right in zip(values, widths, numeric)
        ).rstrip()

    rule = "-+-".join("-" * width for width in widths)
    return "\n".join([line(list(columns)), rule] + [line(row) for row in cells])


def _cell(value: Any) -> str:
    text = "NULL" if value is None else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 3] + "..."
