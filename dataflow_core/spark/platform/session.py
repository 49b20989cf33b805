"""The one way to get a SparkSession: Delta configured, cached jars, quiet local defaults.

`get_spark()` works unchanged against a cluster (`master="spark://host:7077"` or
`DATAFLOW_SPARK_MASTER`) and object storage (`DATAFLOW_WAREHOUSE=s3a://bucket/path`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dataflow_core.errors import DataflowError
from dataflow_core.spark.platform import localfs, logstore
from dataflow_core.spark.platform.jars import delta_jars
from dataflow_core.spark.platform.java import check_java
from dataflow_core.objectstore import S3Settings, is_object_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
DEFAULT_WAREHOUSE = "./warehouse"
WAREHOUSE_CONF = "spark.dataflow.warehouse"  # where tables.py finds the warehouse root
CODEGEN_CACHE_ENTRIES = "1000"
"""Generated classes Spark keeps compiled. Its default, 100, is fewer than one micro-batch
uses, so each batch would compile its classes again (and the JIT start over on them). Each
kept class holds about 0.1 MiB of metaspace, so a long `--loop` grows by at most ~100 MiB
for it. A static setting: given when the session
is built, so it wins over a value in spark-defaults.conf."""
LOCAL_SHUFFLE_PARTITIONS = "4"  # Spark's 200 default makes small local jobs crawl
LOCAL_PARALLELISM_CAP = 4
"""Partitions of a DataFrame made from local rows (a batch's record, an empty frame of a
schema) in local mode: the master's cores up to this many. Spark's default is every core,
so on a large machine a one-row frame would be scanned by dozens of empty tasks; more tasks
than cores only adds work."""
_LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


def resolve_master(master: str | None = None) -> str:
    """The argument, else `$DATAFLOW_SPARK_MASTER`, else `local[*]`."""
    return master or os.environ.get("DATAFLOW_SPARK_MASTER") or DEFAULT_MASTER


def local_cores(master: str) -> int:
    """The cores a local master runs tasks on: `local` 1, `local[N]` and `local[N,F]` N,
    `local[*]` this machine's."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    count = inside.split(",")[0].strip()
    if count == "*":
        return os.cpu_count() or 1
    return max(1, int(count)) if count.isdigit() else LOCAL_PARALLELISM_CAP  # Spark refuses such a master itself


def resolve_warehouse(warehouse: str | os.PathLike[str] | None = None) -> str:
    """The argument, else `$DATAFLOW_WAREHOUSE`, else `./warehouse`.

    Local paths become absolute (Spark resolves relative ones against odd places);
    URIs such as `s3a://bucket/lake` are kept as they are.
    """
    root = str(warehouse or os.environ.get("DATAFLOW_WAREHOUSE") or DEFAULT_WAREHOUSE)
    if "://" in root:
        return root.rstrip("/")
    if root.startswith("file:"):
        root = root[len("file:") :]
    return str(Path(root).expanduser().resolve())


def get_spark(
    app_name: str = "dataflow",
    master: str | None = None,
    warehouse: str | os.PathLike[str] | None = None,
) -> "SparkSession":
    """A SparkSession with Delta Lake's SQL extension and catalog, ready for tables by name.

    If a session is already running in this process it is reused (a JVM holds one);
    its warehouse root is switched only when `warehouse` or `$DATAFLOW_WAREHOUSE` is
    given, so a job called from a test keeps the test's warehouse.
    """
    active = _running_session()
    if active is not None:
        if warehouse is not None or os.environ.get("DATAFLOW_WAREHOUSE"):
            _switch_warehouse(active, resolve_warehouse(warehouse))
        return active
    return _new_session(app_name, master, warehouse)


