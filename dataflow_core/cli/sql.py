"""`dataflow sql "SELECT ..."`: query the warehouse's Delta tables by name.

Every Delta table folder under the warehouse root is queryable by its folder name, so
`SELECT * FROM billing_panes` just works.

Engines (`--engine`):

- `auto` (default): reads go to the fast reader (`dataflow_core.query`: delta-rs and its
  DataFusion SQL engine, no JVM, about a tenth of a second); statements that write (INSERT,
  MERGE, DELETE, UPDATE, CREATE, ...) go to Spark. If the fast reader cannot read a table (a
  Delta reader feature delta-rs lacks) or does not implement the SQL (Spark's `LATERAL VIEW
  explode(...)`, `SORT BY`, Spark-only functions), the query runs on Spark and a one-line note
  says so on stderr.
- `fast`: the fast reader only (an error if it cannot answer).
- `spark`: Spark SQL on a Spark session (`--master`), as every job writes the tables.

Output (`--format`): `table` (aligned text, every cell in full: nothing is cut), `csv`, or
`json` (JSON Lines: one object per row). Timestamps are UTC, written `YYYY-MM-DD HH:MM:SS[.ffffff]`
by both engines; JSON columns stay the JSON text they hold.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import json
import re
import sys
import time
from typing import Any, Sequence

from dataflow_core.errors import DataflowError

DEFAULT_LIMIT = 20
ENGINES = ("auto", "fast", "spark")
FORMATS = ("table", "csv", "json")
def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sql",
        help="run SQL over the warehouse's Delta tables (reads without a JVM)",
        description=(
            "Run one SQL statement over the Delta tables in the warehouse. Each table folder "
            "under the warehouse root is queryable by its name. Reads run on the fast reader "
            "(delta-rs + DataFusion, no JVM); writes, and --engine spark, run on Spark."
        ),
        epilog=(
            'examples:\n'
            '  dataflow sql "SELECT ad_id, value, timing FROM billing_panes ORDER BY emitted_at" -n 10\n'
            '  dataflow sql "SELECT run_id, status, ledger FROM dataflow_runs" --format json\n'
            '  dataflow sql "SELECT count(*) FROM video_events" --engine spark --master spark://host:7077'
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", help="the SQL statement (quote it)")
    parser.add_argument(
        "-n", "--limit", type=int, default=DEFAULT_LIMIT,
        help=f"print at most this many rows (default {DEFAULT_LIMIT}; 0 = all)",
    )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default; every cell in full), csv, or json (one object per line)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="auto (default: reads on the fast reader, writes on Spark), fast, or spark")
    parser.add_argument(
        "--master", help="Spark master for --engine spark, e.g. spark://host:7077 (default $DATAFLOW_SPARK_MASTER or local[*])"
    )
    parser.add_argument(
        "--warehouse", help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)"
    )
    parser.add_argument(
        "--force", action="store_true",
        help="let a write change a pipeline's own tables (its results, pane log, state, ...), which its runs own",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise DataflowError(f"--limit must be 0 or more, got {args.limit}")
    from dataflow_core.query import is_write

    engine = args.engine
    if engine == "auto":
        engine = "spark" if is_write(args.query) else "fast"
    if engine == "fast" and is_write(args.query):
        raise DataflowError("--engine fast only reads; run writes with --engine spark (or auto)")
    if is_write(args.query) and not args.force:
        refuse_pipeline_writes(args.query)
    started = time.perf_counter()
    columns, rows, more, used = read_rows(args.query, engine, args.master, args.warehouse, args.limit,
                                          fallback=args.engine == "auto")
    print_rows(args.format, columns, rows, more, args.limit, f"{used}, {time.perf_counter() - started:.2f} s")
    return 0


def read_rows(sql: str, engine: str, master: str | None, warehouse: str | None, limit: int,
              fallback: bool = True, command: str = "sql") -> tuple[list[str], list[list[Any]], bool, str]:
    """`sql`'s columns, rows (at most `limit`, 0: all), whether there were more, and the engine
    that answered. On `engine` fast, what the fast reader cannot answer (a table feature or
    SQL it does not implement) runs on Spark when `fallback`, with a one-line note on stderr."""
    if engine == "fast":
        from dataflow_core.query import FastReaderUnsupported

        try:
            return (*fast_rows(sql, warehouse, limit), "fast reader")
        except FastReaderUnsupported as exc:
            if not fallback:
                raise
            print(f"dataflow {command}: {exc}; running it on Spark instead", file=sys.stderr)
    return (*spark_rows(sql, master, warehouse, limit), "Spark")


def print_rows(fmt: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], more: bool, limit: int,
               how: str) -> None:
    """The rows on stdout in `fmt`, then the row count and `how` they were read (on stderr
    but for a table, so that CSV and JSON stay machine-readable)."""
    write(sys.stdout, fmt, columns, rows)
    note = (f"(first {limit} rows; use --limit to see more)" if more
            else f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    if fmt == "table":
        print(note)
        print(f"({how})", file=sys.stderr)
    else:  # stdout stays pure CSV / JSON
        print(f"{note} ({how})", file=sys.stderr)


def refuse_pipeline_writes(sql: str) -> None:
    """One line, before any Spark starts, when `sql` writes a table a pipeline's runs own:
    a write beside them is outside the one-writer rule (a micro-batch or backfill locking the
    pipeline would not know of it) and outside the pane history the results must net to.
    Input tables are the user's: writing them is how input arrives."""
    from dataflow_core.pipelines.registry import all_pipelines
    from dataflow_core.query import write_targets
    from dataflow_core.spark.sinks.batch_records import BATCHES_TABLE
    from dataflow_core.spark.sinks.pipeline_lock import pipeline_tables
    from dataflow_core.spark.sinks.runs import RUNS_TABLE, WATERMARKS_TABLE

    owners = {t: f"pipeline {name!r}" for name, spec in all_pipelines().items() for t in pipeline_tables(spec)}
    owners.update({t: "every pipeline (a control table)" for t in (BATCHES_TABLE, RUNS_TABLE, WATERMARKS_TABLE)})
    for table in write_targets(sql):
        owner = owners.get(table.lower())
        if owner:
            raise DataflowError(
                f"table {table} is written by the runs of {owner}; a write beside them breaks its one-writer rule "
                "and its pane history: correct input and run `dataflow backfill`, or `dataflow reset`; add --force "
                "to write it anyway"
            )


