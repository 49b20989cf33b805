"""Delta's state of the tables a micro-batch reads and writes, computed before it needs it.

Each commit leaves a table a new snapshot, and Delta computes that snapshot's state (its
files, its idempotent-write ids) with small Spark jobs the first time something asks for it:
a read of that version, or the next write under `txnAppId`/`txnVersion`. A micro-batch reads
or writes five or more tables that the batch before it committed to, so nine such
computations ("Compute snapshot for version N") ran inside every warm `--loop` batch, the
state table's and the results table's on its critical path (measured:
benchmarks/results/spark-runner-history.md).

`warm` computes them in a thread of its own: after a `--loop` batch has finished, while the
loop waits for the next trigger, and once a batch has claimed its number, while the batch
reads and checks its input. Delta computes a snapshot's state once (a lazy value, under the
snapshot's lock), so a batch that asks while the thread is at it waits for that computation
instead of repeating it; a table committed to in between simply gets a new snapshot, computed
when asked as before. Nothing here changes what is read or written.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Sequence

from dataflow_core.spark.platform.tables import latest_snapshot, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DESCRIPTION = "dataflow: Delta's state of the next batch's tables, computed ahead"


def warm(spark: "SparkSession", names: Sequence[str]) -> threading.Thread:
    """Compute the latest snapshot's state of each of the tables `names` (those that exist),
    in a daemon thread; nothing waits for it. An optimisation only: a failure leaves the
    computation to whoever asks next, as without it."""
    paths = [table_path(spark, name) for name in names]

    def run() -> None:
        context = spark.sparkContext
        try:
            context.setLocalProperty("spark.job.description", DESCRIPTION)
            for path in paths:
                if context._jsc is None:
                    return  # the session was stopped: nothing to warm for
                _compute(spark, path)
            # py4j may hand this thread's JVM thread to a later Python thread: leave it unlabelled
            context.setLocalProperty("spark.job.description", None)
        except Exception:  # noqa: BLE001 - the session stopped under it: nothing to warm for
            pass

    thread = threading.Thread(target=run, name="dataflow-warm-snapshots", daemon=True)
    thread.start()
    return thread


def _compute(spark: "SparkSession", path: str) -> None:
    """The latest snapshot's state of the table at `path` (none where there is no table); a
    failure (say, the table dropped meanwhile) leaves it to whoever asks next."""
    try:
        snapshot = latest_snapshot(spark, path)
        if snapshot.version() >= 0:
            snapshot.setTransactions()  # the snapshot's computed state: files, txn ids
    except Exception:  # noqa: BLE001 - computed when asked instead
        pass
