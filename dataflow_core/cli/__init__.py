"""The `dataflow` command line.

Each subcommand lives in its own module exposing `register(subparsers)`; the module
sets `func` on its parser. Errors become one readable line unless `--verbose`.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
from typing import NoReturn, Sequence

from dataflow_core.errors import (
    BUSY_EXIT, STUCK_EXIT, ConcurrentCommit, DataflowError, PipelineBusy, PipelineStuck, first_line, is_concurrent,
)

# Subcommand modules, in the order `--help` lists them.
SUBCOMMANDS = ("pipelines", "check", "backfill", "plan", "runs", "microbatch", "reset", "maintain", "replay", "diagram",
               "generate", "sql")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dataflow",
        description=(
            "The Dataflow model (what / where / when / how) on Spark, Delta Lake, "
            "Airflow and Great Expectations."
        ),
        epilog=(
            "a first session:\n"
            "  dataflow generate --rows 10000        sample events -> ./warehouse/video_events\n"
            '  dataflow sql "SELECT device, count(*) FROM video_events GROUP BY device"\n'
            "  dataflow replay SCENARIO.yaml         a scripted history through the reference runner\n"
            "\n"
            "Spark commands (generate, sql) take --master (default $DATAFLOW_SPARK_MASTER or\n"
            "local[*]) and --warehouse (default $DATAFLOW_WAREHOUSE or ./warehouse).\n"
            "Run `dataflow COMMAND --help` for a command's options."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="show full tracebacks on errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"dataflow_core.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"dataflow_core.cli.{name}":
                continue  # subcommand not built yet
            _register_unavailable(sub, name, exc.name or "a dependency")
            continue
        module.register(sub)
    return parser


def _register_unavailable(sub: argparse._SubParsersAction, name: str, missing: str) -> None:
    """Keeps the other commands usable when one command's dependency is not installed."""

    def fail(args: argparse.Namespace) -> int:
        raise DataflowError(f"this command needs the Python package {missing!r}; run `make setup`")

    p = sub.add_parser(name, help=f"(unavailable: {missing} is not installed)")
    p.set_defaults(func=fail)


def _concurrent(exc: BaseException) -> str:
    """The busy line of a commit Delta refused because another run wrote the same table first."""
    return (f"another run wrote the same table at the same moment ({first_line(exc)[:300]}); nothing of this "
            "run's last commit was written: run it again (or with --wait); --verbose shows the trace")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PipelineBusy as exc:
        if args.verbose:
            raise
        hint = "" if "--wait" in str(exc) else " (run with --wait to wait for it)"
        print(f"dataflow {args.command}: busy: {exc}{hint}", file=sys.stderr)
        return BUSY_EXIT
    except PipelineStuck as exc:  # locked by a run that is gone or failed: waiting would not help
        if args.verbose:
            raise
        print(f"dataflow {args.command}: stuck: {exc}", file=sys.stderr)
        return STUCK_EXIT
    except DataflowError as exc:
        if args.verbose:
            raise
        if isinstance(exc, ConcurrentCommit):  # a delta-rs commit refused, as Delta's below
            print(f"dataflow {args.command}: busy: {_concurrent(exc)}", file=sys.stderr)
            return BUSY_EXIT
        for line in str(exc).splitlines() or [""]:  # a pipeline's mistakes: one line each
            print(f"dataflow {args.command}: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dataflow {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - last line of defence for a readable error
        if args.verbose:
            raise
        if is_concurrent(exc):  # Delta refused a commit: another run wrote the same table first
            print(f"dataflow {args.command}: busy: {_concurrent(exc)}", file=sys.stderr)
            return BUSY_EXIT
        print(
            f"dataflow {args.command}: error: {type(exc).__name__}: {first_line(exc)[:500]} "
            "(run with --verbose for the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> NoReturn:
    """The `dataflow` command as a process: `main`, then an exit that skips native libraries'
    teardown. delta-rs (the driver's small control-table reads and commits) and Arrow keep
    thread pools whose static destructors can abort a Python process at exit ("terminate
    called without an active exception", SIGABRT) after every line has been printed and every
    commit made (delta-io/delta-rs#2184; seen once in this suite, a backfill exiting busy).
    The exit status is the run's, so `os._exit` follows Python's own at-exit work: logging
    and the standard streams are flushed first. The Spark JVM needs nothing: it exits when
    this process's end closes its stdin."""
    code = main()
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    run()