def fast_rows(sql: str, warehouse: str | None, limit: int) -> tuple[list[str], list[list[Any]], bool]:
    from dataflow_core.query import query

    answer = query(sql, warehouse, limit=limit or None)
    table = answer.table
    columns = list(table.column_names)
    # column by column: duplicate names (SELECT a.x, b.x) stay apart
    rows = [list(r) for r in zip(*[table.column(i).to_pylist() for i in range(table.num_columns)])]
    more = bool(limit) and len(rows) > limit
    return columns, rows[:limit] if limit else rows, more


def spark_rows(sql: str, master: str | None, warehouse: str | None, limit: int) -> tuple[list[str], list[list[Any]], bool]:
    from dataflow_core.spark.platform.session import get_spark, warehouse_root
    from dataflow_core.spark.platform.tables import list_tables, register_tables

    spark = get_spark(app_name="dataflow-sql", master=master, warehouse=warehouse)
    register_tables(spark)
    try:
        frame = spark.sql(sql)
        rows = frame.limit(limit + 1).collect() if limit else frame.collect()
    except Exception as exc:  # Spark raises several types; all become one line below
        raise DataflowError(_explain(exc, warehouse_root(spark), list_tables(spark))) from exc
    more = bool(limit) and len(rows) > limit
    shown = rows[:limit] if limit else rows
    return list(frame.columns), [[_utc(v) for v in row] for row in shown], more


def _utc(value: Any) -> Any:
    """PySpark returns timestamps as naive datetimes in this process's local time zone."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.astimezone(dt.timezone.utc)
    return value


def _explain(exc: Exception, warehouse: str, tables: Sequence[str]) -> str:
    """One readable line from a Spark error (its first line, minus the SQL excerpt)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    missing = re.search(r"TABLE_OR_VIEW_NOT_FOUND\].*?`?([\w.]+?)`? cannot be found", message)
    if missing:
        name = missing.group(1).split(".")[-1].strip("`")
        known = ", ".join(tables) if tables else "none"
        return f"table '{name}' not found in warehouse {warehouse} (its tables: {known})"
    return f"SQL failed: {message}"


# --- output -------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """One cell as both engines should show it: timestamps as UTC wall time without a zone
    (Spark's session zone is UTC), Decimals kept exact, bytes as hex, containers as JSON."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if hasattr(value, "asDict"):  # a Spark Row (struct)
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return [plain(v) for v in value]
    return value


def text(value: Any) -> str:
    value = plain(value)
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, sort_keys=True)
    return str(value)


def _json_value(value: Any) -> Any:
    value = plain(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return text(value)
    if isinstance(value, decimal.Decimal):
        return float(value) if value == value.to_integral_value() or abs(value) < 1e15 else str(value)
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def write(out: Any, fmt: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if fmt == "table":
        out.write(format_table(columns, rows) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if v is None else text(v) for v in row])
    elif fmt == "json":
        for row in rows:
            out.write(json.dumps({c: _json_value(v) for c, v in zip(columns, row)}, default=str) + "\n")
    else:
        raise DataflowError(f"unknown --format {fmt!r} (use {', '.join(FORMATS)})")


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text grid: header, rule, rows; numbers right-aligned; every cell in full."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [
        max([len(column)] + [len(row[index]) for row in cells]) for index, column in enumerate(columns)
    ]
    numeric = [
        bool(rows) and all(isinstance(row[i], (int, float, decimal.Decimal)) and not isinstance(row[i], bool)
                           or row[i] is None for row in rows)
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
    return text(value).replace("\r", "\\r").replace("\n", "\\n")
