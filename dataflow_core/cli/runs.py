"""`dataflow runs`: each run's current status, one line per run.

`dataflow_runs` is an audit trail with a row per status a run went through (started, then
finished or failed, a plan's planned and its decision), so a plain `SELECT` shows each run two
to four times. This prints each once, with its current status (`sinks.runs.current_runs_sql`,
which any SQL reader can run), read through the fast reader (no JVM; Spark when it cannot).
"""

from __future__ import annotations

import argparse
import time

from dataflow_core.cli.sql import DEFAULT_LIMIT, FORMATS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "runs",
        help="each run's current status (dataflow_runs has a row per status), newest first",
        description="List the runs recorded in dataflow_runs, one row per run with its current status: finished, "
                    "applied or rejected once it reached one, else its latest (started, failed, planned).",
    )
    p.add_argument("--pipeline", default=None, help="only this pipeline's runs")
    p.add_argument("--status", default=None,
                   help="only runs whose current status is this (started, failed, finished, planned, applied, rejected)")
    p.add_argument("-n", "--limit", type=int, default=DEFAULT_LIMIT, help=f"at most this many runs (default "
                   f"{DEFAULT_LIMIT}; 0 = all)")
    p.add_argument("--format", choices=FORMATS, default="table", help="table (default), csv, or json (one object per line)")
    p.add_argument("--master", default=None, help="Spark master, used only if the fast reader cannot read the table")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default "
                   "$DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.cli.sql import print_rows, read_rows
    from dataflow_core.errors import DataflowError
    from dataflow_core.spark.sinks.runs import current_runs_sql

    if args.limit < 0:
        raise DataflowError(f"--limit must be 0 or more, got {args.limit}")
    started = time.perf_counter()
    columns, rows, more, used = read_rows(current_runs_sql(args.pipeline, args.status), "fast", args.master,
                                          args.warehouse, args.limit, command="runs")
    print_rows(args.format, columns, rows, more, args.limit, f"{used}, {time.perf_counter() - started:.2f} s")
    return 0
