"""The product's Delta log stores, one jar: commits exclusive across processes on every store.

Delta commits version N of a table by creating `_delta_log/N.json`, and its whole protocol
rests on that create failing when N.json exists. Its own log stores make the create
exclusive only inside one JVM (on `file:` and on S3), so two driver processes committing one
version at once can both succeed and one commit is lost. `logstore_java/` holds the two that
replace them (docs/deployment.md, "Commits from many drivers"):

- `io.dataflow.local.HardLinkLogStore` for `file:` (local folders, shared mounts): N.json is a
  hard link to a finished temporary file, and link(2) fails when N.json exists;
- `io.dataflow.s3.ConditionalPutLogStore` for `s3a:`/`s3:`: N.json is one PUT with
  `If-None-Match: *` (`dataflow_core.objectstore` names it).

The same jar's `io.dataflow.streaming.ExclusiveCheckpointFileManager` makes a stream's
checkpoint files (a batch's offsets, its commit) with the same exclusive create, so two
processes planning one stream batch cannot both make it (`session_conf`).

`make setup` compiles them with the JDK's `javac` into `.cache/` (`localfs.compile_jar`);
every session loads the jar through `spark.jars` (Delta's classes, which they extend, are
loaded there too) and names the `file:` store (`session_conf`). Without a JDK a local
warehouse keeps Delta's store, exclusive within one process only, and a warehouse on S3 is
refused (`s3a.session_jars`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from dataflow_core.spark.platform import localfs
from dataflow_core.spark.platform.jars import cache_dir, delta_jars

SOURCES = Path(__file__).with_name("logstore_java")
JAR_NAME = "dataflow-logstores.jar"
LOCAL_LOG_STORE = "io.dataflow.local.HardLinkLogStore"
CHECKPOINT_MANAGER = "io.dataflow.streaming.ExclusiveCheckpointFileManager"
LOCAL_LOG_STORE_ENV = "DATAFLOW_LOCAL_LOG_STORE"
"""Another class for `file:` tables, e.g. `io.delta.storage.HDFSLogStore` (Delta's default)
on a mount without hard links: then ONE writing process per table only."""


def _delta_storage_jar() -> str:
    found = [jar for jar in delta_jars() if re.search(r"delta-storage-[\d.]+\.jar$", jar)]
    if not found:
        raise FileNotFoundError("no delta-storage jar among Delta's jars")
    return found[0]


def jar_path() -> Path:
    """Where the jar for these sources, this Hadoop and this Delta lives (a new folder when any changes)."""
    digest = hashlib.sha256((localfs._hadoop_jar().name + Path(_delta_storage_jar()).name).encode())
    for source in sorted(SOURCES.rglob("*.java")):
        digest.update(source.read_bytes())
    return cache_dir() / "logstores" / digest.hexdigest()[:12] / JAR_NAME


def build_jar() -> Path | None:
    """The log stores' jar, compiled unless it is there; None without a JDK."""
    target = jar_path()
    if target.is_file():
        return target
    spark_jars = f"{localfs.spark_home() / 'jars'}/*"  # the checkpoint manager extends Spark's
    return localfs.compile_jar(sorted(SOURCES.rglob("*.java")), [localfs._hadoop_jar(), _delta_storage_jar(), spark_jars],
                               target)


def built_jar() -> Path | None:
    """The jar, if `make setup` (or an earlier session) built it; never compiles."""
    try:
        jar = jar_path()
    except FileNotFoundError:
        return None
    return jar if jar.is_file() else None


def session_conf(jar: Path | None) -> dict[str, str]:
    """Delta's log store for `file:` tables and the streams' checkpoint files
    (`CHECKPOINT_MANAGER`) when the jar is loaded, else nothing (Delta's and Spark's own)."""
    store = os.environ.get(LOCAL_LOG_STORE_ENV) or (LOCAL_LOG_STORE if jar is not None else None)
    conf = {"spark.delta.logStore.file.impl": store} if store else {}
    if jar is not None and store == LOCAL_LOG_STORE:  # a mount without hard links keeps Spark's create
        conf["spark.sql.streaming.checkpointFileManagerClass"] = CHECKPOINT_MANAGER
    return conf


def main() -> int:
    """`make setup` step: build the jar where a JDK can; say which commits are exclusive."""
    try:
        jar = build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:300]
        print(f"warning: the log stores did not build ({detail}); a warehouse on S3 is refused and local "
              "commits are exclusive within one process only", file=sys.stderr)
        return 0
    if jar is None:
        print("no JDK (javac) found: a warehouse on S3 is refused and local commits are exclusive within one "
              "process only (the product's log stores need a JDK)")
    else:
        print(f"log stores (hard-link commits on file:, conditional puts on S3): {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
