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
            "a live pipeline would have emitted. A run has the pipeline locked from before it reads until it has "
            "finished: a micro-batch or another backfill that finds it locked exits with status 75 (or waits, "
            "with --wait) while the locking run works, and with status 76 and one line naming it when it is "
            "gone or failed; a run killed anywhere resumes when run again with the same arguments, reading the "
            "input version it pinned. --abandon RUN_ID undoes a run that fails on every re-run and releases "
            "the pipeline (a run still working only with --force). To approve a backfill's corrections before they land: --plan-only stores them and "
            "applies nothing, `dataflow plan show RUN_ID` prints them, then --apply RUN_ID applies them once "
            "(refused if the input or an output table changed since) or --reject RUN_ID discards them."
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
                   help="undo the unfinished run RUN_ID that has the pipeline locked (it fails on every re-run): restore "
                        "the pipeline's tables to the versions its lock found, record it failed, release the "
                        "pipeline; refused while the run is still working, unless --force")
    p.add_argument("--force", action="store_true",
                   help="with --abandon: abandon the run even though it is still working (its commits from then on "
                        "are refused, and it stops at its next one)")
    p.add_argument("--plan-only", action="store_true",
                   help="plan the corrections and store them (see `dataflow plan show RUN_ID`), apply nothing, "
                        "release the pipeline")
    p.add_argument("--apply", default=None, metavar="RUN_ID",
                   help="apply the stored plan RUN_ID (once; refused when the input or an output table of the "
                        "pipeline changed since it was planned)")
    p.add_argument("--reject", default=None, metavar="RUN_ID",
                   help="discard the stored plan RUN_ID; no table of the pipeline changes")
    p.add_argument("--decided-by", default=None, metavar="WHO",
                   help="who approves (--apply) or rejects (--reject), recorded in dataflow_runs (default: the OS user)")
    add_wait_option(p)
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.cli.waiting import until_free, wait_seconds
    from dataflow_core.errors import DataflowError
    from dataflow_core.options import parse_time
    from dataflow_core.pipelines import get
    from dataflow_core.pipelines.check import preflight

    decision = _decision(args)
    if decision is None:
        preflight(args.pipeline, args.warehouse)  # unknown names and mistakes fail before Spark starts
        for name, value in (("--start", args.start), ("--end", args.end)):
            if value is None:
                raise DataflowError(f"{name} is required (or --apply, --reject or --abandon RUN_ID)")
            parse_time(value, name)
    else:
        get(args.pipeline)  # acting on a run needs only the pipeline's name
    wait_s = wait_seconds(args.wait)
    from dataflow_core.spark.platform.session import get_spark

    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[backfill {time.monotonic() - started:6.1f}s] {message}", flush=True)

    say(f"starting Spark for pipeline {args.pipeline}")
    spark = get_spark(f"dataflow-backfill-{args.pipeline}", master=args.master, warehouse=args.warehouse)
    if decision is not None:
        return _decide(spark, args, decision, wait_s, say)
    from dataflow_core.spark.jobs.backfill import run_backfill

    result = until_free(lambda: run_backfill(
        spark, args.pipeline, args.start, args.end, replay=args.replay,
        batch_interval=args.batch_interval, now=args.now, progress=say, plan_only=args.plan_only,
    ), wait_s, say)
    return _report(result, args.pipeline if args.plan_only else None)


def _decision(args: argparse.Namespace) -> str | None:
    """Which of --apply, --reject, --abandon was given (None: a backfill of a range); one
    line for a mix the command cannot mean."""
    from dataflow_core.errors import DataflowError

    given = [name for name in ("apply", "reject", "abandon") if getattr(args, name) is not None]
    if len(given) > 1:
        raise DataflowError(f"give one of --{' or --'.join(given)}, not both")
    if given and (args.start or args.end or args.replay or args.plan_only):
        raise DataflowError(f"--{given[0]} RUN_ID acts on that run; give no range, --replay or --plan-only with it")
    if args.decided_by is not None and given[:1] not in (["apply"], ["reject"]):
        raise DataflowError("--decided-by goes with --apply or --reject")
    if args.force and given[:1] != ["abandon"]:
        raise DataflowError("--force goes with --abandon RUN_ID")
    return given[0] if given else None


def _decide(spark, args: argparse.Namespace, decision: str, wait_s: float | None, say) -> int:
    """--apply, --reject or --abandon RUN_ID."""
    from dataflow_core.cli.waiting import until_free

    if decision == "abandon":
        from dataflow_core.spark.sinks.fencing import abandon

        abandon(spark, args.pipeline, args.abandon, say, force=args.force)
        return 0
    from dataflow_core.spark.jobs.plans import apply_plan, decided, reject_plan
    from dataflow_core.spark.sinks.runs import PlanState

    if decision == "reject":
        state = reject_plan(spark, args.pipeline, args.reject, args.decided_by, say)
        if state is not None:
            print(decided(state))
        return 0
    result = until_free(lambda: apply_plan(spark, args.pipeline, args.apply, args.decided_by, say), wait_s, say)
    if isinstance(result, PlanState):  # already decided: nothing applied
        print(decided(result))
        return 0
    return _report(result)


def _report(result, planned: str | None = None) -> int:
    """The ledger and where the run is recorded; `planned`: the pipeline of a plan, and how to go on."""
    from dataflow_core.pipelines import layout
    from dataflow_core.spark.sinks.runs import Ledger

    ledger = Ledger(**{k: v for k, v in result.ledger.items() if k != "balanced"})
    for line in ledger.lines():
        print(line)
    state = "planned (nothing applied)" if planned else "recorded"
    print(f"run {result.run_id} {state} in table {layout.RUNS}; "
          f"{'ledger balances' if result.ledger_ok else 'LEDGER DOES NOT BALANCE'}")
    if planned:
        print(f"see the plan: dataflow plan show {result.run_id}; then dataflow backfill --pipeline "
              f"{planned} --apply {result.run_id} (or --reject {result.run_id})")
    return 0 if result.ledger_ok else 1
