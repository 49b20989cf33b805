"""One driver of the two-driver race (tests/integration/test_s3_commits.py): a process of its
own, with its own Spark session and JVM, appending one tagged row per round to one table of a
warehouse on S3 through the product's `write_table`.

The two drivers start each round together: each leaves a file `<tag>-<round>` in the barrier
folder and waits for the other's, so both read the same table version and commit the next one
at about the same moment, round after round, which is what loses commits without a log store
that excludes the other driver.

`python -m tests.s3_append_driver TAG OTHER ROUNDS BARRIER_DIR` (warehouse and S3 settings
from the environment); prints one JSON line per round: the round and the version it committed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

SCHEMA = "tag string, round int"


def main(tag: str, other: str, rounds: int, barrier: Path) -> int:
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import write_table

    spark = get_spark(f"race-{tag}", master="local[1]")
    if tag < other:  # one of the two makes the table, before the first round: two drivers
        # creating one table at once is a conflict Delta reports (ProtocolChangedException)
        write_table(spark, spark.createDataFrame([], SCHEMA), "race", mode="ignore")
    for number in range(rounds):
        (barrier / f"{tag}-{number}").touch()
        deadline = time.monotonic() + 120
        while not (barrier / f"{other}-{number}").exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{other} never reached round {number}")
            time.sleep(0.01)
        row = spark.createDataFrame([(tag, number)], SCHEMA)
        result = write_table(spark, row, "race", mode="append")
        print(json.dumps({"tag": tag, "round": number, "version": result.version}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
