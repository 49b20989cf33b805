"""`dataflow microbatch`: the live half. One run takes every input row committed since the
last batch (exactly once, crash-safe, fenced); `--loop EVERY` keeps going until stopped;
`--skip-batch N` first gets the pipeline past a batch that fails on every retry."""

from __future__ import annotations

import argparse
import re
import threading
import time

from dataflow_core.cli.waiting import add_wait_option, until_free, wait_seconds
from dataflow_core.errors import BUSY_EXIT, STUCK_EXIT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "microbatch",
        help="run a pipeline's next micro-batch(es) over newly committed input (exactly once)",
        description=(
            "Reads what was committed to the pipeline's input table since the last batch "
            "(Structured Streaming's Delta source, available-now trigger), fires due timers, "
            "delivers the batch, moves the watermark and writes panes, results and state through "
            "Delta MERGE, each write idempotent per batch. A run that finds another run of the "
            f"pipeline locking it exits with status {BUSY_EXIT} while that run works, and with status "
            f"{STUCK_EXIT} (a --loop too) when it is gone or failed, the line naming the commands that resume "
            "and abandon it. A --loop holds the pipeline's loop lock while it runs: another loop, or a reset, "
            f"exits with status {BUSY_EXIT} naming it; a loop that lost it (taken over after it sent no heartbeat "
            "for $DATAFLOW_LOOP_LOCK_TIMEOUT seconds, 30 by default, or deleted) stops with status 2 before its "
            "next batch."
        ),
    )
    p.add_argument("--pipeline", required=True, help="a registered pipeline (see `dataflow pipelines`)")
    p.add_argument("--now", default=None, help="processing time of the batch (default: the clock)")
    p.add_argument("--loop", default=None, metavar="EVERY",
                   help="keep one streaming query running, a batch every EVERY (e.g. 1m), until stopped (Ctrl-C)")
    p.add_argument("--skip-batch", type=int, default=None, metavar="N",
                   help="the latest batch N failed and fails again on every retry: quarantine its rows with "
                        "--reason instead of processing them, then run as usual")
    p.add_argument("--reason", default="", help="why batch N is skipped (kept with its quarantined rows)")
    p.add_argument("--starting-version", type=int, default=None, metavar="V",
                   help="going live (no stream checkpoint yet): read only the input's commits from version V on, "
                        "in commit order, instead of its whole snapshot")
    p.add_argument("--max-bytes-per-batch", default=None, metavar="SIZE",
                   help="going live: the most input one batch reads (Delta's maxBytesPerTrigger, e.g. 256m, the "
                        "default), oldest files first; later runs go on from the checkpoint")
    add_wait_option(p)
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def _checked_options(args: argparse.Namespace) -> float | None:
    """The options checked before Spark starts, each mistake one line naming it; returns
    `--loop`'s interval in seconds (None without it)."""
    from dataflow_core.errors import DataflowError
    from dataflow_core.options import parse_interval

    every = None
    if args.loop:
        every = parse_interval(args.loop, "--loop") / 1000
        if args.now:
            raise DataflowError("--loop runs on the clock; leave out --now")
    if args.starting_version is not None and args.starting_version < 0:
        raise DataflowError(f"--starting-version: {args.starting_version} is no table version; give 0 or more")
    if args.max_bytes_per_batch and not re.fullmatch(r"\d+[kmgt]?b?", args.max_bytes_per_batch.lower()):
        raise DataflowError(f"--max-bytes-per-batch: {args.max_bytes_per_batch!r} is no size; give e.g. 256m or 1g")
    if args.reason and args.skip_batch is None:
        raise DataflowError("--reason says why a batch is skipped; give the batch with --skip-batch N")
    return every


def run(args: argparse.Namespace) -> int:
    from dataflow_core.pipelines.check import preflight

    every = _checked_options(args)
    preflight(args.pipeline, args.warehouse)  # unknown names and mistakes fail before Spark starts
    from dataflow_core.errors import PipelineBusy
    from dataflow_core.spark.jobs.microbatch import run_loop, run_microbatch
    from dataflow_core.spark.sinks.runs import Ledger, RunResult
    from dataflow_core.spark.platform.session import get_spark

    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[microbatch {time.monotonic() - started:6.1f}s] {message}", flush=True)

    def report(result: RunResult) -> None:
        ledger = Ledger(**{k: v for k, v in result.ledger.items() if k != "balanced"})
        for line in ledger.lines():
            print(line, flush=True)
        if not result.ledger_ok:
            unbalanced.append(result.run_id)
            stop.set()

    from dataflow_core.spark.input.going_live import FIRST_BATCH_BYTES, FirstRead

    first_read = FirstRead(args.starting_version, args.max_bytes_per_batch or FIRST_BATCH_BYTES)
    spark = get_spark(f"dataflow-microbatch-{args.pipeline}", master=args.master, warehouse=args.warehouse)
    if args.skip_batch is not None:
        from dataflow_core.spark.jobs.skip import request_skip

        say(request_skip(spark, args.pipeline, args.skip_batch, args.reason))
    unbalanced: list[str] = []
    stop = threading.Event()
    if every is not None:
        say(f"one streaming query, a batch every {args.loop} (a tick when none brings input and something is due); "
            "Ctrl-C stops it after the batch under way")
        try:
            run_loop(spark, args.pipeline, every, progress=say, on_result=report, stop=stop, first_read=first_read)
        except KeyboardInterrupt:
            say("stopped")
        return 1 if unbalanced else 0
    try:
        result = until_free(lambda: run_microbatch(spark, args.pipeline, now=args.now, progress=say,
                                                   first_read=first_read),
                            wait_seconds(args.wait), say)
    except PipelineBusy as exc:
        print(f"dataflow microbatch: {exc}", flush=True)
        return BUSY_EXIT
    report(result)
    _say_completeness(args, say, result.now)
    return 1 if unbalanced else 0


def _say_completeness(args, say, now: int) -> None:
    """After one run: when its results are complete (a processing-time timer it left pending
    fires only in a later batch, which nothing runs for a single `dataflow microbatch`)."""
    from dataflow_core.airflow.live_tasks import completeness, next_timer
    from dataflow_core.errors import DataflowError

    try:
        say(completeness(next_timer(args.pipeline, args.warehouse), now))
    except DataflowError as exc:  # the batch is done; not knowing its next timer must not fail it
        say(f"cannot tell when the results are complete: {exc}")
