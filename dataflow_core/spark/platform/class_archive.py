"""The driver JVM's class-data-sharing archive: Spark's and Delta's classes mapped, not loaded.

A cold driver loads, parses and verifies some 20,000 classes from jars before its first Delta
commit, seconds of every command that starts Spark: every Airflow task, every one-process
micro-batch, every backfill. Java's class-data sharing (a dynamic archive, JDK 13 and later)
keeps those classes in a file that later JVMs map instead.

`make setup` builds the archive (`python -m dataflow_core.spark.platform.class_archive`): one
JVM runs a small backfill and two micro-batches over a sample (`sample.class_archive_workload`)
under `-XX:ArchiveClassesAtExit` and writes the classes they loaded as it exits. `get_spark`
then hands `-XX:SharedArchiveFile` to every driver it starts (`driver_options`).

An archive belongs to one Java build, one set of jars and one set of JVM flags (the collector,
say): its folder is named by a digest of all three (`archive_path`), so an upgrade of Java,
PySpark or Delta, or other `DATAFLOW_SPARK_JAVA_OPTS`, looks for an archive of its own and, until
`make setup` builds it, runs as without one. A JVM whose class path differs from the archive's
(a cluster's driver, which has no local file system jar; `SPARK_CONF_DIR` on the class path)
maps nothing and runs as without it, silently. Flags of the user's own that name an archive, or
`-Xshare`, win: nothing is added then; `DATAFLOW_CLASS_ARCHIVE=off` leaves the archive out (a
measurement of what it saves, a JVM suspected of mapping it wrongly).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from dataflow_core.spark.platform.jars import cache_dir, spark_home

QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
"""A JVM that cannot map the archive says so on stdout; it runs as it would without one."""
ARCHIVE_NAME = "driver.jsa"
_USERS_OWN = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
SWITCH = "DATAFLOW_CLASS_ARCHIVE"
WORKLOAD = "dataflow_core.sample.class_archive_workload"
"""What the archiving JVM runs: the sample layer's, above spark/ (it writes a sample and runs
jobs), named here, not imported."""


def archive_path(java_options: str) -> Path:
    """Where the archive of this Java, these jars (Spark's, Delta's, the local file system's and
    log stores') and these JVM flags lives."""
    from dataflow_core.spark.platform import localfs, logstore
    from dataflow_core.spark.platform.java import java_executable
    from dataflow_core.spark.platform.jars import read_manifest

    java = Path(java_executable()).resolve()
    delta = read_manifest(cache_dir())  # not resolved here: a session start resolves them, or says why not
    ours = [Path(j) for j in (delta.jars if delta else [])]
    ours += [j for j in (localfs.built_jar(), logstore.built_jar()) if j]
    digest = hashlib.sha256(f"{java}:{_stamp(java)}\n{java_options.strip()}\n".encode())
    for jar in [*sorted((spark_home() / "jars").glob("*.jar")), *ours]:
        digest.update(f"{jar}:{_stamp(jar)}\n".encode())
    return cache_dir() / "jvm-archive" / digest.hexdigest()[:16] / ARCHIVE_NAME


def _stamp(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{int(st.st_mtime)}"


def driver_options(java_options: str) -> list[str]:
    """The flags that map the archive for a driver started with `java_options`, when `make
    setup` built it; none when it did not, when the user's flags name an archive, or when
    `$DATAFLOW_CLASS_ARCHIVE` is `off`."""
    if os.environ.get(SWITCH, "on").lower() == "off" or any(flag in java_options for flag in _USERS_OWN):
        return []
    try:
        path = archive_path(java_options)
    except Exception:  # noqa: BLE001 - no Java or no jars yet: the session start says which, once
        return []
    return [f"-XX:SharedArchiveFile={path}", *QUIET] if path.is_file() else []


def build(java_options: str | None = None, submit_args: str | None = None) -> tuple[Path | None, str]:
    """Build the archive for a driver started with `java_options` (default:
    `$DATAFLOW_SPARK_JAVA_OPTS`) and `submit_args` (`PYSPARK_SUBMIT_ARGS` of the workload's
    process), unless it exists; (its path, or None where it could not be built; one line
    saying what happened). A failed build leaves no file: drivers run without an archive."""
    java_options = os.environ.get("DATAFLOW_SPARK_JAVA_OPTS", "") if java_options is None else java_options
    path = archive_path(java_options)
    if path.is_file():
        return path, f"JVM class archive up to date: {path}"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{ARCHIVE_NAME}.{os.getpid()}.partial")
    flags = [java_options, f"-XX:ArchiveClassesAtExit={partial}", *QUIET]
    env = {**os.environ, "DATAFLOW_SPARK_JAVA_OPTS": " ".join(flags).strip()}
    if submit_args is not None:
        env["PYSPARK_SUBMIT_ARGS"] = submit_args
    env.pop("SPARK_CONF_DIR", None)  # a folder on the class path that is not empty cannot be archived
    started = time.monotonic()
    log = path.with_name("build.log")
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "-m", WORKLOAD], env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        return None, f"warning: JVM class archive not built (drivers start without it): see {log}"
    partial.rename(path)  # whole or absent: a driver never maps a file being written
    return path, (f"JVM class archive built in {time.monotonic() - started:.0f} s: {path} "
                  f"({path.stat().st_size // 2**20} MB)")


def main() -> int:
    """`make setup` step: build the archive unless it exists; one line either way."""
    path, said = build()
    print(said, file=sys.stdout if path else sys.stderr)
    return 0  # without an archive drivers start slower, not wrong


if __name__ == "__main__":
    sys.exit(main())
