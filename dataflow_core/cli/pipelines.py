"""`dataflow pipelines`: the registered pipelines and their four answers per stage."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pipelines",
        help="list the registered pipelines (what / where / when / how of each stage)",
        description="Pipelines are the shipped examples and those of the modules named by "
                    "$DATAFLOW_PIPELINES or the dataflow.pipelines entry-point group.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataflow_core.pipelines import all_pipelines

    for spec in all_pipelines().values():
        print("\n".join(spec.describe()))
    return 0
