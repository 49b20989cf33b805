"""`dataflow maintain`: the maintenance DAG's task from the command line (forget expired seen
ids, OPTIMIZE, VACUUM), locking the pipeline while it works; the command that resumes a
maintenance run that was killed while it locked the pipeline."""

from __future__ import annotations

import argparse

from dataflow_core.cli.waiting import add_wait_option, wait_seconds
from dataflow_core.errors import BUSY_EXIT, STUCK_EXIT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "maintain",
        help="OPTIMIZE and VACUUM a pipeline's tables and forget expired seen ids, locking the pipeline",
        description=(
            "Deletes the event ids past the micro-batches' duplicate-detection horizon, then OPTIMIZEs and "
            "VACUUMs each of the pipeline's tables (and dataflow_batches), locking the pipeline as a reset "
            "does: nothing else writes its tables meanwhile. VACUUM keeps $DATAFLOW_VACUUM_RETENTION_HOURS "
            "(168), raised to the stages' allowed lateness plus a day, and longer where an --abandon could "
            f"restore an older version. Exits {BUSY_EXIT} while another run works locking the pipeline "
            f"(--wait waits for it), {STUCK_EXIT} when that run is gone or failed (the line names the "
            "commands that resume and abandon it). Run again, it resumes a maintenance that was killed."
        ),
    )
    p.add_argument("--pipeline", required=True, help="a registered pipeline (see `dataflow pipelines`)")
    add_wait_option(p)
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.pipelines import get

    get(args.pipeline)  # an unknown pipeline fails before Spark starts
    wait_s = wait_seconds(args.wait)
    from dataflow_core.airflow.maintenance import maintain_in
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark(f"dataflow-maintain-{args.pipeline}", master=args.master, warehouse=args.warehouse)
    maintain_in(spark, args.pipeline, lambda m: print(f"dataflow maintain: {m}", flush=True), wait_s)
    return 0
