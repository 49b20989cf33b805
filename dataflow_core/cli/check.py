"""`dataflow check`: a pipeline against its input table's schema, read from the table's Delta
log before any Spark starts; one line per mistake, naming the field and the fix. Warnings
(what fits but may not do what was meant, `check_warnings`) are printed to stderr and do
not fail the check."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="check a pipeline against its input table (no Spark): one line per mistake",
        description=(
            "Reads the input table's schema from its Delta log and checks every column the "
            "pipeline names (key, value, where, event_time, ingest_time, event_id, "
            "partition_column), the columns its quality suite checks, each stage's window "
            "reach, whether its combiner takes its input's type and its value type holds the "
            "combiner's output, and whether each stage's output can feed the next; warns of a "
            "stage that never fires live (global windows with a watermark-only trigger). "
            "`backfill` and `microbatch` run the same check before they start Spark."
        ),
    )
    p.add_argument("--pipeline", required=True, help="a registered pipeline (see `dataflow pipelines`)")
    p.add_argument("--warehouse", default=None, help="warehouse root (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.pipelines.check import check_warnings, preflight

    spec = preflight(args.pipeline, args.warehouse)
    types = ", ".join(f"{s.output} {s.value_type}" for s in spec.stages)
    print(f"pipeline {spec.name} fits table {spec.input_table} (value types: {types})")
    for line in check_warnings(spec):
        print(f"dataflow check: warning: pipeline {spec.name}: {line}", file=sys.stderr)
    return 0
