"""What the JVM that writes the driver's class-data archive runs (`platform.class_archive`,
`make setup`): a small backfill and two micro-batches, the classes every driver loads.
Run as `python -m dataflow_core.sample.class_archive_workload` by `class_archive.build`."""

from __future__ import annotations

import shutil
import tempfile


def run() -> None:
    """What drivers do, in small: write a sample, backfill it, two micro-batches (the second
    MERGEs into tables that exist). The JVM writes the archive as it exits, so this waits
    for it to exit."""
    from dataflow_core.sample import SampleConfig
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.session import get_spark

    warehouse = tempfile.mkdtemp(prefix="dataflow-class-archive-")
    try:
        spark = get_spark("dataflow-class-archive", master="local[2]", warehouse=warehouse)
        for seed, mode in ((1, "overwrite"), (2, "append")):
            write_sample(spark, SampleConfig(rows=400, seed=seed, span_hours=24), table="video_events",
                         progress=lambda _m: None, mode=mode)
            runs = [run_backfill(spark, "billing", "2024-05-01", "2024-05-02")] if seed == 1 else []
            runs.append(run_microbatch(spark, "ad_sessions"))
            if not all(r.ledger_ok for r in runs):
                raise SystemExit("a run's ledger did not balance: the archive is not written")
        jvm = spark.sparkContext._gateway.proc  # the JVM PySpark launched
        spark.stop()
        jvm.stdin.close()  # PySpark's gateway server exits when its stdin closes
        jvm.wait(timeout=300)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


if __name__ == "__main__":
    run()
