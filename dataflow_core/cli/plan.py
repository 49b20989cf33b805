"""`dataflow plan show RUN_ID`: what a backfill planned with `--plan-only` will change, per
stage: each window's old and new value, its panes and retractions, and the sum of the
changes per key. The plan stored its preview when it was made (`spark.jobs.plan_diff`), so
showing it reads files through the fast reader and starts no JVM (`query.plans`), also to
say that a plan was already applied or rejected."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping, Sequence


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="show a backfill's stored plan (dataflow backfill --plan-only) before it is applied",
        description="Inspect a plan of corrections stored by `dataflow backfill --plan-only`; apply it with "
                    "`dataflow backfill --pipeline P --apply RUN_ID` or discard it with --reject RUN_ID.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the plan's diff per stage")
    show.add_argument("run_id", metavar="RUN_ID", help="the run id `dataflow backfill --plan-only` printed")
    show.add_argument("--pipeline", default=None, help="refuse a run that is not a plan of this pipeline")
    show.add_argument("--limit", type=int, default=100, help="windows listed per stage (default 100; 0: all)")
    show.add_argument("--master", default=None, help="Spark master, used only if the fast reader cannot read the "
                      "plan (default $DATAFLOW_SPARK_MASTER or local[*])")
    show.add_argument("--warehouse", default=None, help="warehouse root: a folder or s3a:// URI (default "
                      "$DATAFLOW_WAREHOUSE or ./warehouse)")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.pipeline is not None:
        from dataflow_core.pipelines import get

        get(args.pipeline)
    plan, diffs = stored(args.run_id, args.pipeline, args.master, args.warehouse)
    for line in plan_lines(plan, diffs, args.limit or None):
        print(line)
    return 0


def stored(run_id: str, pipeline: str | None, master: str | None, warehouse: str | None) -> tuple[dict, list]:
    """The plan and its stored preview, read from the files by the fast reader (no JVM: the
    plan was computed when it was made); Spark only when the fast reader cannot read them."""
    from dataflow_core.query import FastReaderUnsupported
    from dataflow_core.query.plans import stored_plan

    try:
        return stored_plan(run_id, pipeline, warehouse)
    except FastReaderUnsupported as exc:
        print(f"dataflow plan: {exc}; reading the plan with Spark instead", file=sys.stderr)
    from dataflow_core.spark.jobs.plan_diff import plan_diff, plan_record
    from dataflow_core.spark.platform.session import get_spark

    state, diffs = plan_diff(get_spark("dataflow-plan-show", master=master, warehouse=warehouse), run_id, pipeline)
    return plan_record(state), diffs


def plan_lines(plan: Mapping[str, Any], diffs: Sequence[Any], limit: int | None = 100) -> list[str]:
    """The plan as `plan show` prints it: a headline, then per stage its windows and the sum
    of its changes per key (`plan`: as `query.plans.plans_of` gives it)."""
    from dataflow_core.cli.sql import format_table
    from dataflow_core.diagram.plan_table import headline, key_rows, stage_rows

    lines = [headline(plan, diffs)]
    for diff in diffs:
        counts = plan.get("ledger", {}).get("per_stage", {}).get(diff.stage, {})
        lines += ["", f"stage {diff.stage}: {len(diff.changes):,} windows change, {counts.get('panes', 0):,} panes, "
                      f"{counts.get('retractions', 0):,} retractions"]
        if not diff.changes:
            continue
        lines += format_table(*stage_rows(diff, limit)).splitlines()
        if limit is not None and len(diff.changes) > limit:
            lines.append(f"... and {len(diff.changes) - limit:,} more windows (--limit 0 lists all)")
        columns, rows = key_rows(diff)
        if rows:
            lines += ["", f"sum of changes per key, stage {diff.stage}:", *format_table(columns, rows).splitlines()]
    pipeline, run_id = plan["pipeline"], plan["run_id"]
    lines += ["", f"apply: dataflow backfill --pipeline {pipeline} --apply {run_id}   "
                  f"reject: dataflow backfill --pipeline {pipeline} --reject {run_id}"]
    return lines
