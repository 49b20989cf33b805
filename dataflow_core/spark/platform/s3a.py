"""Spark on `s3a://`: the S3A connector's jars and the product's own Delta log store for S3.

The connector. pyspark ships Hadoop's client (3.5.0) without `hadoop-aws`, and `hadoop-aws`
depends on the AWS SDK's `bundle`, one 686 MB jar of every AWS service. The set here is
`hadoop-aws` of pyspark's Hadoop plus the few SDK modules S3A uses (`s3`,
`s3-transfer-manager` and what they need), with the bundle excluded: 36 jars, 12.9 MB. They are
pinned and checked like Delta's (`s3a-jars.lock` beside this module, written by `make lock`)
and fetched into `.cache/` the first time a session's warehouse is on S3, not by `make setup`:
a warehouse on a local folder never needs them.

The log store. Delta's default for S3 (`S3SingleDriverLogStore`) is safe with one driver
only: two drivers can both write version N of a table's log, and one commit silently
disappears (delta-io/delta#1830). The product's `ConditionalPutLogStore` (built with the
`file:` store by `logstore.py`) writes each N.json with S3's conditional create
(`If-None-Match: *`), so the second driver is told the version is taken and Delta retries; a
session on S3 loads it through `spark.jars` and names it as Delta's log store for `s3a://` and
`s3://` (`dataflow_core.objectstore.S3Settings.spark_conf`).

The store. That log store is safe only on a store that honours `If-None-Match: *`; one that
ignores it answers both drivers 200 and a commit is lost. So a session probes each S3
warehouse once, before any table is written (`check_conditional_writes`): two conditional
creates of one probe object through the log store's own S3 client, the second of which must be
refused (412); a store that lets it through is refused in one line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.paths import setup_step
from dataflow_core.spark.platform import localfs, logstore
from dataflow_core.objectstore import LOG_STORE_CLASS, S3Settings
from dataflow_core.spark.platform.jars import JarSet, cache_dir, delta_jars, resolve_jars, write_lock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCK_FILE = Path(__file__).with_name("s3a-jars.lock")
MANIFEST_NAME = "s3a-jars.json"
AWS_SDK_VERSION = "2.35.4"
"""The AWS SDK v2 that Hadoop 3.5.0's `hadoop-aws` was built with (hadoop-project's
`aws-java-sdk-v2.version`); its modules must be that version, not newer."""
SDK_MODULES = ("s3", "s3-transfer-manager")
"""What S3A calls; everything else comes as their dependencies (29 more modules)."""


def hadoop_version() -> str:
    """The Hadoop version pyspark ships (from its `hadoop-client-api` jar)."""
    match = re.search(r"hadoop-client-api-(\d[\w.]*)\.jar$", localfs._hadoop_jar().name)
    if match is None:
        raise DataflowError(f"cannot tell pyspark's Hadoop version from {localfs._hadoop_jar().name}")
    return match.group(1)


def jar_set() -> JarSet:
    """`hadoop-aws` for pyspark's Hadoop and the SDK modules, without the SDK's bundle."""
    coordinates = [f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"]
    coordinates += [f"software.amazon.awssdk:{module}:{AWS_SDK_VERSION}" for module in SDK_MODULES]
    return JarSet("S3A connector jars", ",".join(coordinates), LOCK_FILE, MANIFEST_NAME,
                  excludes="software.amazon.awssdk:bundle,commons-logging:commons-logging")  # Delta's set has it


def connector_jars() -> list[str]:
    """The connector's jar files, fetched into the cache the first time."""
    return delta_jars(jar_set=jar_set())


def required_log_store() -> Path:
    """The log stores' jar (`logstore.py`), which a session on S3 must load, built if missing.

    Raises DataflowError (one line) without the log store: a warehouse on S3 without it would
    lose commits whenever two drivers write one table, so it is refused, not used unsafely."""
    try:
        store = logstore.build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:200]
        raise DataflowError(f"the S3 log store did not build ({detail}); run {setup_step(logstore.__name__)}") from None
    if store is None:
        raise DataflowError("a warehouse on S3 needs the product's S3 log store, compiled with a JDK's "
                            "javac on first use: install a JDK (e.g. openjdk-17-jdk-headless) "
                            f"and run {setup_step(logstore.__name__)}")
    return store


_probed: set[tuple[str | None, str]] = set()
"""(endpoint, warehouse) pairs this process has probed and found safe."""


def check_conditional_writes(spark: "SparkSession", root: str, settings: S3Settings | None = None) -> None:
    """Refuse (DataflowError, one line) a warehouse on S3 whose store does not refuse a second
    conditional create of one object; once per endpoint and warehouse in a process. A user
    who names another S3 log store (`DATAFLOW_S3_LOG_STORE`) has chosen its rules: no probe."""
    settings = settings or S3Settings.from_env()
    if settings.log_store != LOG_STORE_CLASS or (settings.endpoint, root) in _probed:
        return

    from py4j.protocol import Py4JJavaError

    try:
        wrong = getattr(spark._jvm, LOG_STORE_CLASS).probe(  # once a session: no cached lookup
            root, spark.sparkContext._jsc.hadoopConfiguration())
    except Py4JJavaError as exc:
        detail = " ".join(str(exc.java_exception.toString()).split())[:300]
        raise DataflowError(f"cannot write to {root} at {settings.endpoint or 'AWS'} ({detail}): check the "
                            "bucket, AWS_ENDPOINT_URL and the credentials (docs/deployment.md)") from None
    if wrong:
        raise DataflowError(
            f"the S3 store at {settings.endpoint or 'AWS'} is unsafe for commits to {root}: {wrong}; with it two "
            f"drivers can both commit one table version and one commit is lost: use a store that honours "
            f"conditional writes, or DATAFLOW_S3_LOG_STORE=io.delta.storage.S3SingleDriverLogStore with ONE "
            f"writing driver per table (docs/deployment.md)")
    _probed.add((settings.endpoint, root))


def main(argv: list[str] | None = None) -> int:
    """`--fetch` caches the connector's jars, `--lock` resolves them with Ivy and writes the
    lock (`make lock`). (The log store is built by `python -m dataflow_core.spark.platform.logstore`.)"""
    parser = argparse.ArgumentParser(prog="python -m dataflow_core.spark.platform.s3a",
                                     description="Cache or lock the S3A connector's jars.")
    parser.add_argument("--fetch", action="store_true", help="cache the connector's jars now")
    parser.add_argument("--lock", action="store_true", help=f"resolve with Ivy and write {LOCK_FILE.name}")
    args = parser.parse_args(argv)
    try:
        if args.lock:
            manifest = resolve_jars(jar_set=jar_set(), force=True, use_lock=False)
            write_lock(manifest, LOCK_FILE)
            print(f"wrote {LOCK_FILE} ({len(manifest.jars)} jars)", file=sys.stderr)
        elif args.fetch:
            print(f"S3A connector: {len(connector_jars())} jars cached in {cache_dir()}")
    except (DataflowError, OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:300]
        print(f"error: the S3A connector's jars: {detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
