"""Demo job: sample views -> Great Expectations -> quarantine -> dedup -> windowed counts.

    python -m dataflow_core.examples.jobs.demo_job [--rows 20000] [--seed 42] [--window 1h]
                            [--master local[*]] [--warehouse ./warehouse]

Steps, each printed as it starts: generate the sample into the input table, validate it with
the GE suite (pass/fail per expectation), split rows into accepted and quarantined (the
quarantine table keeps every bad row with its reason), drop duplicate deliveries, count views
per video in fixed event-time windows and MERGE them into the output table (a re-run updates
the same rows instead of adding new ones), show a few result rows with Spark SQL, and print
the count ledger, which must balance: rows in = accepted + quarantined + dropped as late.

The aggregation is plain Spark for now (`aggregate_windows`); the Dataflow runners replace it.
"""

from __future__ import annotations

import argparse

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from dataflow_core.errors import DataflowError
from dataflow_core.options import parse_interval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

INPUT_TABLE = "video_events"
QUARANTINE_TABLE = "video_events_quarantine"
OUTPUT_TABLE = "video_views_by_window"
OUTPUT_KEYS = ("video_id", "window_start", "window_end")
DEFAULT_ROWS = 20_000
DEFAULT_SEED = 42
DEFAULT_WINDOW = "1h"
STEPS = 7


def parse_window(text: str) -> str:
    """A window size in the model's duration syntax (`30s`, `10m`, `1h`, `1d`), as the
    interval Spark's `window()` takes."""
    return f"{parse_interval(text, '--window')} milliseconds"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m dataflow_core.examples.jobs.demo_job", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=DEFAULT_ROWS,
                   help="sample rows to generate (default %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help="generator seed (default %(default)s)")
    p.add_argument("--window", default=DEFAULT_WINDOW,
                   help="fixed event-time window size (default %(default)r)")
    p.add_argument("--master", default=None,
                   help="Spark master (default $DATAFLOW_SPARK_MASTER or local[*])")
    p.add_argument("--warehouse", default=None,
                   help="warehouse root (default $DATAFLOW_WAREHOUSE or ./warehouse)")
    return p.parse_args(argv)


# --- the transformation steps (each a plain function of DataFrames) -------------------


