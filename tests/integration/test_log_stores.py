"""The product's log stores refuse to commit unsafely (dataflow_core/spark/platform/logstore.py):

- a local session without the log store's jar, and no JDK to build it, refuses in one line
  (a fresh process, before any JVM);
- the hard-link store syncs the commit's file before linking it and the folder after (its
  system calls, under strace), and the next commit removes a killed commit's temporary file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dataflow_core.spark.platform import logstore
from dataflow_core.spark.platform.jars import cache_dir, spark_home

ROOT = Path(__file__).resolve().parents[2]


def _cache_without_log_stores(tmp_path: Path) -> Path:
    """A cache folder holding everything of the project's cache but the log stores' jars."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in cache_dir().iterdir():
        if entry.name != "logstores":
            (cache / entry.name).symlink_to(entry)
    return cache


def _java_without_javac(tmp_path: Path) -> Path:
    """A JAVA_HOME with the real `java` and no `javac` (a JRE, as far as the product can tell)."""
    home = tmp_path / "jre"
    (home / "bin").mkdir(parents=True)
    java = shutil.which("java", path=os.environ.get("JAVA_HOME", "") + "/bin") or shutil.which("java")
    (home / "bin" / "java").symlink_to(Path(java).resolve())
    return home


def test_a_local_session_without_the_log_store_jar_refuses_in_one_line(tmp_path: Path):
    jre = _java_without_javac(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != logstore.LOCAL_LOG_STORE_ENV}
    env.update(DATAFLOW_CACHE_DIR=str(_cache_without_log_stores(tmp_path)), JAVA_HOME=str(jre),
               PATH=str(jre / "bin"), SPARK_CONF_DIR=str(tmp_path))
    run = subprocess.run([str(Path(sys.executable).with_name("dataflow")), "generate", "--rows", "10",
                          "--warehouse", str(tmp_path / "warehouse")],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "make setup" in lines[0] and logstore.LOCAL_LOG_STORE_ENV in lines[0], run.stderr
    assert "javac" in lines[0] and "dataflow-logstores.jar" in lines[0], lines[0]
    assert not (tmp_path / "warehouse" / "video_events").exists()

    # naming another store is the user's choice: then the session does not refuse
    assert logstore.session_conf(None, "no javac", "io.delta.storage.HDFSLogStore") == {
        logstore.FILE_STORE_CONF: "io.delta.storage.HDFSLogStore"}
    (tmp_path / "spark-defaults.conf").write_text(f"{logstore.FILE_STORE_CONF}  io.delta.storage.LocalLogStore\n")
    assert logstore.named_store({"SPARK_CONF_DIR": str(tmp_path)}) == "io.delta.storage.LocalLogStore"


COMMIT = """
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class Commit {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    new io.dataflow.local.HardLinkLogStore(conf)
        .write(new Path(args[0]), List.of("{\\"commitInfo\\":{}}").iterator(), false, conf);
  }
}
"""


def test_a_hard_link_commit_syncs_its_file_before_the_link_and_its_folder_after(tmp_path: Path):
    assert shutil.which("strace"), "strace is needed (.ci/run installs it: apt-get install strace)"
    jar = logstore.build_jar()
    assert jar is not None, "no JDK to build the log stores"
    (tmp_path / "Commit.java").write_text(COMMIT)
    log = tmp_path / "_delta_log"
    log.mkdir()
    class_path = os.pathsep.join([str(spark_home() / "jars" / "*"), logstore._delta_storage_jar(), str(jar)])
    trace = tmp_path / "trace"
    run = subprocess.run(["strace", "-f", "-y", "-o", str(trace), "-e", "trace=fsync,fdatasync,link,linkat",
                    "java", "-cp", class_path, str(tmp_path / "Commit.java"), f"file:{log}/00000000000000000000.json"],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    calls = [line.split(None, 1)[1] for line in trace.read_text().splitlines() if re.search(r"\b(fsync|fdatasync|link|linkat)\(", line)]
    linked = next(i for i, call in enumerate(calls) if "link" in call.split("(")[0] and "00000000000000000000.json\"" in call)
    synced_file = [i for i, call in enumerate(calls) if re.match(r"f(data)?sync\(\d+<[^>]*/\.00000000000000000000\.json\.[^>]*\.tmp>\) = 0", call)]
    synced_folder = [i for i, call in enumerate(calls) if re.match(rf"f(data)?sync\(\d+<{re.escape(str(log))}>\) = 0", call)]
    assert synced_file and synced_file[0] < linked, calls
    assert synced_folder and synced_folder[-1] > linked, calls
    assert (log / "00000000000000000000.json").read_text() == '{"commitInfo":{}}\n'


def test_the_next_commit_removes_a_killed_commits_temporary_file(spark, tmp_path: Path):
    from dataflow_core.spark.platform.tables import table_path, write_table

    log = Path(table_path(spark, "stale_temps").removeprefix("file:")) / "_delta_log"
    log.mkdir(parents=True)  # as a commit killed before the table's first left it
    killed = log / ".00000000000000000000.json.0b5c2f1e-killed.tmp"
    live = log / ".00000000000000000000.json.7d1e9a30-live.tmp"
    killed_checkpoint = log / "._last_checkpoint.5e0c77aa-killed.tmp"
    for temp in (killed, live, killed_checkpoint):
        temp.write_text('{"commitInfo":{}}\n')
    hour_ago = time.time() - 3600
    for temp in (killed, killed_checkpoint):
        os.utime(temp, (hour_ago, hour_ago))
    write_table(spark, spark.createDataFrame([("b", 2)], "tag string, n int"), "stale_temps", mode="append")
    assert not killed.exists() and not killed_checkpoint.exists(), "a killed commit's temporary file outlived the next commit"
    assert live.exists(), "a temporary file young enough to be a live commit's was removed"
    assert [p.name for p in log.glob("*.json")] == [f"{0:020d}.json"]


def test_version_taken_on_s3_is_the_status_412_not_a_412_in_a_message(spark):
    """An error naming log file 412 (or a request id with 412 in it) is no lost race: it is
    raised as it is, not retried as a taken version. (The status itself: test_s3_stores.py.)"""
    from dataflow_core.objectstore import LOG_STORE_CLASS
    from dataflow_core.spark.platform.tables import jvm_class

    store, jvm = jvm_class(spark, LOG_STORE_CLASS), spark._jvm
    for message in ("PUT s3a://lake/t/_delta_log/00000000000000000412.json: 403 Forbidden",
                    "Service unavailable (request id 4120A7, 412 in it): PreconditionFailed elsewhere"):
        assert not store.versionTaken(jvm.java.io.IOException(message)), message
    taken = jvm.java.io.IOException("commit", jvm.java.nio.file.FileAlreadyExistsException("00000000000000000412.json"))
    assert store.versionTaken(taken)
