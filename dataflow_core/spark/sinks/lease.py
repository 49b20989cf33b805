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
        delete_file(self.spark, self.path)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - a missed beat; the next one tries again
                pass

    def _write(self) -> None:
        write_text(self.spark, self.path, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                      "at": time.time()}))


def write_text(spark: "SparkSession", where: str, text: str) -> None:
    """File `where` (a warehouse path: a folder or object storage) holding `text`, replaced whole."""
    fs, path = _fs(spark, where)
    out = fs.create(path, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()


def read_text(spark: "SparkSession", where: str) -> str | None:
    """What file `where` holds (None: there is no such file)."""
    fs, path = _fs(spark, where)
    if not fs.exists(path):
        return None
    try:
        stream = fs.open(path)
    except Exception as exc:  # deleted since: its writer let go
        if "FileNotFound" in str(exc):
            return None
        raise
    try:
        return jvm_class(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8")
    finally:
        stream.close()


def delete_file(spark: "SparkSession", where: str) -> None:
    fs, path = _fs(spark, where)
    fs.delete(path, False)


def fresh_lease(spark: "SparkSession", pipeline: str) -> dict | None:
    """The pipeline's lease while its heartbeat is fresh (with `age`, in seconds), else None."""
    text = read_text(spark, lease_path(spark, pipeline))
    if text is None:
        return None
    try:
        lease = json.loads(text)
    except ValueError:
        return {"pid": "?", "host": "?", "age": 0.0}  # half-written: the loop is writing it now
    age = time.time() - float(lease.get("at", 0))
    return {**lease, "age": age} if age < LEASE_TTL_S else None


def _fs(spark: "SparkSession", where: str):
    path = jvm_class(spark, "org.apache.hadoop.fs.Path")(where)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path
