"""`dataflow replay SCENARIO.yaml`: a conformance scenario's panes as JSON Lines."""

from __future__ import annotations

import argparse
import sys

from dataflow_core.scenario import RUNNERS, load_scenario, panes_to_jsonl, replay


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay a conformance scenario and print its panes (JSON Lines)",
        description=(
            "Replays one grouping stage against a scripted history of arrivals, watermark "
            "moves and clock moves (the scenario format in FORMAT.md). Prints one JSON "
            "object per pane on stdout and a summary line with dropped=N on stderr."
        ),
    )
    p.add_argument("scenario", help="path to a scenario YAML file")
    p.add_argument(
        "--runner",
        default="local",
        help=f"which runner replays it (default: local, the reference runner; available: {', '.join(sorted(RUNNERS))})",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    result = replay(scenario, args.runner)
    sys.stdout.write(panes_to_jsonl(result.panes))
    sys.stdout.flush()
    retractions = sum(p.retraction for p in result.panes)
    print(
        f"replay {scenario.name}: runner={args.runner} elements={result.elements} "
        f"panes={len(result.panes) - retractions} retractions={retractions} dropped={result.dropped_pairs}",
        file=sys.stderr,
    )
    return 0
