"""`dataflow backfill`: a pipeline over an event-time range, as a batch or an arrival-order
replay; prints progress, the ledger and where the output is."""

from __future__ import annotations

import argparse
import time

from dataflow_core.cli.waiting import add_wait_option


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "backfill",
        help="compute (or replay) a pipeline over an event-time range into its Delta tables",
        description=(
            "Batch mode computes every window whose start falls in [--start, --end) from the "
            "input as it stands (perfect watermark) and corrects what earlier runs wrote "
            "(retractions in retracting mode). --replay instead processes the range's input in "
            "ingest-time order as micro-batches of --batch-interval and writes the pane history "
            "a live pipeline would have emitted. A run holds the pipeline from before it reads until it has "
            "finished: a micro-batch or another backfill that finds it held exits with status 75 (or waits, "
            "with --wait); a run killed anywhere resumes when run again with the same arguments, reading the "
            "input version it pinned. --abandon RUN_ID undoes a run that fails on every re-run and releases "
            "the pipeline."
        ),
    )
    p.add_argument("--pipeline", required=True, help="a registered pipeline (see `dataflow pipelines`)")
    p.add_argument("--start", help="range start: ISO date or instant (UTC), e.g. 2024-05-01")
    p.add_argument("--end", help="range end (exclusive), e.g. 2024-05-02")
    p.add_argument("--replay", action="store_true", help="arrival-order replay instead of batch")
    p.add_argument("--batch-interval", default="1m", help="replay micro-batch length (default 1m)")
    p.add_argument("--now", default=None, help="processing time of a batch backfill (default: the clock; never "
                   "before the pipeline's last live batch)")
    p.add_argument("--abandon", default=None, metavar="RUN_ID",
                   help="undo the unfinished run RUN_ID that holds the pipeline (it fails on every re-run): restore "
                        "the pipeline's tables to the versions its hold found, record it failed, release the "
                        "pipeline; make sure no process of it is still going")
    add_wait_option(p)
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.cli.waiting import until_free, wait_seconds
    from dataflow_core.errors import DataflowError
    from dataflow_core.pipelines import get
    from dataflow_core.options import parse_time
    from dataflow_core.pipelines.check import preflight

    if args.abandon is None:
        preflight(args.pipeline, args.warehouse)  # unknown names and mistakes fail before Spark starts
    else:
        get(args.pipeline)  # undoing a run needs only its name
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.sinks.runs import Ledger

    if args.abandon is None:
        for name, value in (("--start", args.start), ("--end", args.end)):
            if value is None:
                raise DataflowError(f"{name} is required (or --abandon RUN_ID)")
            parse_time(value, name)
    elif args.start or args.end or args.replay:
        raise DataflowError("--abandon RUN_ID undoes that run; give no range with it")
    wait_s = wait_seconds(args.wait)
    from dataflow_core.spark.platform.session import get_spark

    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[backfill {time.monotonic() - started:6.1f}s] {message}", flush=True)

    say(f"starting Spark for pipeline {args.pipeline}")
    spark = get_spark(f"dataflow-backfill-{args.pipeline}", master=args.master, warehouse=args.warehouse)
    if args.abandon is not None:
        from dataflow_core.spark.sinks.holds import abandon

        abandon(spark, args.pipeline, args.abandon, say)
        return 0
    result = until_free(lambda: run_backfill(
        spark, args.pipeline, args.start, args.end, replay=args.replay,
        batch_interval=args.batch_interval, now=args.now, progress=say,
    ), wait_s, say)
    ledger = Ledger(**{k: v for k, v in result.ledger.items() if k != "balanced"})
    for line in ledger.lines():
        print(line)
    print(f"run {result.run_id} recorded in table dataflow_runs; "
          f"{'ledger balances' if result.ledger_ok else 'LEDGER DOES NOT BALANCE'}")
    return 0 if result.ledger_ok else 1
