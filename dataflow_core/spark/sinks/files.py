"""Small files in the warehouse beside the tables (heartbeats, the loop's lock), written
through the same layers as the tables, so they work on a local folder and on object storage
alike: Hadoop's FileSystem for reads, replacing writes and deletes, and Delta's own log store
for the one write that must be exclusive (`create_exclusive`).

Why the log store: a commit of a Delta table is the exclusive create of its next log file,
and the product's log stores make that create exclusive across processes on every store it
supports (`platform.logstore`: a hard link on `file:`, a PUT with `If-None-Match: *` on S3).
A lock file created by the same call is exactly as exclusive as a commit, with no second
mechanism to keep right (Hadoop's `create(path, overwrite=false)` checks and then creates on
a local disk, and S3A makes it conditional only through the builder the log store uses).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from dataflow_core.spark.platform.tables import jvm_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def write_text(spark: "SparkSession", where: str, text: str) -> None:
    """File `where` (a warehouse path: a folder or object storage) holding `text`, replaced
    whole: a reader finds the old text or the new, never no file or half of one. An object
    store's PUT replaces an object at once; on a folder, where Hadoop's create would delete
    the file first, the text is written beside it and renamed over it (`_plain_fs`)."""
    fs, path, local = _plain_fs(spark, where)
    target = jvm_class(spark, "org.apache.hadoop.fs.Path")(f"{where}.{uuid.uuid4().hex}.tmp") if local else path
    out = fs.create(target, True)
    try:
        out.write(bytearray(text.encode()))
    finally:
        out.close()
    if local and not fs.rename(target, path):
        fs.delete(target, False)
        raise OSError(f"could not replace {where} (rename of {target} refused)")


def create_exclusive(spark: "SparkSession", where: str, text: str) -> bool:
    """File `where` created holding `text` (one line) unless a file of that name exists:
    True if this call made it. Of any number of processes creating it at once, on any
    machine, exactly one gets True (see the module docstring); the file appears whole."""
    fs, path = _fs(spark, where)
    fs.mkdirs(path.getParent())  # the local log store writes into an existing folder only
    lines = jvm_class(spark, "java.util.ArrayList")()
    lines.add(text)
    iterator = jvm_class(spark, "scala.jdk.javaapi.CollectionConverters").asScala(lines.iterator())
    try:
        _log_store(spark).write(path, iterator, False, spark.sparkContext._jsc.hadoopConfiguration())
    except Exception as exc:  # noqa: BLE001 - py4j's error: the Java exception's class says which
        if "FileAlreadyExistsException" in _java_class(exc):
            return False
        raise
    return True


def read_text(spark: "SparkSession", where: str) -> str | None:
    """What file `where` holds (None: there is no such file)."""
    fs, path, _local = _plain_fs(spark, where)
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


_stores: dict[int, Any] = {}


def _log_store(spark: "SparkSession") -> Any:
    """Delta's log store of this session (the one its tables commit with; it picks each
    path's store by scheme), made once per JVM."""
    key = id(spark._jvm)
    if key not in _stores:
        _stores[key] = jvm_class(spark, "org.apache.spark.sql.delta.storage.LogStore").apply(spark._jsparkSession)
    return _stores[key]


def _java_class(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)
    names = []
    while java is not None and len(names) < 8:
        names.append(str(java.getClass().getName()))
        java = java.getCause()
    return " ".join(names) or str(exc)


def _fs(spark: "SparkSession", where: str):
    path = jvm_class(spark, "org.apache.hadoop.fs.Path")(where)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def _plain_fs(spark: "SparkSession", where: str) -> tuple[Any, Any, bool]:
    """`_fs` without Hadoop's checksum layer on a local folder. That layer keeps a `.crc` file
    beside each file and renames the two one after the other, so a reader of a file being
    replaced (a heartbeat, rewritten every few seconds) could meet the new text with the old
    checksum and fail; a plain rename replaces the file at once, and an open file is read
    whole whatever replaces it. The texts here are JSON lines, checked by their readers. Also
    says whether `where` is on a local folder."""
    fs, path = _fs(spark, where)
    if str(fs.getScheme()) == "file":  # Hadoop's LocalFileSystem, or the product's (`platform.localfs`)
        return fs.getRawFileSystem(), path, True
    return fs, path, False
