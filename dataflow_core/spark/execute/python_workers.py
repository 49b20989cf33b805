"""Python workers started while the driver has other work, before a stage needs them.

A micro-batch runs the model in executors' Python workers (`by_key`). In a fresh process
(one process per batch, as Airflow runs them) the stage's first tasks each start a worker and
import the model into it: on 2 cores that was about 2 of a warm batch's 27 seconds
(`time to start Python workers` and `... initialize ...` in Spark's stage metrics), while the
driver had spent the seconds before it planning the stream's batch, with the cores idle.

`warm` runs, in a thread of its own, one tiny job with a task per core slot whose workers
import the per-key modules. Spark keeps an idle worker for reuse (`spark.python.worker.reuse`,
on by default, for up to a minute), so the stage's tasks find workers started and the model
imported.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession


PER_KEY_MODULE = "dataflow_core.spark.execute.keyed_stage"
"""What a stage's workers import: the per-key execution, the model, pyarrow."""

warmed = False
"""Set in a worker this module warmed (what a test asks a worker)."""


def _import_model(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    global warmed
    importlib.import_module(PER_KEY_MODULE)
    warmed = True
    yield from batches


def warm(spark: "SparkSession") -> threading.Thread | None:
    """Start the workers in the background (a daemon thread; nothing waits for it). None when
    the session does not reuse Python workers, where starting them early would buy nothing."""
    if spark.sparkContext.getConf().get("spark.python.worker.reuse", "true").lower() != "true":
        return None
    slots = max(1, spark.sparkContext.defaultParallelism)

    def run() -> None:
        try:
            spark.range(slots, numPartitions=slots).mapInArrow(_import_model, "id long").count()
        except Exception:  # noqa: BLE001 - an optimisation only: the stage starts its own workers
            pass

    thread = threading.Thread(target=run, name="dataflow-warm-python-workers", daemon=True)
    thread.start()
    return thread
