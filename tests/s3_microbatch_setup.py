"""Set-up of the micro-batch race on S3 (tests/integration/test_s3_microbatch.py), in one
driver process: the same input rows into an `s3a://` warehouse and a local folder, and one
uninterrupted micro-batch on the local folder, the baseline the racing runs on S3 must equal.

`python -m tests.s3_microbatch_setup LOCAL S3 NOW` (S3 settings from the environment).
"""

from __future__ import annotations

import sys


def main(local: str, s3: str, now: str) -> int:
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.session import get_spark
    from tests.integration.test_backfill import SCHEMA, sessions_pipeline, ts
    from tests.integration.test_s3_microbatch import INPUT, PIPELINE, ROWS

    sessions_pipeline(PIPELINE, INPUT)
    spark = get_spark("s3-microbatch-setup", master="local[2]", warehouse=s3)
    rows = spark.createDataFrame([(e, u, a, v, ts(t), ts(i)) for e, u, a, v, t, i in ROWS], SCHEMA)
    for warehouse in (s3, local):
        rows.write.format("delta").mode("append").save(f"{warehouse}/{INPUT}")
    get_spark(warehouse=local)
    assert run_microbatch(spark, PIPELINE, now=now).ledger_ok
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