def _running_session() -> "SparkSession | None":
    """The session running in this process, if any (a JVM holds one)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is not None:
        active = SparkSession.builder.getOrCreate()  # running, but created in another thread
    return active


def _switch_warehouse(active: "SparkSession", root: str) -> None:
    """Point the running session at another warehouse root; one on S3 needs a session
    started with the S3A connector."""
    if is_object_store(root) and not active.conf.get("spark.delta.logStore.s3a.impl", None):
        raise DataflowError(f"this process's Spark session was started for a local warehouse and "
                            f"cannot reach {root}: run the command in a new process")
    if is_object_store(root):
        from dataflow_core.spark.platform import s3a

        s3a.check_conditional_writes(active, root)
    active.conf.set(WAREHOUSE_CONF, root)


def _new_session(app_name: str, master: str | None, warehouse: str | os.PathLike[str] | None) -> "SparkSession":
    """A new session: Delta's jars and extension, the store's log store and file system
    settings, the local defaults."""
    from pyspark.sql import SparkSession

    check_java()
    # Executors run the model in Python (grouped by key, on Arrow batches): by default with
    # this interpreter, whose environment has pyarrow and the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = resolve_master(master)
    root = resolve_warehouse(warehouse)
    local = master.startswith("local")
    if local:  # the driver talks only to itself; skips the "hostname resolves to loopback" warning
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    jars, fs_conf = _storage(root, master)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.catalogImplementation", "in-memory")  # no Derby metastore_db
        .config("spark.sql.warehouse.dir", root)
        .config(WAREHOUSE_CONF, root)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.codegen.cache.maxEntries", CODEGEN_CACHE_ENTRIES)
        .config("spark.driver.extraJavaOptions", _driver_java_options(local))
    )
    for key, value in fs_conf.items():
        builder = builder.config(key, value)
    if local:
        builder = (
            builder.config("spark.default.parallelism", str(min(local_cores(master), LOCAL_PARALLELISM_CAP)))
            .config("spark.ui.enabled", os.environ.get("DATAFLOW_SPARK_UI", "false"))
            .config("spark.driver.memory", os.environ.get("DATAFLOW_SPARK_DRIVER_MEMORY", "2g"))
        )
    spark = builder.getOrCreate()
    if is_object_store(root):  # credentials first; then, before any table is written, the probe: a
        # store that ignores If-None-Match loses commits
        from dataflow_core.spark.platform import s3a

        set_credentials(spark, S3Settings.from_env())
        try:
            s3a.check_conditional_writes(spark, root)
        except DataflowError:
            spark.stop()
            raise
    _defaults(spark, {**TABLE_DEFAULTS, **(LOCAL_SQL_DEFAULTS if local else {})})  # one look at the user's conf
    spark.sparkContext.setLogLevel(os.environ.get("DATAFLOW_SPARK_LOG_LEVEL", "WARN"))
    _quiet_python_error_logs()
    return spark


def set_credentials(spark: "SparkSession", settings: S3Settings) -> None:
    """The object store's credentials into the running JVM's Hadoop configuration, which every
    Hadoop configuration Spark and Delta make for a job (executors' included) starts from; and
    S3A's cached file systems dropped, so that none keeps credentials from before."""
    conf = settings.credentials_conf()
    if not conf:
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        hadoop.set(key, value)
    spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem.closeAll()


def _storage(root: str, master: str) -> tuple[list[str], dict[str, str]]:
    """The jars and settings the warehouse's store needs: Delta's jars, plus for S3 the S3A
    connector, and on every store the log store that commits exclusively across processes
    (`file:` tables too on an S3 session)."""
    jars = delta_jars()
    if is_object_store(root):
        from dataflow_core.spark.platform import s3a

        store: Path | None = s3a.required_log_store()
        why = ""
        jars += s3a.connector_jars()
        fs_conf = S3Settings.from_env().spark_conf()
    else:  # local disks without a process per file, when built
        store, why = logstore.local_jar()
        fs_conf = localfs.driver_setup(master)
    jars += [str(store)] if store else []
    fs_conf.update(logstore.session_conf(store, why, logstore.named_store()))  # refuses without a store
    return jars, fs_conf


LOCAL_SQL_DEFAULTS = {
    "spark.sql.shuffle.partitions": LOCAL_SHUFFLE_PARTITIONS,
    # File scans size their splits for the cap's tasks at least, whatever the cores (this
    # setting otherwise follows the default parallelism, which the cores bound)
    "spark.sql.leafNodeDefaultParallelism": str(LOCAL_PARALLELISM_CAP),
    # Delta rebuilds a table's state (its files, its idempotent-write ids) with a small Spark
    # job after each commit, before the next idempotent write: on tables of a few thousand
    # files a second task costs more than it splits, and a micro-batch commits to seven
    # (benchmarks/results/spark-runner-history.md)
    "spark.databricks.delta.snapshotPartitions": "1",
    # VACUUM lists a table's folders with this many Spark tasks (Spark's default is
    # 10,000: 30 s of empty tasks per table on 2 cores, whatever the table's size)
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": LOCAL_SHUFFLE_PARTITIONS,
}
"""Settings of a local session where Spark's defaults suit a cluster; each is set only where
the user's Spark configuration (spark-defaults.conf, `--conf`) says nothing, so theirs wins."""


TABLE_DEFAULTS = {
    # A Delta table writes a checkpoint of its log every `checkpointInterval` commits (10 by
    # default), in the committing job, which that makes about twice as slow. A micro-batch
    # makes six or seven commits to five or six tables, so at 10 most batches would pay for
    # one; at 50 few do, and reading a log of up to 50 commits back without a checkpoint
    # costs no more than with one (figures: docs/setup.md).
    "spark.databricks.delta.properties.defaults.checkpointInterval": "50",
}
"""Delta table properties for the tables a session creates (sinks, samples), on any master;
each only where the user's Spark configuration says nothing. Tables that exist keep theirs."""


MICRO_BATCH_SQL = {
    # A micro-batch runs some thirty distinct queries over a few thousand rows each: at that
    # size Spark generating and compiling Java for them (Janino, then the JIT) costs more
    # than the generated code saves, so they run interpreted (with COMPILED_SQL where history
    # grows; figures: benchmarks/results/spark-runner-history.md). Whole-stage code generation is
    # Spark's public switch; `factoryMode` turns off the per-expression generated classes
    # too (an internal setting of Spark's, read in Spark 4.2 by
    # `CodeGeneratorWithInterpretedFallback`: every expression keeps an interpreted path).
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Settings a micro-batch run (`dataflow microbatch`, its `--loop`) holds for its own queries,
restored afterwards; each only where the user's Spark configuration says nothing, so
`--conf spark.sql.codegen.wholeStage=true` (for batches of millions of rows) wins. Its
queries over history run compiled (`COMPILED_SQL`); backfills and replays keep Spark's code
generation throughout: over millions of rows it pays for itself."""

COMPILED_SQL = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
"""Spark's own code generation (its defaults), which a micro-batch takes back, again only where
the user's Spark configuration says nothing, for its queries over tables that grow with the
pipeline's history: checking its ids against the seen ids and MERGEing its panes into the
results. There compiled code pays for itself, as the history grows."""


def unless_configured(spark: "SparkSession", settings: dict[str, str]) -> dict[str, str]:
    """These settings without those the user's Spark configuration (spark-defaults.conf,
    `--conf`) gives: theirs win."""
    given = spark.sparkContext.getConf()
    return {key: value for key, value in settings.items() if not given.contains(key)}


def _defaults(spark: "SparkSession", settings: dict[str, str]) -> None:
    for key, value in unless_configured(spark, settings).items():
        spark.conf.set(key, value)


def _quiet_python_error_logs() -> None:
    """PySpark logs every failed query as a multi-kilobyte JSON record before raising it.

    The exception itself still reaches the caller (and the CLI prints it as one line),
    so the log record is only noise; `DATAFLOW_SPARK_LOG_LEVEL=INFO` keeps it.
    """
    import logging

    from pyspark.logger import PySparkLogger

    if os.environ.get("DATAFLOW_SPARK_LOG_LEVEL", "WARN").upper() in ("INFO", "DEBUG", "ALL", "TRACE"):
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


LOCAL_JIT_OPTIONS = ("-XX:CompileThresholdScaling=10",)
"""The JIT's compile thresholds, ten times HotSpot's, for a local driver (whose JVM is also
the executors'). A micro-batch runs some forty small Spark jobs over a few thousand rows
each, through a large body of Spark, Delta and Scala code: with HotSpot's thresholds the
compiler threads compiled some 46,000 methods in a minute of `--loop` and took about 45% of
its CPU, on the cores the batches need. With these, the many methods a batch calls only a
few thousand times stay interpreted, while the hot ones (the rows' loops) still compile
(benchmarks/results/spark-runner-history.md has the measurements). A user's own JIT flags in `DATAFLOW_SPARK_JAVA_OPTS` replace these (`names_jit`);
a cluster's driver, which shares no cores with executors, keeps HotSpot's."""

_JIT_FLAGS = re.compile(r"^-X(int|comp)$|^-XX:[+-]?(Tier\w*|CompileThreshold\w*)")
"""A JVM option that sets the JIT's compile policy (its tiers or thresholds)."""


def names_jit(options: str) -> bool:
    """Whether JVM `options` set the JIT's compile policy themselves."""
    return any(_JIT_FLAGS.match(option) for option in options.split())


def _driver_java_options(local: bool) -> str:
    """Our log4j2 config, the JIT thresholds for a local driver (`LOCAL_JIT_OPTIONS`) unless
    `$DATAFLOW_SPARK_JAVA_OPTS` sets JIT flags of its own, then `$DATAFLOW_SPARK_JAVA_OPTS` (e.g.
    JIT or GC flags), plus the class-data archive `make setup` built for them (`class_archive`)."""
    from dataflow_core.spark.platform import class_archive

    users = os.environ.get("DATAFLOW_SPARK_JAVA_OPTS", "")
    jit = LOCAL_JIT_OPTIONS if local and not names_jit(users) else ()
    options = [f"-Dlog4j2.configurationFile={_LOG4J_CONFIG}", *jit, *users.split()]
    return " ".join(options + class_archive.driver_options(users))


def warehouse_root(spark: "SparkSession") -> str:
    """The warehouse root the session was created (or last switched) with."""
    return spark.conf.get(WAREHOUSE_CONF, None) or resolve_warehouse(None)
