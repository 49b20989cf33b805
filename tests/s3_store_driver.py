"""The driver of tests/integration/test_s3_stores.py: one process, one JVM, two sessions, both
on an S3 warehouse reached through the misbehaving proxy (tests/s3_proxy.py) at
`$AWS_ENDPOINT_URL`.

1. The proxy drops `If-None-Match`: the session on `s3a://lake/unsafe` must be refused.
2. The proxy loses the first answer to each log file's PUT: a table written on
   `s3a://lake/retried` must hold each row once, its commit made once.

`python -m tests.s3_store_driver`; prints one JSON line per step.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request


def main() -> int:
    from dataflow_core.errors import DataflowError
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import write_table

    try:
        get_spark("unsafe-store", master="local[1]", warehouse="s3a://lake/unsafe")
        print(json.dumps({"step": "ignore-conditions", "refused": None}), flush=True)
        return 0
    except DataflowError as exc:
        print(json.dumps({"step": "ignore-conditions", "refused": str(exc)}), flush=True)

    mode = urllib.request.Request(f"{os.environ['AWS_ENDPOINT_URL']}/_proxy/mode/lose-commit-answers", method="PUT")
    urllib.request.urlopen(mode, timeout=10).read()
    spark = get_spark("lost-answers", master="local[1]", warehouse="s3a://lake/retried")
    schema = "tag string, n int"
    versions = [write_table(spark, spark.createDataFrame([("a", 1)], schema), "t", mode="append").version]
    rows = sorted(tuple(r) for r in spark.sql("SELECT tag, n FROM delta.`s3a://lake/retried/t`").collect())
    print(json.dumps({"step": "lose-commit-answers", "versions": versions, "rows": rows}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
