"""A micro-batch starts its Python workers early (`execute.python_workers`): the workers the
warm-up started stay for the stage's tasks, with the model imported."""

from __future__ import annotations

import pytest

from dataflow_core.spark.execute import python_workers

pytestmark = pytest.mark.integration


def test_the_stage_finds_workers_started_with_the_model_imported(spark):
    wanted = python_workers.PER_KEY_MODULE

    def probe(batches):  # asks the worker it runs in whether the warm-up started it
        import sys

        import pyarrow as pa

        module = sys.modules.get("dataflow_core.spark.execute.python_workers")
        ready = bool(module is not None and module.warmed) and wanted in sys.modules
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"ready": [ready] * batch.num_rows})

    thread = python_workers.warm(spark)
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive()
    slots = spark.sparkContext.defaultParallelism
    ready = [r["ready"] for r in spark.range(slots, numPartitions=slots).mapInArrow(probe, "ready boolean").collect()]
    assert any(ready), "no task of the next job ran in a worker the warm-up started"
