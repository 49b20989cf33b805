"""A `--loop`'s lease on its pipeline: a small file in the warehouse that the loop rewrites
every few seconds (its heartbeat) and deletes when it stops.

Between two batches a loop holds no batch record, so `dataflow_batches` alone cannot tell
that it runs; `dataflow reset` reads the lease and refuses while its heartbeat is fresh
(a reset under a running loop would leave the loop's next batch with empty state and no
seen ids). A loop killed without cleaning up leaves a lease that goes stale after
`LEASE_TTL_S`, so a crash never wedges the pipeline. Written through Hadoop's FileSystem,
like the tables, so it works on a local folder and on object storage alike.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from dataflow_core.spark.platform.tables import jvm_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HEARTBEAT_S = 5.0
LEASE_TTL_S = 30.0
"""A lease whose heartbeat is older than this is stale: its loop is gone."""


def lease_path(spark: "SparkSession", pipeline: str) -> str:
    from dataflow_core.spark.platform.session import warehouse_root

    return f"{warehouse_root(spark).rstrip('/')}/_dataflow_leases/{pipeline}.json"


class Lease:
    """Held from `__enter__` to `__exit__`, with a heartbeat thread in between."""

    def __init__(self, spark: "SparkSession", pipeline: str):
        self.spark, self.pipeline = spark, pipeline
        self.path = lease_path(spark, pipeline)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{pipeline}", daemon=True)

    def __enter__(self) -> "Lease":
        self._write()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_S * 2)
        fs, path = _fs(self.spark, self.path)
        fs.delete(path, False)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - a missed beat; the next one tries again
                pass

    def _write(self) -> None:
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time()})
        fs, path = _fs(self.spark, self.path)
        out = fs.create(path, True)
        try:
            out.write(bytearray(body.encode()))
        finally:
            out.close()


def fresh_lease(spark: "SparkSession", pipeline: str) -> dict | None:
    """The pipeline's lease while its heartbeat is fresh (with `age`, in seconds), else None."""
    fs, path = _fs(spark, lease_path(spark, pipeline))
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = jvm_class(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8")
    finally:
        stream.close()
    try:
        lease = json.loads(text)
    except ValueError:
        return {"pid": "?", "host": "?", "age": 0.0}  # half-written: the loop is writing it now
    age = time.time() - float(lease.get("at", 0))
    return {**lease, "age": age} if age < LEASE_TTL_S else None


def _fs(spark: "SparkSession", where: str):
    path = jvm_class(spark, "org.apache.hadoop.fs.Path")(where)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path
