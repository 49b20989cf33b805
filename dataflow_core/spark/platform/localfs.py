"""Local disks without a process per file: Hadoop's local file system, minus its chmod and
readlink processes.

Where libhadoop's native code is missing (pyspark ships none), Hadoop's local file system
starts a `chmod` process for every file and folder it creates and a `readlink` for every
link status it reads: two per rename through FileContext, which is how Delta commits to a
local table. A micro-batch of a few Delta commits starts thousands of them; each forks the
driver's JVM. The classes in `localfs_java/` do both with java.nio and leave everything
else to Hadoop (the processes and CPU they save: docs/setup.md).

`make setup` compiles them with the JDK's `javac` into the cache (`python -m
dataflow_core.spark.platform.localfs`; `dataflow_core.paths.cache_dir`), or the first local
session does; a local session (`get_spark`) puts the jar on its
JVM's class path and names the classes as the `file:` scheme's file systems
(`driver_setup`). Without a JDK (a JRE has no javac) Hadoop's own classes serve: slower,
with the same results. Clusters are left alone: their executors keep Hadoop's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dataflow_core.spark.platform.jars import cache_dir, spark_home

SOURCES = Path(__file__).with_name("localfs_java")
FILE_SYSTEM = "io.dataflow.localfs.NioLocalFileSystem"
"""`fs.file.impl` (the FileSystem API: Spark, Parquet, Delta's data files)."""
ABSTRACT_FILE_SYSTEM = "io.dataflow.localfs.NioLocalFs"
"""`fs.AbstractFileSystem.file.impl` (the FileContext API: Delta's log commits)."""
JAR_NAME = "dataflow-localfs.jar"


def _hadoop_jar() -> Path:
    found = sorted((spark_home() / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise FileNotFoundError(f"no hadoop-client-api jar in {spark_home() / 'jars'}")
    return found[-1]


def jar_path() -> Path:
    """Where the jar for these sources and this Hadoop lives (a new folder when either changes)."""
    digest = hashlib.sha256(_hadoop_jar().name.encode())
    for source in sorted(SOURCES.glob("*.java")):
        digest.update(source.read_bytes())
    return cache_dir() / "localfs" / digest.hexdigest()[:12] / JAR_NAME


def built_jar() -> Path | None:
    """The jar for these sources and this Hadoop in the cache, if it has been built."""
    try:
        jar = jar_path()
    except FileNotFoundError:  # no Hadoop jar to build against
        return None
    return jar if jar.is_file() else None


def build_jar() -> Path | None:
    """The jar at `jar_path`, compiled unless it is there; None when there is no JDK to
    compile with."""
    target = jar_path()
    if target.is_file():
        return target
    return compile_jar(sorted(SOURCES.glob("*.java")), [_hadoop_jar()], target)


def compile_jar(sources: list[Path], class_path: list[Path | str], target: Path) -> Path | None:
    """Compile `sources` against `class_path` with the JDK's javac into the jar `target`;
    None when there is no JDK. (The S3 log store, `s3a.py`, is built the same way.)"""
    javac, jar = _jdk_tool("javac"), _jdk_tool("jar")
    if javac is None or jar is None:
        return None
    print(f"dataflow: compiling the product's {target.name} into {target.parent} (once for this version)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp) / "classes"
        subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(classes),
                        "-cp", os.pathsep.join(map(str, class_path)), *map(str, sources)],
                       check=True, capture_output=True, text=True)
        built = Path(tmp) / target.name
        subprocess.run([jar, "cf", str(built), "-C", str(classes), "."], check=True, capture_output=True, text=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(built, target)  # whole or not at all, whoever builds at the same moment
    return target


def _jdk_tool(name: str) -> str | None:
    """A JDK tool of JAVA_HOME's JDK, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


CONF = {"spark.hadoop.fs.file.impl": FILE_SYSTEM, "spark.hadoop.fs.AbstractFileSystem.file.impl": ABSTRACT_FILE_SYSTEM}
"""The Spark settings that put the classes under the `file:` scheme."""


def driver_setup(master: str) -> dict[str, str]:
    """For a local master: the jar (compiled on first use, as an installed package has no
    `make setup`) on the driver JVM's class path, and the settings (CONF) to give the
    session; else, without a JDK or when it does not build, nothing (Hadoop's own classes
    serve: slower, the same results).

    The class path, not `spark.jars`: spark-submit opens the `file:` file system to resolve
    `spark.jars` before it loads them. `SPARK_DIST_CLASSPATH` (read when the JVM is launched,
    and appended to whatever a user put there) rather than `spark.driver.extraClassPath`,
    which would replace a user's own; in local mode the driver's JVM is the executors' too."""
    built = _built_or_none() if master.startswith("local") else None
    if built is None:
        return {}
    jar = str(built)
    present = os.environ.get("SPARK_DIST_CLASSPATH", "")
    if jar not in present.split(os.pathsep):
        os.environ["SPARK_DIST_CLASSPATH"] = os.pathsep.join(filter(None, [present, jar]))
    return dict(CONF)


def _built_or_none() -> Path | None:
    try:
        return build_jar()
    except (OSError, subprocess.CalledProcessError):  # no Hadoop jar, a javac that fails
        return None


def main() -> int:
    """`make setup` step: build the jar where a JDK can; say what serves local disks."""
    try:
        jar = build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:  # Hadoop's own classes serve: slower, not wrong
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:300]
        print(f"warning: the local file system's classes did not build ({detail}); "
              "Hadoop's, which start a process per file, serve", file=sys.stderr)
        return 0
    if jar is None:
        print("no JDK (javac) found: Hadoop's local file system, which starts a process per file, serves")
    else:
        print(f"local file system without chmod/readlink processes: {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
