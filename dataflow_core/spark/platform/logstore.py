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

`make setup` compiles them with the JDK's `javac` into the cache (`localfs.compile_jar`;
`dataflow_core.paths.cache_dir`), or the first session does;
every session loads the jar through `spark.jars` (Delta's classes, which they extend, are
loaded there too) and names the `file:` store (`session_conf`). The jar's folder is named by a
digest of the sources, Hadoop's and Delta's jars, so an upgrade or a changed source looks for
a jar of its own, which a session compiles then (`local_jar`). A session that has none
(no JDK to compile with) is refused in one line, on S3 and on a local folder alike, unless
the user names another store for `file:` tables (`named_store`): Delta's own is exclusive
within one process only, so silently falling back to it would lose commits of two processes.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from dataflow_core.errors import DataflowError
from dataflow_core.paths import setup_step
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


FILE_STORE_CONF = "spark.delta.logStore.file.impl"
_FILE_STORE_LINE = re.compile(r"^\s*" + re.escape(FILE_STORE_CONF) + r"\s*[=:\s]\s*(\S+)", re.MULTILINE)


def local_jar() -> tuple[Path | None, str]:
    """The jar for a local session, compiled when missing (a changed source, an upgraded
    pyspark or Delta); else None and why it could not be built."""
    try:
        jar = build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:200]
        return None, f"it did not build: {detail}"
    return jar, "" if jar is not None else "no JDK's javac to compile it with"


def named_store(env: dict[str, str] | None = None) -> str | None:
    """The `file:` log store the user names: `$DATAFLOW_LOCAL_LOG_STORE`, else
    `spark.delta.logStore.file.impl` in `$PYSPARK_SUBMIT_ARGS` or spark-defaults.conf
    (`$SPARK_CONF_DIR`, else pyspark's `conf/`), where Spark itself would read it."""
    env = os.environ if env is None else env
    if env.get(LOCAL_LOG_STORE_ENV):
        return env[LOCAL_LOG_STORE_ENV]
    given = re.search(re.escape(FILE_STORE_CONF) + r"=(\S+)", env.get("PYSPARK_SUBMIT_ARGS", ""))
    if given:
        return given.group(1)
    conf_dir = Path(env["SPARK_CONF_DIR"]) if env.get("SPARK_CONF_DIR") else None
    if conf_dir is None:
        from dataflow_core.spark.platform.jars import spark_home

        conf_dir = spark_home() / "conf"
    defaults = conf_dir / "spark-defaults.conf"
    found = _FILE_STORE_LINE.search(defaults.read_text(errors="replace")) if defaults.is_file() else None
    return found.group(1) if found else None


def session_conf(jar: Path | None, why: str = "", named: str | None = None) -> dict[str, str]:
    """Delta's log store for `file:` tables: the one the user names (`named_store`), else the
    product's when its jar is loaded, which makes the streams' checkpoint files too
    (`CHECKPOINT_MANAGER`). Raises DataflowError (one line) with neither: Delta's
    default would commit exclusively within this process only, with no word."""
    if named:
        return {FILE_STORE_CONF: named}  # a store of the user's: Spark's own checkpoint files too
    if jar is None:
        raise DataflowError(
            f"local commits need the product's log store ({LOCAL_LOG_STORE}), and {_expected_jar()} is "
            f"missing ({why or 'not built'}): install a JDK and run {setup_step(__name__)}, or name another store "
            f"for file: tables with {LOCAL_LOG_STORE_ENV}=<class> (or {FILE_STORE_CONF}), e.g. "
            "io.delta.storage.HDFSLogStore, exclusive within ONE process only")
    # the streams' checkpoint files (a batch's offsets, its commit) made with the same exclusive create
    return {FILE_STORE_CONF: LOCAL_LOG_STORE, "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_MANAGER}


def _expected_jar() -> str:
    try:
        return str(jar_path())
    except FileNotFoundError as exc:
        return f"its jar ({exc})"


def main() -> int:
    """`make setup` step: build the jar where a JDK can; say which commits are exclusive."""
    try:
        jar = build_jar()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = (getattr(exc, "stderr", "") or str(exc)).strip().replace("\n", " ")[:300]
        print(f"warning: the log stores did not build ({detail}); sessions are refused until they do "
              f"(or {LOCAL_LOG_STORE_ENV} names another store for local tables)", file=sys.stderr)
        return 0
    if jar is None:
        print("no JDK (javac) found: sessions are refused (the product's log stores need a JDK), unless "
              f"{LOCAL_LOG_STORE_ENV} names another store for local tables (a warehouse on S3 needs the JDK)")
    else:
        print(f"log stores (hard-link commits on file:, conditional puts on S3): {jar}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
