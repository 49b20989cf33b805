"""The suite's JVMs: their flags, and a class-data-sharing archive of what Spark and Delta load.

A cold Spark driver loads, parses and verifies some 20k classes from jars before its first
Delta commit. The suite starts about thirty such JVMs (test workers, CLI runs, Airflow tasks,
killed runs, a cluster's), so `make test` first runs one JVM through a small backfill and
micro-batch with `-XX:ArchiveClassesAtExit` (`python -m tests.jvm_archive`), and
tests/conftest.py hands `-XX:SharedArchiveFile` to every driver JVM: they map those classes
instead (a cold two-commit job on 2 cores: about 30 s -> 19 s).

The archive is rebuilt when its key changes (the Java build, the jars, the flags). A JVM
whose class path differs from the archive's (a job with its own `SPARK_CONF_DIR`, whose
folder Spark puts on the class path) runs as without it, silently. Without an archive
(`pytest` run directly, before any `make test`) the flags are the same minus that one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "jvm-archive"
ARCHIVE = CACHE / "spark.jsa"
KEY_FILE = CACHE / "key"
SPARK_DEFAULTS = Path(__file__).with_name("spark-conf") / "spark-defaults.conf"

# The quick JIT only, for the JVMs that live for one command (CLI runs, Airflow tasks,
# killed runs): on data of a few rows a query is planned once and run on ten rows, and the
# optimizing JIT's compile threads would take the other test worker's core for code the
# command ends before it pays. A test worker's own session lives for the whole suite and
# runs the same Spark and Delta code paths thousands of times; it gets the optimizing JIT
# too (`for_long_lived_jvm`): after its first minute, warm micro-batches take about a fifth
# less wall time.
# The quick JIT alone gets a 48 MB code cache, which Spark and Delta's many query shapes
# fill: the JVM then spends its time evicting and recompiling (about 10% of a test session's
# CPU), hence the larger cache that is never flushed. The archive must be written and read
# under the same collector.
QUICK_JIT = "-XX:TieredStopAtLevel=1"
JAVA_OPTS = f"{QUICK_JIT} -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m -XX:-UseCodeCacheFlushing"
# A JVM that cannot use the archive says so on stdout; it runs as it would without one.
USE_ARCHIVE = f"-XX:SharedArchiveFile={ARCHIVE} -Xlog:cds=off -Xlog:cds+dynamic=off"
# The suite's Spark settings (tests/spark-conf/spark-defaults.conf) reach every driver this
# way and not through SPARK_CONF_DIR: Spark puts that folder on the class path, and a JVM
# refuses to archive classes for a class path holding a folder that is not empty.
SUBMIT_ARGS = f"--properties-file {SPARK_DEFAULTS} pyspark-shell"


def key() -> str:
    """What the archive depends on: the Java build, every jar a driver loads, the flags."""
    import pyspark

    from dataflow_core.spark.platform import localfs, logstore
    from dataflow_core.spark.platform.jars import delta_jars

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar")) + [Path(j) for j in delta_jars()]
    jars += [j for j in [localfs.built_jar(), logstore.built_jar()] if j is not None]  # what local drivers load
    listing = "\n".join(f"{j}:{j.stat().st_size}:{int(j.stat().st_mtime)}" for j in jars)
    return hashlib.sha256("\n".join([java, listing, JAVA_OPTS, SPARK_DEFAULTS.read_text()]).encode()).hexdigest()[:16]


def java_options(long_lived: bool = False) -> str:
    """The drivers' flags: JAVA_OPTS (without QUICK_JIT for a JVM that lives for the whole
    suite), plus the archive when one was built. Its key is not recomputed here (that would
    start `java` in every test process): a JVM checks the jars of the archive's class path
    itself and runs without an archive they no longer match."""
    options = JAVA_OPTS.replace(f"{QUICK_JIT} ", "") if long_lived else JAVA_OPTS
    if ARCHIVE.exists() and KEY_FILE.exists():
        return f"{options} {USE_ARCHIVE}"
    return options


def for_long_lived_jvm() -> dict[str, str]:
    """The environment for a process whose Spark driver serves the jobs of a whole suite (a
    test worker's session): the optimizing JIT as well. Empty if the developer set flags of
    their own, which win. (Not the Airflow process of test_dags_dataflow's seven commands:
    its three minutes are too short, measured 222 s -> 265 s with the optimizing JIT.)"""
    if os.environ.get("DATAFLOW_SPARK_JAVA_OPTS") != java_options():
        return {}
    return {"DATAFLOW_SPARK_JAVA_OPTS": java_options(long_lived=True)}


def _workload() -> None:
    """What the suite's JVMs do, in small: write a sample, backfill it, one micro-batch. (Not
    the gates: the few JVMs that start to run them load their classes themselves, about a
    CPU second each, where this build, which the integration tests wait for, would take
    12 s longer.) The JVM writes the archive as it exits, so this waits for it to exit."""
    from dataflow_core.sample import SampleConfig
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.jobs.backfill import run_backfill
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.session import get_spark

    warehouse = tempfile.mkdtemp(prefix="jvm-archive-")
    try:
        spark = get_spark("jvm-archive", master="local[2]", warehouse=warehouse)
        write_sample(spark, SampleConfig(rows=400, seed=1, span_hours=24), table="video_events",
                     progress=lambda _m: None)
        assert run_backfill(spark, "billing", "2024-05-01", "2024-05-02").ledger_ok
        assert run_microbatch(spark, "ad_sessions").ledger_ok
        jvm = spark.sparkContext._gateway.proc  # the JVM PySpark launched
        spark.stop()
        jvm.stdin.close()  # PySpark's gateway server exits when its stdin closes
        jvm.wait(timeout=300)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def build() -> int:
    """Build the archive unless the one there has this key; one line either way."""
    wanted = key()
    if ARCHIVE.exists() and KEY_FILE.exists() and KEY_FILE.read_text().strip() == wanted:
        print(f"JVM class archive up to date: {ARCHIVE}")
        return 0
    CACHE.mkdir(parents=True, exist_ok=True)
    KEY_FILE.unlink(missing_ok=True)
    for old in CACHE.glob("spark*.jsa"):  # this one, or one an interrupted build left
        old.unlink()
    partial = CACHE / f"spark.{os.getpid()}.jsa"
    env = {**os.environ, "DATAFLOW_SPARK_JAVA_OPTS": f"{JAVA_OPTS} -XX:ArchiveClassesAtExit={partial}",
           "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS}
    env.pop("SPARK_CONF_DIR", None)
    print("building the JVM class archive (a small backfill, once per machine and jar set) ...", flush=True)
    started = time.monotonic()
    log = CACHE / "build.log"
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", "tests.jvm_archive", "--workload"], env=env, cwd=ROOT,
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        print(f"JVM class archive not built (the suite runs without it): see {log}", file=sys.stderr)
        return 0  # a slower suite, not a failed one
    partial.rename(ARCHIVE)
    KEY_FILE.write_text(wanted + "\n")
    print(f"JVM class archive built in {time.monotonic() - started:.0f} s: {ARCHIVE} "
          f"({ARCHIVE.stat().st_size // 2**20} MB)")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--workload"]:
        _workload()
    else:
        sys.exit(build())