def deduplicate(events: DataFrame) -> DataFrame:
    """Keep the first delivery (earliest ingest_time) of each event_id."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    first = Window.partitionBy("event_id").orderBy("ingest_time", "event_time_raw")
    return (
        events.withColumn("_delivery", F.row_number().over(first))
        .where(F.col("_delivery") == 1)
        .drop("_delivery")
    )


def aggregate_windows(events: DataFrame, window: str) -> DataFrame:
    """Per video and fixed event-time window: views, total watch seconds, distinct viewers.

    The step the Dataflow runners will take over; keep its output columns stable.
    """
    from pyspark.sql import functions as F

    return (
        events.groupBy("video_id", F.window("event_time", window).alias("w"))
        .agg(
            F.count(F.lit(1)).alias("views"),
            F.sum("watch_seconds").alias("watch_seconds"),
            F.countDistinct("user_id").alias("distinct_users"),
        )
        .select(
            "video_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "views",
            F.round("watch_seconds", 1).alias("watch_seconds"),
            "distinct_users",
        )
    )


# --- the ledger -----------------------------------------------------------------------


@dataclass(frozen=True)
class Ledger:
    """Where every input row went. Dropped-as-late is 0: a batch run has no watermark."""

    rows_in: int
    accepted: int
    quarantined: int
    dropped_late: int
    duplicates_removed: int
    views_aggregated: int
    views_in_output: int

    @property
    def balanced(self) -> bool:
        return self.rows_in == self.accepted + self.quarantined + self.dropped_late

    @property
    def views_match(self) -> bool:
        expected = self.accepted - self.duplicates_removed
        return self.views_aggregated == expected == self.views_in_output

    def lines(self) -> list[str]:
        ok = {True: "OK", False: "MISMATCH"}
        unique = self.accepted - self.duplicates_removed
        return [
            "count ledger:",
            f"  rows in                {self.rows_in:>12,}",
            f"  accepted               {self.accepted:>12,}",
            f"  quarantined            {self.quarantined:>12,}   (table {QUARANTINE_TABLE})",
            f"  dropped as late        {self.dropped_late:>12,}   (batch run: no watermark)",
            f"  in = accepted + quarantined + dropped as late: {self.rows_in:,} = "
            f"{self.accepted:,} + {self.quarantined:,} + {self.dropped_late:,}  "
            f"{ok[self.balanced]}",
            f"  duplicates removed     {self.duplicates_removed:>12,}   (of the accepted rows)",
            f"  views aggregated       {self.views_aggregated:>12,}   (accepted - duplicates = "
            f"{unique:,}; in table {OUTPUT_TABLE}: {self.views_in_output:,})  "
            f"{ok[self.views_match]}",
        ]


# --- the job ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 when the ledger balances, 1 when it does not, 2 on bad input."""
    args = parse_args(argv)
    try:
        return _run(args)
    except DataflowError as exc:
        print(f"demo_job: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    window = parse_window(args.window)
    from dataflow_core.sample.config import SampleConfig

    config = SampleConfig(rows=args.rows, seed=args.seed)  # checks rows and seed first

    from pyspark.sql import functions as F

    from dataflow_core.quality import split_valid_rows, validate_dataframe
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import merge_upsert, read_table, write_table

    started = time.monotonic()
    step = _Steps()
    spark = get_spark("dataflow-demo", master=args.master, warehouse=args.warehouse)

    step(f"generate {config.rows:,} sample rows (seed {config.seed}) into table {INPUT_TABLE}")
    summary = write_sample(spark, config, table=INPUT_TABLE, progress=step.detail)
    for line in summary.lines():
        step.detail(line)

    step(f"validate table {INPUT_TABLE} with the Great Expectations suite")
    events = read_table(spark, INPUT_TABLE).cache()
    rows_in = events.count()
    report = validate_dataframe(events)
    for line in report.lines():
        step.detail(line)

    step(f"split rows into accepted and quarantined (table {QUARANTINE_TABLE})")
    accepted, quarantined = split_valid_rows(events)
    write_table(spark, quarantined, QUARANTINE_TABLE, mode="overwrite")
    n_accepted, n_quarantined = accepted.count(), read_table(spark, QUARANTINE_TABLE).count()
    step.detail(f"{n_accepted:,} accepted, {n_quarantined:,} quarantined; reasons:")
    for row in spark.sql(
        f"SELECT quarantine_reason, count(*) AS n FROM {QUARANTINE_TABLE} "
        "GROUP BY quarantine_reason ORDER BY n DESC, quarantine_reason"
    ).collect():
        step.detail(f"  {row['quarantine_reason']:<30} {row['n']:>8,}")

    step("remove duplicate deliveries (first delivery of each event_id wins)")
    unique = deduplicate(accepted).cache()
    n_unique = unique.count()
    step.detail(f"{n_accepted - n_unique:,} duplicates removed, {n_unique:,} unique events")

    step(f"count views per video in fixed {args.window} event-time windows, MERGE into {OUTPUT_TABLE}")
    stats = aggregate_windows(unique, window).cache()
    n_windows = stats.count()
    result = merge_upsert(spark, stats, OUTPUT_TABLE, keys=list(OUTPUT_KEYS))
    step.detail(f"{n_windows:,} (video, window) rows: {result.rows_inserted:,} inserted, "
                f"{result.rows_updated:,} updated (table version {result.version})")

    step(f"top windows by views (Spark SQL on {OUTPUT_TABLE})")
    spark.sql(
        f"SELECT video_id, window_start, window_end, views, watch_seconds, distinct_users "
        f"FROM {OUTPUT_TABLE} ORDER BY views DESC, video_id, window_start LIMIT 5"
    ).show(truncate=False)

    step("count ledger")
    views_aggregated = stats.agg(F.sum("views")).first()[0] or 0
    this_run = read_table(spark, OUTPUT_TABLE).join(stats.select(*OUTPUT_KEYS), list(OUTPUT_KEYS),
                                                    "left_semi")
    views_in_output = this_run.agg(F.sum("views")).first()[0] or 0
    ledger = Ledger(
        rows_in=rows_in,
        accepted=n_accepted,
        quarantined=n_quarantined,
        dropped_late=0,
        duplicates_removed=n_accepted - n_unique,
        views_aggregated=int(views_aggregated),
        views_in_output=int(views_in_output),
    )
    for line in ledger.lines():
        print(line)
    for frame in (stats, unique, events):
        frame.unpersist()
    ok = ledger.balanced and ledger.views_match
    print(f"demo job {'finished' if ok else 'FAILED: the ledger does not balance'} in "
          f"{time.monotonic() - started:.1f} s", flush=True)
    return 0 if ok else 1


class _Steps:
    """Numbered progress lines: `[demo 3/7] ...`, details indented under them."""

    def __init__(self) -> None:
        self.number = 0

    def __call__(self, message: str) -> None:
        self.number += 1
        print(f"[demo {self.number}/{STEPS}] {message}", flush=True)

    def detail(self, message: str) -> None:
        print(f"    {message}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
