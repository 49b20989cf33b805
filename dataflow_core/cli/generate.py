"""`dataflow generate`: write the sample video-event table (docs/data.md)."""

from __future__ import annotations

import argparse
import time

from dataflow_core.sample.config import DEFAULT_START, SampleConfig, parse_start


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = SampleConfig(rows=1)
    p = subparsers.add_parser(
        "generate",
        help="write a sample table of video views with late, duplicate and malformed rows",
        description=(
            "Generate the sample input: a video platform's content and ad views with realistic "
            "disorder (late by minutes, late by hours for offline mobile viewers, duplicate "
            "deliveries, malformed rows). Same --seed and --rows give identical rows. Written to "
            "a Delta table partitioned by event_date."
        ),
    )
    p.add_argument("--rows", type=int, required=True, help="rows to write (duplicates included)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="random seed (default %(default)s)")
    p.add_argument("--table", default="video_events", help="table name (default %(default)s)")
    p.add_argument("--start", default=DEFAULT_START,
                   help="first event time, ISO-8601, UTC if no offset (default %(default)s)")
    p.add_argument("--span-hours", type=float, default=defaults.span_hours,
                   help="event times spread over this many hours (default %(default)s)")
    for name, what in (
        ("late_minutes_share", "share of rows ingested 1-30 minutes late"),
        ("late_hours_share", "share ingested 1-12 hours late (mobile devices only)"),
        ("duplicate_share", "share of re-deliveries of an earlier event"),
        ("malformed_share", "share of rows with one defect the quality rules catch"),
        ("ad_share", "share of views that are ad impressions"),
    ):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float,
                       default=getattr(defaults, name), help=f"{what} (default %(default)s)")
    p.add_argument("--mode", choices=("overwrite", "append"), default="overwrite",
                   help="replace the table or add to it (default %(default)s)")
    p.add_argument("--master", default=None,
                   help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None,
                   help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Check every parameter before paying for a Spark start.
    config = SampleConfig(
        rows=args.rows,
        seed=args.seed,
        start=parse_start(args.start),
        span_hours=args.span_hours,
        late_minutes_share=args.late_minutes_share,
        late_hours_share=args.late_hours_share,
        duplicate_share=args.duplicate_share,
        malformed_share=args.malformed_share,
        ad_share=args.ad_share,
    )
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.platform.session import get_spark, resolve_master, resolve_warehouse
    from dataflow_core.spark.platform.tables import check_table_name

    check_table_name(args.table)

    def progress(message: str) -> None:
        print(f"[generate] {message}", flush=True)

    started = time.monotonic()
    progress(f"starting Spark ({resolve_master(args.master)}, warehouse "
             f"{resolve_warehouse(args.warehouse)})")
    spark = get_spark("dataflow-generate", master=args.master, warehouse=args.warehouse)
    summary = write_sample(spark, config, table=args.table, mode=args.mode, progress=progress)
    for line in summary.lines():
        print(line)
    print(f"done in {time.monotonic() - started:.1f} s")
    return 0
