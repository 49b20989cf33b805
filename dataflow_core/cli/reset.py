"""`dataflow reset`: start a pipeline's live runs afresh (live state, seen ids, stream
checkpoint; outputs too with --drop-outputs)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reset",
        help="start a pipeline's live micro-batches afresh (state, seen ids, checkpoint; outputs on request)",
        description=(
            "Deletes the pipeline's live state, seen ids, correction plans and stream checkpoint, and "
            "records the reset in dataflow_batches; the next micro-batch reads the input from the start. "
            "Outputs (pane logs, results) are kept unless --drop-outputs. Refused (exit 75) while a run "
            "has the pipeline locked (exit 76 when that run is gone or failed: the line says how to resume or "
            "abandon it); the reset has the pipeline locked itself while it works."
        ),
    )
    p.add_argument("--pipeline", required=True, help="a registered pipeline (see `dataflow pipelines`)")
    p.add_argument("--drop-outputs", action="store_true", help="delete the stages' pane logs and results too")
    p.add_argument("--abandon-batch", type=int, default=None, metavar="N",
                   help="reset even though micro-batch N has not finished: it fails on every retry and cannot be "
                        "skipped (--skip-batch refused it); make sure no run of the pipeline is going")
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.errors import BUSY_EXIT, PipelineBusy
    from dataflow_core.pipelines import get

    get(args.pipeline)  # an unknown pipeline fails before Spark starts
    from dataflow_core.spark.jobs.reset import reset_pipeline
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark(f"dataflow-reset-{args.pipeline}", master=args.master, warehouse=args.warehouse)
    try:
        reset_pipeline(spark, args.pipeline, drop_outputs=args.drop_outputs,
                       progress=lambda m: print(f"dataflow reset: {m}", flush=True), abandon=args.abandon_batch)
    except PipelineBusy as exc:
        print(f"dataflow reset: {exc}", flush=True)
        return BUSY_EXIT
    return 0
