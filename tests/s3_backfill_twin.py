"""One driver process that runs the same billing backfill on two warehouses, a local folder and
an `s3a://` one (tests/integration/test_s3_warehouse.py), and prints what each wrote.

One process for both, because a session starts the JVM once: a session made for S3 (the S3A
jars, the log store) writes local folders as well, the other way round it cannot. The sample
input is generated into each warehouse with the same seed, then `run_backfill` runs with the
same processing time, so the two must agree row for row.

`python -m tests.s3_backfill_twin LOCAL_WAREHOUSE S3_WAREHOUSE [local-first]` (S3 settings
from the environment); prints one JSON object: per warehouse, the billing rows and the seconds
taken. The first warehouse pays the JVM's warm-up (its first queries, the JIT), so
benchmarks/bench_s3.py runs both orders.
"""

from __future__ import annotations

import json
import sys
import time

ROWS = 300
START, END, NOW = "2024-05-01T00:00:00Z", "2024-05-01T06:00:00Z", "2024-05-02T00:00:00Z"
VOLATILE = ("run_id", "written_at", "emitted_at", "processing_time")  # differ between any two runs


def billing_rows(spark) -> list[list]:
    from dataflow_core.spark.platform.tables import read_table

    frame = read_table(spark, "billing")
    columns = sorted(c for c in frame.columns if c not in VOLATILE)
    return sorted([[str(v) for v in row] for row in frame.select(*columns).collect()])


def main(local: str, s3: str, local_first: bool = False) -> int:
    from dataflow_core.sample.config import SampleConfig, parse_start
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark("s3-backfill-twin", master="local[2]", warehouse=s3)
    out = {}
    order = [("s3", s3), ("local", local)]
    for name, warehouse in reversed(order) if local_first else order:
        get_spark(warehouse=warehouse)
        config = SampleConfig(rows=ROWS, start=parse_start(START), span_hours=6.0)
        started = time.perf_counter()
        write_sample(spark, config, table="video_events", mode="overwrite", progress=lambda _: None)
        generated = time.perf_counter()
        result = run_backfill(spark, "billing", START, END, now=NOW, progress=lambda _: None)
        out[name] = {"rows": billing_rows(spark), "ledger_ok": result.ledger_ok,
                     "generate_s": round(generated - started, 2),
                     "backfill_s": round(time.perf_counter() - generated, 2)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:] == ["local-first"]))
