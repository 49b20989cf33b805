"""Write the sample into a Delta input table and say what went in."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import SparkSession

from dataflow_core.errors import DataflowError
from dataflow_core.sample.config import SampleConfig
from dataflow_core.sample.video_events import (
    PARTITION_COLUMN,
    count_by_kind,
    describe_kinds,
    generate_events,
)
from dataflow_core.spark.platform.tables import check_table_name, write_table

WRITE_MODES = ("overwrite", "append")
DEFAULT_TABLE = "video_events"


@dataclass(frozen=True)
class SampleSummary:
    """What one generator run wrote."""

    table: str
    path: str
    mode: str
    rows: int
    by_kind: dict[str, int]
    write_seconds: float
    count_seconds: float

    def lines(self) -> list[str]:
        return [
            f"wrote {self.rows:,} rows to table {self.table} ({self.mode}) at {self.path}",
            f"  in {self.write_seconds:.1f} s (+ {self.count_seconds:.1f} s to count kinds); "
            "rows by kind:",
            *("    " + line for line in describe_kinds(self.by_kind)),
        ]


def write_sample(
    spark: SparkSession,
    config: SampleConfig,
    table: str = DEFAULT_TABLE,
    mode: str = "overwrite",
    progress: Callable[[str], None] = print,
) -> SampleSummary:
    """Generate `config.rows` rows into Delta table `table`, partitioned by event_date."""
    check_table_name(table)
    if mode not in WRITE_MODES:
        raise DataflowError(f"invalid sample parameter mode (--mode): must be one of "
                            f"{', '.join(WRITE_MODES)}, got {mode!r}")
    progress(
        f"generating {config.rows:,} rows (seed {config.seed}, from "
        f"{config.start.isoformat()} over {config.span_hours:g} h) into table {table} ({mode}, "
        f"partitioned by {PARTITION_COLUMN})"
    )
    started = time.monotonic()
    result = write_table(
        spark, generate_events(spark, config), table, mode=mode, partition_by=[PARTITION_COLUMN]
    )
    written = time.monotonic()
    progress(f"written in {written - started:.1f} s; counting rows by kind (recomputed from the seed)")
    by_kind = count_by_kind(spark, config)
    counted = time.monotonic()
    return SampleSummary(
        table=table,
        path=result.path,
        mode=mode,
        rows=result.rows_inserted,
        by_kind=by_kind,
        write_seconds=written - started,
        count_seconds=counted - written,
    )
