"""The product's story on the sample data (`make demo`).

    python -m dataflow_core.examples.jobs.demo [--rows 20000] [--master local[*]] [--warehouse ./warehouse]

1. generate six hours of sample ad and content views (late, duplicated and broken rows
   among them) into `video_events`;
2. list the pipelines and their four answers (what, where, when, how);
3. replay `billing` and `ad_sessions` in arrival order, one-minute micro-batches: the
   pane history a live pipeline would have emitted (early, on-time and late panes;
   retractions when late views merge sessions);
4. show one ad-hour's billing history and one busy session history from the pane logs;
5. append a slice of late views and backfill `ad_sessions` in batch: the corrections
   arrive as retractions in the pane log, the results and the short-session counts change;
6. go live: micro-batches of `ad_sessions` over newly appended views (duplicates and late
   views among them), each batch's panes and retractions;
7. draw the diagram of the busy key (event time x processing time);
8. say where everything is and how to query it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

from dataflow_core.errors import DataflowError

ROWS = 20_000
START = "2024-05-01T00:00:00Z"
SPAN_HOURS = 6
RANGE = ("2024-05-01T00:00:00Z", "2024-05-01T06:00:00Z")
STEPS = 8
PIPELINES = ("billing", "ad_sessions")
"""The pipelines the demo runs (`dataflow_core/examples/pipelines/`)."""
QUERIES = (
    'dataflow sql "SELECT * FROM billing ORDER BY value DESC LIMIT 5"',
    'dataflow sql "SELECT timing, count(*) FROM billing_panes GROUP BY timing"',
    "dataflow backfill --pipeline billing --start 2024-05-01 --end 2024-05-02 [--replay]",
    "dataflow microbatch --pipeline ad_sessions [--now T] [--loop 1m]",
    'dataflow sql "SELECT user_id, ad_id, w.* FROM ad_sessions__state LATERAL VIEW explode(windows) AS w LIMIT 5"',
    "dataflow runs --pipeline ad_sessions",
)
"""What the demo's last step suggests to run next (tests/core/test_readme.py checks that each
parses and names only tables the demo writes, as the README's commands)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dataflow_core.examples.jobs.demo", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=ROWS, help="sample rows (default %(default)s)")
    p.add_argument("--master", default=None, help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None, help="warehouse root (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    return p.parse_args(argv)


class _Steps:
    def __init__(self) -> None:
        self.number = 0
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        self.number += 1
        print(f"\n[demo {self.number}/{STEPS}] {message}", flush=True)

    def detail(self, message: str) -> None:
        print(f"    {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return _run(args)
    except DataflowError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from dataflow_core.pipelines import all_pipelines
    from dataflow_core.sample.config import SampleConfig
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.platform.session import get_spark, warehouse_root
    from dataflow_core.spark.platform.tables import register_tables

    # Few users and ads, so that a user's views of one ad form sessions worth watching.
    config = SampleConfig(rows=args.rows, seed=42, start=START, span_hours=SPAN_HOURS, users=40, ads=8)
    step = _Steps()
    spark = get_spark("dataflow-demo", master=args.master, warehouse=args.warehouse)
    _fresh_start(spark)

    step(f"generate {config.rows:,} sample views over {SPAN_HOURS} h into table video_events")
    summary = write_sample(spark, config, table="video_events", progress=step.detail)
    for line in summary.lines():
        step.detail(line)

    step("the pipelines (dataflow_core/examples/pipelines/*.py, $DATAFLOW_PIPELINES): what, where, when, how")
    for spec in all_pipelines().values():
        for line in spec.describe():
            step.detail(line)

    step("replay billing and ad_sessions in arrival order (1-minute micro-batches)")
    ok = True
    for name in PIPELINES:
        result = run_backfill(spark, name, *RANGE, replay=True, batch_interval="1m",
                              progress=lambda m, n=name: step.detail(f"{n}: {m}"))
        ok &= _ledger(step, result)

    step("pane histories from the pane logs (Spark SQL)")
    register_tables(spark)
    busy_hour = spark.sql(
        "SELECT ad_id, window_start, count(*) AS n FROM billing_panes GROUP BY ad_id, window_start "
        "HAVING count_if(timing = 'LATE') > 0 AND count_if(timing = 'EARLY') > 0 "
        "ORDER BY n DESC, ad_id, window_start LIMIT 1"
    ).first()
    if busy_hour:
        step.detail(f"billing: ad {busy_hour['ad_id']}, hour starting {busy_hour['window_start']} "
                    "(early estimates every 10 min, the on-time figure, then one pane per late view):")
        _show(spark.sql(
            "SELECT timing, pane_index AS idx, value AS watch_seconds, emitted_at FROM billing_panes "
            f"WHERE ad_id = '{busy_hour['ad_id']}' AND window_start = '{busy_hour['window_start']}' "
            "ORDER BY emitted_at, pane_index LIMIT 12"
        ))
    busy = spark.sql(
        "SELECT user_id, ad_id, count(*) AS n FROM ad_sessions_panes GROUP BY user_id, ad_id "
        "HAVING count_if(timing = 'LATE') > 0 ORDER BY n, user_id, ad_id LIMIT 1"
    ).first()
    if busy:
        step.detail(f"ad_sessions: {busy['user_id']} and {busy['ad_id']} (retractions undo earlier panes "
                    "of sessions that grew or merged):")
        _show(spark.sql(
            "SELECT window_start, window_end, value AS views, timing, pane_index AS idx, is_retraction AS retraction, "
            f"emitted_at FROM ad_sessions_panes WHERE user_id = '{busy['user_id']}' AND ad_id = '{busy['ad_id']}' "
            "ORDER BY emitted_at, window_start, is_retraction DESC LIMIT 16"
        ))

    step("append late views and backfill ad_sessions in batch: corrections as retractions")
    late = SampleConfig(rows=max(200, args.rows // 20), seed=7, start=START, span_hours=SPAN_HOURS,
                        users=40, ads=8, late_minutes_share=0.0, late_hours_share=1.0,
                        duplicate_share=0.0, malformed_share=0.0, ad_share=0.5)
    write_sample(spark, late, table="video_events", mode="append", progress=lambda m: None)
    step.detail(f"appended {late.rows:,} views that arrive 1-12 hours late")
    before = {r["ad_id"]: r["value"] for r in spark.sql("SELECT ad_id, value FROM ad_short_sessions").collect()}
    result = run_backfill(spark, "ad_sessions", *RANGE, progress=lambda m: step.detail(f"ad_sessions: {m}"))
    ok &= _ledger(step, result)
    after = {r["ad_id"]: r["value"] for r in spark.sql("SELECT ad_id, value FROM ad_short_sessions").collect()}
    step.detail("short sessions per ad, before -> after the late views:")
    for ad in sorted(set(before) | set(after)):
        step.detail(f"  {ad:<8} {before.get(ad, 0):>5} -> {after.get(ad, 0):>5}")
    _show(spark.sql(
        "SELECT user_id, ad_id, window_start, window_end, value AS views, timing, is_retraction AS retraction "
        f"FROM ad_sessions_panes WHERE run_id = '{result.run_id}' "
        "ORDER BY user_id, ad_id, emitted_at, is_retraction DESC, window_start LIMIT 10"
    ))

    step("live micro-batches of ad_sessions: new views arrive, some twice, some late")
    from dataflow_core.spark.jobs.microbatch import run_microbatch

    live = [
        ("2024-05-01T06:05:00Z", None),
        ("2024-05-01T06:15:00Z", SampleConfig(rows=400, seed=11, start="2024-05-01T06:00:00Z", span_hours=0.15,
                                              users=40, ads=8, ad_share=1.0, duplicate_share=0.2,
                                              late_minutes_share=0.3, late_hours_share=0.0, malformed_share=0.02)),
        ("2024-05-01T06:45:00Z", SampleConfig(rows=200, seed=12, start="2024-05-01T05:40:00Z", span_hours=0.5,
                                              users=40, ads=8, ad_share=1.0, duplicate_share=0.1,
                                              late_minutes_share=0.5, late_hours_share=0.0, malformed_share=0.0)),
    ]
    for now, slice_ in live:
        if slice_ is not None:
            write_sample(spark, slice_, table="video_events", mode="append", progress=lambda m: None)
            step.detail(f"appended {slice_.rows:,} views (event times from {slice_.start:%H:%M})")
        result = run_microbatch(spark, "ad_sessions", now=now, progress=step.detail)
        ok &= _ledger(step, result)
    _show(spark.sql(
        "SELECT run_id AS batch, timing, count_if(NOT is_retraction) AS panes, count_if(is_retraction) AS retractions "
        "FROM ad_sessions_panes WHERE run_id LIKE 'batch-%' GROUP BY run_id, timing ORDER BY run_id, timing"
    ))

    step("diagram of the busy key: event time across, processing time up")
    diagram = None
    if busy:
        from dataflow_core.cli import main as cli

        diagram = f"{warehouse_root(spark)}/ad_sessions_{busy['user_id']}_{busy['ad_id']}.svg"
        status = cli(["diagram", "--pipeline", "ad_sessions", "--key",
                      f"user_id={busy['user_id']},ad_id={busy['ad_id']}",
                      "--from", RANGE[0], "--to", RANGE[1], "-o", diagram])
        step.detail(f"written: {diagram}" if status == 0 else "the diagram could not be drawn (see above)")

    step("what is where")
    root = warehouse_root(spark)
    for line in [
        f"warehouse {root} (plain Delta tables; any Delta reader can open them):",
        "  video_events                  the input (partitioned by event_date)",
        "  billing__quarantine, ad_sessions__quarantine  bad rows per pipeline, with quarantine_reason and run_id",
        "  billing, billing_panes        results per ad and hour; every pane emitted",
        "  ad_sessions, ad_sessions_panes          sessions per user and ad (with retractions)",
        "  ad_short_sessions, ad_short_sessions_panes  short sessions per ad",
        "  dataflow_runs, dataflow_watermarks       each run's ledger; the watermark per batch",
        "  ad_sessions__state, dataflow_batches     live state per key (open windows, next wake-ups); each micro-batch",
        "query them:",
        *(f"  {command}" for command in QUERIES),
    ] + ([f"diagram: {diagram}"] if diagram else []):
        print(f"    {line}")
    print(f"\ndemo {'finished' if ok else 'FAILED: a ledger does not balance'} in "
          f"{time.monotonic() - step.started:.0f} s", flush=True)
    return 0 if ok else 1


def demo_tables() -> list[str]:
    """Every table the demo's runs write, its input's aside: its pipelines' own tables (results,
    pane logs, state, plans, quarantines, seen ids: `pipelines.layout`) and the control tables
    every pipeline shares."""
    from dataflow_core.pipelines import get, layout

    return [t for name in PIPELINES for t in layout.pipeline_tables(get(name))] + list(layout.SHARED)


def demo_inputs() -> list[str]:
    """The tables the demo's pipelines read (the demo generates them)."""
    from dataflow_core.pipelines import get

    return sorted({get(name).input_table for name in PIPELINES})


def _fresh_start(spark) -> None:
    """The demo regenerates its input, so it starts its outputs, live state and stream
    checkpoints afresh (a stream cannot continue over an overwritten input)."""
    from dataflow_core.spark.platform.tables import drop_path, table_path
    from dataflow_core.spark.sinks.batches import checkpoint_path

    for name in demo_tables():
        drop_path(spark, table_path(spark, name))
    for name in PIPELINES:
        drop_path(spark, checkpoint_path(spark, name))


def _ledger(step: _Steps, result) -> bool:
    from dataflow_core.spark.sinks.runs import Ledger

    ledger = Ledger(**{k: v for k, v in result.ledger.items() if k != "balanced"})
    for line in ledger.lines():
        step.detail(line)
    return result.ledger_ok


def _show(df) -> None:
    for line in df._jdf.showString(20, 40, False).splitlines():
        print(f"      {line}")


if __name__ == "__main__":
    sys.exit(main())
