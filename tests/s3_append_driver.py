"""One driver of a two-driver race on S3 and on a local folder (tests/integration/test_s3_warehouse.py,
benchmarks/bench_s3.py): a process of its own, with its own Spark session and JVM.

The two drivers start each round together: each leaves a file `<tag>-<round>` in the barrier
folder and waits for the other's, so both act on the same table version at about the same
moment, round after round, which is what loses commits without a log store that excludes the
other driver.

- `append`: one tagged row per round into table `race` through the product's `write_table`
  (Delta's whole commit path: conflict checks, retries).
- `duel`: both write log version N (`duel/_delta_log/N.json`) straight through the session's
  log store in round N: the store alone, without the seconds of a Spark job around it, so the
  two writes meet within milliseconds. Exactly one may succeed; the other must be told the
  version is taken (java.nio.file.FileAlreadyExistsException).

`python -m tests.s3_append_driver MODES TAG OTHER ROUNDS BARRIER_DIR [LOCAL]` (MODES: `append`,
`duel` or both, comma-separated; warehouse and S3 settings from the environment); with LOCAL, a
local folder, the same races follow there in the same JVM, through the `file:` log store. Prints
one JSON line per round, with the warehouse's scheme as `store`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

SCHEMA = "tag string, round int"


def wait_for(barrier: Path, tag: str, other: str, number: int) -> None:
    barrier.mkdir(parents=True, exist_ok=True)
    (barrier / f"{tag}-{number}").touch()
    deadline = time.monotonic() + 120
    while not (barrier / f"{other}-{number}").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{other} never reached round {number}")
        time.sleep(0.002)


def append(spark, tag: str, other: str, rounds: int, barrier: Path) -> None:
    from dataflow_core.spark.platform.tables import write_table

    if tag < other:  # one of the two makes the table, before the first round: two drivers
        # creating one table at once is a conflict Delta reports (ProtocolChangedException)
        write_table(spark, spark.createDataFrame([], SCHEMA), "race", mode="ignore")
    for number in range(rounds):
        wait_for(barrier, tag, other, number)
        started = time.perf_counter()
        result = write_table(spark, spark.createDataFrame([(tag, number)], SCHEMA), "race", mode="append")
        print(json.dumps({"store": _scheme(spark), "tag": tag, "round": number, "version": result.version,
                          "seconds": round(time.perf_counter() - started, 3)}), flush=True)


def mixed(spark, tag: str, other: str, rounds: int, barrier: Path) -> None:
    from dataflow_core.spark.platform import driver_delta
    from dataflow_core.spark.platform.tables import table_path, write_table

    if tag < other:
        write_table(spark, spark.createDataFrame([], SCHEMA), "mixed", mode="ignore")
    for number in range(rounds):
        wait_for(barrier, tag, other, number)
        if tag < other:
            write_table(spark, spark.createDataFrame([(tag, number)], SCHEMA), "mixed", mode="append")
        else:
            time.sleep(0.15 * (number % 4))
            driver_delta.append(table_path(spark, "mixed"), [(tag, number)], SCHEMA,
                                (f"race-{tag}", number))
        print(json.dumps({"store": _scheme(spark), "tag": tag, "round": number, "mixed": True}), flush=True)


def duel(spark, tag: str, other: str, rounds: int, barrier: Path) -> None:
    from py4j.protocol import Py4JJavaError

    from dataflow_core.spark.platform.session import warehouse_root
    from dataflow_core.spark.platform.tables import jvm_class

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    store = jvm_class(spark, spark.conf.get(f"spark.delta.logStore.{_scheme(spark)}.impl"))(conf)
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")
    for number in range(rounds):
        lines = spark._jvm.java.util.ArrayList()
        lines.add(json.dumps({"commitInfo": {"tag": tag}}))
        root = warehouse_root(spark)
        if "://" not in root:  # a local log folder exists before its first commit, as Delta makes it
            Path(root, "duel", "_delta_log").mkdir(parents=True, exist_ok=True)
            root = "file:" + root
        path = path_of(f"{root}/duel/_delta_log/{number:020d}.json")
        wait_for(barrier, tag, other, number)
        try:
            store.write(path, lines.iterator(), False, conf)
            won = True
        except Py4JJavaError as exc:
            if "FileAlreadyExistsException" not in exc.java_exception.getClass().getName():
                raise
            won = False
        print(json.dumps({"store": _scheme(spark), "tag": tag, "round": number, "won": won}), flush=True)


def _scheme(spark) -> str:
    from dataflow_core.spark.platform.session import warehouse_root

    root = warehouse_root(spark)
    return root.split("://", 1)[0] if "://" in root else "file"


def main(mode: str, tag: str, other: str, rounds: int, barrier: Path, local: str | None = None) -> int:
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark(f"race-{tag}", master="local[1]")
    for warehouse in [None, local] if local else [None]:  # one JVM for several races
        spark = get_spark(warehouse=warehouse) if warehouse else spark
        for part in mode.split(","):
            {"append": append, "duel": duel, "mixed": mixed}[part](spark, tag, other, rounds, barrier / f"{_scheme(spark)}-{part}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]), *sys.argv[6:7]))
