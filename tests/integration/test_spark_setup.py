"""Setup prerequisites fail fast with one clear line: Java version, Delta jar cache. A local
session runs on the project's local file system (spark.platform.localfs), which keeps Hadoop's rules."""

from __future__ import annotations

import socket
import stat
import time
from pathlib import Path

import pytest

from dataflow_core.errors import DataflowError
from dataflow_core.spark.platform import jars, localfs
from dataflow_core.spark.platform.java import check_java, parse_java_major

pytestmark = pytest.mark.integration


def _fake_java(tmp_path: Path, version: str) -> Path:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return home


@pytest.mark.parametrize(
    ("output", "major"),
    [('openjdk version "17.0.15" 2025-04-15', 17), ('java version "1.8.0_392"', 8), ('openjdk version "21" x', 21)],
)
def test_java_major_is_read_from_java_version_output(output: str, major: int):
    assert parse_java_major(output) == major


def test_old_java_is_refused_with_what_to_install(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "11.0.2")))
    with pytest.raises(DataflowError, match=r"is Java 11, but Spark 4 needs Java 17\+: install OpenJDK"):
        check_java()


def test_java_home_without_java_is_named(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(DataflowError, match=f"JAVA_HOME={tmp_path} has no bin/java"):
        check_java()


def test_installed_java_passes():
    assert check_java() >= 17


def test_unreachable_repository_and_empty_cache_says_run_make_setup(tmp_path: Path):
    started = time.monotonic()
    with pytest.raises(DataflowError) as error:
        jars.delta_jars(cache=tmp_path / "cache", repository="http://127.0.0.1:9/maven2/", timeout=120)
    message = str(error.value)
    assert "\n" not in message
    assert jars.delta_coordinate() in message and "run `make setup`" in message
    assert "127.0.0.1:9" in message
    assert time.monotonic() - started < 120
    assert not (tmp_path / "cache" / jars.MANIFEST_NAME).exists()


@pytest.mark.parametrize("lock", ["the lock's jars", "no lock: Ivy"])
def test_repository_that_never_answers_times_out_instead_of_hanging(tmp_path: Path, monkeypatch, lock):
    if lock.startswith("no lock"):
        monkeypatch.setattr(jars, "LOCK_FILE", tmp_path / "no.lock")
    with socket.socket() as silent:  # accepts connections, never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/maven2/"
        started = time.monotonic()
        with pytest.raises(DataflowError, match=r"no answer within 3s.*run `make setup`"):
            jars.resolve_jars(cache=tmp_path / "cache", repository=url, timeout=3)
        assert time.monotonic() - started < 20


def _maven(tmp_path: Path, content: bytes) -> tuple[Path, jars.LockedJar]:
    """A Maven repository folder holding one jar, and a lock entry for it (right hash)."""
    import hashlib

    jar = jars.LockedJar("org.example", "tiny-lib", "1.0.2", hashlib.sha256(content).hexdigest())
    path = tmp_path / "repo" / "org" / "example" / "tiny-lib" / "1.0.2" / "tiny-lib-1.0.2.jar"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    return tmp_path / "repo", jar


def _lock(tmp_path: Path, jar: jars.LockedJar) -> Path:
    import dataclasses
    import json

    lock = tmp_path / "delta-jars.lock"
    lock.write_text(json.dumps({"coordinate": jars.delta_coordinate(), "jars": [dataclasses.asdict(jar)],
                                "provided_by_spark": ["org.example:shipped:1.0"]}))
    return lock


def test_locked_jars_are_fetched_from_the_repository_and_checked(tmp_path: Path, monkeypatch):
    repo, jar = _maven(tmp_path, b"PK\x03\x04 a jar")
    monkeypatch.setattr(jars, "LOCK_FILE", _lock(tmp_path, jar))
    manifest = jars.resolve_jars(cache=tmp_path / "cache", repository=repo.as_uri() + "/", timeout=30)
    assert [Path(p).name for p in manifest.jars] == ["org.example_tiny-lib-1.0.2.jar"]
    assert Path(manifest.jars[0]).read_bytes() == b"PK\x03\x04 a jar"
    assert manifest.provided_by_spark == ["org.example:shipped:1.0"]
    assert jars.read_manifest(tmp_path / "cache") == manifest


def test_a_jar_that_is_not_what_the_lock_says_is_refused(tmp_path: Path, monkeypatch):
    repo, jar = _maven(tmp_path, b"PK\x03\x04 a jar")
    (repo / "org" / "example" / "tiny-lib" / "1.0.2" / "tiny-lib-1.0.2.jar").write_bytes(b"PK\x03\x04 tampered")
    monkeypatch.setattr(jars, "LOCK_FILE", _lock(tmp_path, jar))
    with pytest.raises(DataflowError, match=rf"tiny-lib-1.0.2.jar has sha256 \w+, but delta-jars.lock says {jar.sha256}"):
        jars.resolve_jars(cache=tmp_path / "cache", repository=repo.as_uri() + "/", timeout=30)
    assert not list((tmp_path / "cache" / "jars").iterdir()), "nothing unchecked is left in the cache"
    assert not (tmp_path / "cache" / jars.MANIFEST_NAME).exists()


def test_the_lock_is_the_coordinate_the_installed_packages_need():
    """`make setup` fetches the locked jars only while the lock is for the installed pyspark
    and delta-spark (else Ivy resolves): a lock left behind by an upgrade is caught here."""
    coordinate, locked, _ = jars.read_lock()
    assert coordinate == jars.delta_coordinate(), "run `make lock` after changing pyspark or delta-spark"
    assert any(j.group == "io.delta" and j.artifact.startswith("delta-spark_") for j in locked)


def test_the_s3a_lock_is_for_pysparks_hadoop_and_holds_the_sdk_modules_not_its_bundle():
    """A warehouse on S3 loads these (dataflow_core/spark/platform/s3a.py): `hadoop-aws` of the
    Hadoop pyspark ships, and the AWS SDK's modules instead of its 686 MB bundle."""
    from dataflow_core.spark.platform import s3a

    coordinate, locked, _ = jars.read_lock(s3a.LOCK_FILE)
    assert coordinate == s3a.jar_set().coordinate, "run `make lock` after changing pyspark"
    assert any(j.artifact == "hadoop-aws" and j.version == s3a.hadoop_version() for j in locked)
    sdk = [j for j in locked if j.group == "software.amazon.awssdk"]
    assert {"s3", "s3-transfer-manager"} <= {j.artifact for j in sdk} and "bundle" not in {j.artifact for j in sdk}
    assert {j.version for j in sdk} == {s3a.AWS_SDK_VERSION}


def test_a_session_started_for_a_local_warehouse_refuses_to_switch_to_s3_in_one_line(spark):
    """Its JVM has neither the S3A connector nor the S3 log store: a new process must start."""
    from dataflow_core.errors import DataflowError
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF, get_spark

    before = spark.conf.get(WAREHOUSE_CONF)
    with pytest.raises(DataflowError, match=r"started for a local warehouse and cannot reach s3a://lake/x: "
                                            r"run the command in a new process$"):
        get_spark(warehouse="s3a://lake/x")
    assert spark.conf.get(WAREHOUSE_CONF) == before
    assert spark.conf.get("spark.delta.logStore.s3a.impl", None) is None  # local sessions load nothing of S3


def test_session_loads_the_cached_jars_instead_of_resolving_packages(spark):
    manifest = jars.read_manifest()
    assert manifest is not None, "make setup did not cache the Delta jars"
    from dataflow_core.spark.platform import logstore

    loaded = spark.conf.get("spark.jars").split(",")
    assert loaded == [*manifest.jars, str(logstore.built_jar())]  # Delta's, then the product's log stores
    assert spark.conf.get("spark.delta.logStore.file.impl") == logstore.LOCAL_LOG_STORE
    assert any(Path(jar).name.startswith("io.delta_delta-spark_") for jar in loaded)
    assert spark.conf.get("spark.jars.packages", "") == ""
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"


def test_a_local_session_sets_permissions_and_renames_with_hadoops_rules_on_its_own_file_system(spark, tmp_path):
    """Delta's commits on local disks go through FileContext.rename, which must refuse an
    existing target (that is what makes a commit atomic against another writer); files and
    folders get the permissions asked for; links are seen as links."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    hadoop = jvm.org.apache.hadoop.fs
    conf = spark._jsc.hadoopConfiguration()
    fs = hadoop.FileSystem.getLocal(conf)
    context = hadoop.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == localfs.FILE_SYSTEM
    assert context.getDefaultFileSystem().getClass().getName() == localfs.ABSTRACT_FILE_SYSTEM

    folder, file = tmp_path / "a" / "b", tmp_path / "a" / "b" / "f.json"
    assert fs.mkdirs(hadoop.Path(str(folder)), hadoop.permission.FsPermission("750"))
    fs.create(hadoop.Path(str(file))).close()
    fs.setPermission(hadoop.Path(str(file)), hadoop.permission.FsPermission("640"))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o750 and stat.S_IMODE(file.stat().st_mode) == 0o640
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        fs.setPermission(hadoop.Path(str(tmp_path / "missing")), hadoop.permission.FsPermission("644"))

    no_options = spark.sparkContext._gateway.new_array(hadoop.Options.Rename, 0)
    target = folder / "00000000000000000001.json"
    context.rename(hadoop.Path(str(file)), hadoop.Path(str(target)), no_options)
    assert target.is_file() and not file.exists()
    file.write_text("{}")
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        context.rename(hadoop.Path(str(file)), hadoop.Path(str(target)), no_options)

    link = tmp_path / "link"
    link.symlink_to(target)
    assert context.getFileLinkStatus(hadoop.Path(str(link))).isSymlink()
    status = context.getFileLinkStatus(hadoop.Path(str(target)))
    assert not status.isSymlink() and status.isFile() and status.getLen() == target.stat().st_size
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        context.getFileLinkStatus(hadoop.Path(str(tmp_path / "missing")))


def test_the_local_log_store_creates_a_version_once_and_overwrites_whole(spark, tmp_path):
    """The `file:` log store every session names: a second create of N.json is refused as
    Delta's "version taken" (which is what makes two processes' commits exclusive: the race
    itself is tests/integration/test_s3_warehouse.py's), an overwrite replaces the file whole,
    a stale Hadoop checksum goes with it, and no temporary file is left."""
    from py4j.protocol import Py4JJavaError

    from dataflow_core.spark.platform.tables import jvm_class

    conf = spark._jsc.hadoopConfiguration()
    store = jvm_class(spark, spark.conf.get("spark.delta.logStore.file.impl"))(conf)
    path_of = jvm_class(spark, "org.apache.hadoop.fs.Path")

    def write(name: str, line: str, overwrite: bool) -> None:
        lines = spark._jvm.java.util.ArrayList()
        lines.add(line)
        store.write(path_of(f"file:{tmp_path / name}"), lines.iterator(), overwrite, conf)

    write("00000000000000000000.json", "first", False)
    with pytest.raises(Py4JJavaError) as taken:
        write("00000000000000000000.json", "second", False)
    assert taken.value.java_exception.getClass().getName() == "java.nio.file.FileAlreadyExistsException"
    assert (tmp_path / "00000000000000000000.json").read_text() == "first\n"
    (tmp_path / "._last_checkpoint.crc").write_bytes(b"stale")
    write("_last_checkpoint", "one", True)
    write("_last_checkpoint", "two", True)
    assert (tmp_path / "_last_checkpoint").read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000000.json", "_last_checkpoint"]
    assert not store.isPartialWriteVisible(path_of(f"file:{tmp_path}"), conf)
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        write("missing/00000000000000000000.json", "x", False)


def test_a_local_sessions_defaults_give_way_to_the_users_spark_configuration(spark):
    """The suite's spark-defaults.conf (handed over with --properties-file, as a user's would
    be) sets shuffle partitions: that is kept; a setting it leaves out gets the local default."""
    from tests import jvm_archive
    from dataflow_core.spark.platform.session import LOCAL_SQL_DEFAULTS

    given = dict(line.split(None, 1) for line in jvm_archive.SPARK_DEFAULTS.read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    key = "spark.sql.shuffle.partitions"
    assert given[key].strip() != LOCAL_SQL_DEFAULTS[key], "the suite's value must differ from the default to tell"
    assert spark.conf.get(key) == given[key].strip()
    discovery = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    assert discovery not in given
    assert spark.conf.get(discovery) == LOCAL_SQL_DEFAULTS[discovery]
    leaf = "spark.sql.leafNodeDefaultParallelism"
    assert given[leaf].strip() != LOCAL_SQL_DEFAULTS[leaf] and spark.conf.get(leaf) == given[leaf].strip()


def test_tables_a_session_creates_write_a_log_checkpoint_every_50_commits_not_10(spark):
    """A checkpoint is written by the commit that reaches the interval, and costs that
    commit as much again in a fresh process: the tables the product creates checkpoint less
    often (`session.TABLE_DEFAULTS`)."""
    from dataflow_core.spark.platform.delta import append_rows
    from dataflow_core.spark.platform.session import TABLE_DEFAULTS
    from dataflow_core.spark.platform.tables import table_path

    interval = TABLE_DEFAULTS["spark.databricks.delta.properties.defaults.checkpointInterval"]
    assert int(interval) > 10
    for i in range(11):
        append_rows(spark, "checkpointed", spark.createDataFrame([(i,)], "a int"), ("test:checkpointed", i))
    path = table_path(spark, "checkpointed")
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["properties"]
    assert properties.get("delta.checkpointInterval") == interval
    log = sorted(p.name for p in (Path(path) / "_delta_log").iterdir())
    assert "00000000000000000010.json" in log and not [n for n in log if "checkpoint.parquet" in n], log
    assert sorted(r["a"] for r in spark.read.format("delta").load(path).collect()) == list(range(11))


def test_frames_of_local_rows_have_a_partition_per_core_up_to_the_cap(spark):
    """local[2]: two partitions, not the cap (4), so no task of a one-row frame runs empty
    for nothing; a larger machine stops at the cap."""
    from dataflow_core.spark.platform.session import LOCAL_PARALLELISM_CAP, local_cores

    assert spark.sparkContext.master == "local[2]" and LOCAL_PARALLELISM_CAP > 2
    assert spark.createDataFrame([(1,)], "a int").rdd.getNumPartitions() == 2
    assert [local_cores(m) for m in ("local", "local[3]", "local[8,2]")] == [1, 3, 8]
    assert local_cores("local[*]") >= 1 and local_cores("local[x]") == LOCAL_PARALLELISM_CAP  # Spark says what is wrong


def test_a_runners_cache_is_uncompressed_and_leaves_the_sessions_setting_as_it_was(spark):
    """`persist_uncompressed` keeps its DataFrame in uncompressed columns (compressing is
    most of what building a large cache costs) and sets that for its own `persist()` only."""
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.cache import COMPRESSED, persist_uncompressed

    def in_memory() -> int:
        return sum(i.memSize() for i in spark.sparkContext._jsc.sc().getRDDStorageInfo())

    def cached_bytes(df) -> int:  # what caching `df` added, whatever other tests left cached
        before = in_memory()
        df.count()
        size = in_memory() - before
        df.unpersist(blocking=True)
        return size

    rows = lambda: spark.range(20_000).select((F.col("id") % 3).alias("n"), F.lit("same").alias("s"))  # noqa: E731
    assert spark.conf.get(COMPRESSED, None) is None
    plain = cached_bytes(persist_uncompressed(rows()))
    assert spark.conf.get(COMPRESSED, None) is None
    compressed = cached_bytes(rows().persist())
    assert plain > 4 * compressed  # a column of three values compresses to almost nothing
    spark.conf.set(COMPRESSED, "true")
    try:
        persist_uncompressed(rows()).unpersist(blocking=True)
        assert spark.conf.get(COMPRESSED) == "true"
    finally:
        spark.conf.unset(COMPRESSED)
