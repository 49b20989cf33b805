"""`dataflow diagram`: the paper's pane diagram of a scenario or of a real run."""

from __future__ import annotations

import argparse
import sys

from dataflow_core.errors import DataflowError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diagram",
        help="draw the panes of a scenario or of a real run (event time x processing time)",
        description=(
            "Draws the Dataflow paper's diagram: event time across, processing time up; each "
            "element a dot where it happened and when it arrived, the watermark as a line, and "
            "each pane a band over its window up to the moment it was emitted, labelled with its "
            "value (EARLY / ON_TIME / LATE coloured apart, retractions hatched). One panel per key. "
            "The output format is the file's suffix: .svg or .png."
        ),
        epilog=(
            "examples:\n"
            "  dataflow diagram docs/figures/scenarios/fig13_fixed_streaming_partial.yaml -o fig13.svg\n"
            "  dataflow diagram --pipeline billing --key ad-7 --from 2024-05-01T00:00:00 \\\n"
            "      --to 2024-05-01T01:00:00 -o ad-7.png\n"
            "  dataflow diagram --pipeline ad_sessions --key user_id=user-3,ad_id=ad-7 \\\n"
            "      --from 2024-05-01T00:00:00 --to 2024-05-01T01:00:00 -o sessions.svg"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", nargs="?", help="a scenario YAML file (FORMAT.md), replayed on the reference runner")
    p.add_argument("-o", "--output", help="the file to write: NAME.svg or NAME.png")
    p.add_argument(
        "--key", action="append", default=None,
        help="only this key (repeat for several; with --pipeline exactly one, col=value,... for several key columns)",
    )
    run = p.add_argument_group("from the tables of a real run")
    run.add_argument("--pipeline", help="a registered pipeline's name")
    run.add_argument("--stage", help="which stage (name, output table or number; default the first)")
    run.add_argument("--from", dest="event_from", help="start of the event-time range (ISO-8601 or HH:MM:SS)")
    run.add_argument("--to", dest="event_to", help="end of the event-time range (exclusive)")
    run.add_argument("--run-id", help="only this run's panes and watermark")
    run.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    run.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from dataflow_core.diagram.draw import output_format, save

    if not args.output:
        raise DataflowError("missing -o OUTPUT (a file name ending in .svg or .png)")
    output_format(args.output)  # a bad suffix fails before any work
    if args.pipeline and args.scenario:
        raise DataflowError("give either a scenario file or --pipeline, not both")
    if args.pipeline:
        history, event_range = _from_tables(args)
    elif args.scenario:
        history, event_range = _from_scenario(args), None
    else:
        raise DataflowError("give a scenario file (dataflow diagram SCENARIO.yaml -o out.svg) or --pipeline NAME")
    path = save(history, args.output, event_range=event_range)
    print(
        f"diagram: {path} ({len(history.keys())} key(s), {len(history.elements)} elements, "
        f"{sum(not p.retraction for p in history.panes)} panes, {sum(p.retraction for p in history.panes)} retractions)",
        file=sys.stderr,
    )
    return 0


def _from_scenario(args: argparse.Namespace):
    from dataflow_core.diagram.history import history_from_scenario
    from dataflow_core.scenario import load_scenario

    for option in ("stage", "event_from", "event_to", "run_id"):
        if getattr(args, option):
            flag = "--" + {"event_from": "from", "event_to": "to"}.get(option, option).replace("_", "-")
            raise DataflowError(f"{flag} goes with --pipeline, not with a scenario file")
    history = history_from_scenario(load_scenario(args.scenario))
    if args.key:
        history = history.for_keys(args.key)
    return history


def _from_tables(args: argparse.Namespace):
    from dataflow_core.model.time import parse_instant

    if not args.key or len(args.key) != 1:
        raise DataflowError("--pipeline needs exactly one --key")
    if not args.event_from or not args.event_to:
        raise DataflowError("--pipeline needs an event-time range: --from T --to T")
    try:
        lo, hi = parse_instant(args.event_from), parse_instant(args.event_to)
    except ValueError as exc:
        raise DataflowError(f"--from/--to: {exc}") from None
    if hi <= lo:
        raise DataflowError(f"empty event-time range: --to {args.event_to} is not after --from {args.event_from}")
    spec = _pipeline_spec(args.pipeline)

    from dataflow_core.diagram.tables import stage_of, parse_key, read_history

    _, stage = stage_of(spec, args.stage)  # a bad --stage or --key fails before Spark starts
    parse_key(args.key[0], getattr(stage, "key_columns", ()))
    from dataflow_core.spark.platform.session import get_spark

    kwargs = {k: v for k, v in (("master", args.master), ("warehouse", args.warehouse)) if v}
    spark = get_spark(app_name="dataflow-diagram", **kwargs)
    history = read_history(spark, spec, args.pipeline, args.key[0], lo, hi, stage=args.stage, run_id=args.run_id)
    return history, (lo, hi)


def _pipeline_spec(name: str):
    """The registered pipeline, or a one-line error while the registry does not exist yet."""
    try:
        from dataflow_core.pipelines import registry
    except ImportError:
        raise DataflowError(
            "--pipeline needs the pipeline registry (dataflow_core.pipelines.registry), which this "
            "installation does not have yet; draw a scenario file instead"
        ) from None
    try:
        return registry.get(name)
    except DataflowError:
        raise
    except ImportError as exc:
        raise DataflowError(f"pipeline {name!r}: the pipeline registry cannot load its pipelines: {exc}") from None
    except (KeyError, LookupError, ValueError) as exc:
        raise DataflowError(f"unknown pipeline {name!r}: {exc}") from None
