"""The driver beside the micro-batch processes on S3 (tests/integration/test_s3_microbatch.py),
one process for the whole test, waiting on its stdin between steps:

1. the first batch's input rows into an `s3a://` warehouse, and both batches on a local folder
   run uninterrupted there: the baseline the runs on S3 must equal; prints `ready`;
2. (after a line on stdin, once the test has SIGKILLed a `dataflow microbatch` of the first
   batch on S3) the same first batch again on S3, to its end, then the second batch's input
   rows there, for the two processes that race for it; prints `done`.

`python -m tests.s3_microbatch_setup LOCAL S3` (S3 settings from the environment).
"""

from __future__ import annotations

import sys


def main(local: str, s3: str) -> int:
    from dataflow_core.model.time import format_instant
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.session import get_spark
    from tests.integration.test_backfill import SCHEMA, sessions_pipeline, ts
    from tests.integration.test_s3_microbatch import BATCHES, INPUT, PIPELINE

    sessions_pipeline(PIPELINE, INPUT)
    spark = get_spark("s3-microbatch-setup", master="local[2]", warehouse=s3)

    def append(warehouse: str, rows: list[tuple]) -> None:
        df = spark.createDataFrame([(e, u, a, v, ts(t), ts(i)) for e, u, a, v, t, i in rows], SCHEMA)
        df.write.format("delta").mode("append").save(f"{warehouse}/{INPUT}")

    (first_end, first_rows), (second_end, second_rows) = BATCHES
    append(s3, first_rows)
    get_spark(warehouse=local)
    for end, rows in BATCHES:
        append(local, rows)
        assert run_microbatch(spark, PIPELINE, now=format_instant(end)).ledger_ok
    print("ready", flush=True)
    sys.stdin.readline()
    get_spark(warehouse=s3)
    assert run_microbatch(spark, PIPELINE, now=format_instant(first_end)).ledger_ok
    append(s3, second_rows)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
