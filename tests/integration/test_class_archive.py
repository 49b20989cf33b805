"""The driver JVM's class-data-sharing archive (`platform.class_archive`): which archive a
driver is given, and that a driver started as the product starts one maps it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dataflow_core.spark.platform import class_archive
from tests import jvm_archive

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _mapped_by(pid: int) -> str:
    """The files a Linux process has mapped (its /proc maps)."""
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.fixture
def built(monkeypatch) -> Path:
    """An archive file where a driver with flags of this test's own would look for one."""
    flags = f"-Ddataflow.test={uuid.uuid4().hex}"
    path = class_archive.archive_path(flags)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    monkeypatch.setenv("DATAFLOW_SPARK_JAVA_OPTS", flags)
    yield path
    path.unlink()
    path.parent.rmdir()


def test_a_driver_is_given_the_archive_built_for_its_flags_and_none_for_other_flags(built: Path, monkeypatch):
    flags = os.environ["DATAFLOW_SPARK_JAVA_OPTS"]
    assert class_archive.driver_options(flags) == [f"-XX:SharedArchiveFile={built}", *class_archive.QUIET]
    assert class_archive.driver_options(f"{flags} -XX:+UseSerialGC") == []  # another collector: another archive
    assert class_archive.driver_options(f"{flags} -Xshare:off") == []  # the user's own word on sharing wins
    assert class_archive.driver_options(f"{flags} -XX:SharedArchiveFile=/theirs.jsa") == []
    monkeypatch.setenv(class_archive.SWITCH, "off")
    assert class_archive.driver_options(flags) == []


def test_the_session_hands_the_driver_its_archive(built: Path):
    from dataflow_core.spark.platform.session import _driver_java_options

    options = _driver_java_options(local=True).split()
    assert f"-XX:SharedArchiveFile={built}" in options
    assert options.index(os.environ["DATAFLOW_SPARK_JAVA_OPTS"]) < options.index(f"-XX:SharedArchiveFile={built}")


@pytest.mark.slow
def test_a_driver_started_as_the_product_starts_one_maps_the_archive_make_setup_built(tmp_path: Path):
    """A new process (the archive is mapped when a JVM starts), with no flags of the suite's:
    `get_spark` finds the archive `make setup` built for a driver without flags of its own,
    and the JVM runs with the local driver's JIT thresholds (`session.LOCAL_JIT_OPTIONS`)."""
    from dataflow_core.spark.platform.session import LOCAL_JIT_OPTIONS

    archive = class_archive.archive_path("")
    assert archive.is_file(), f"no archive at {archive}: `make setup` builds it (`make test` runs setup first)"
    env = {k: v for k, v in os.environ.items() if k not in ("DATAFLOW_SPARK_JAVA_OPTS", class_archive.SWITCH)}
    env["PYTHONPATH"] = str(ROOT)
    script = (
        "from dataflow_core.spark.platform.session import get_spark\n"
        f"spark = get_spark('archive-check', master='local[1]', warehouse={str(tmp_path)!r})\n"
        "jvm = spark.sparkContext._jvm\n"
        "print(jvm.ProcessHandle.current().pid())\n"
        "print(' '.join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))\n"
        "spark.range(3).count()\n"
        "import time\n"
        "time.sleep(600)\n"  # alive until the test has read its maps
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        pid = int(proc.stdout.readline())  # type: ignore[union-attr]
        arguments = proc.stdout.readline().split()  # type: ignore[union-attr]
        assert str(archive) in _mapped_by(pid)
        assert set(LOCAL_JIT_OPTIONS) <= set(arguments), arguments
    finally:
        proc.kill()
        proc.wait()


def test_the_suites_drivers_map_the_archive_built_for_the_suites_flags(spark):
    """`make test` builds the suite's archive first, and the shared session maps it; run
    without that build (`pytest` directly), the session's flags are the suite's minus it."""
    archive = class_archive.archive_path(jvm_archive.JAVA_OPTS)
    jvm = spark.sparkContext._jvm
    given = " ".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    if archive.is_file():
        assert str(archive) in _mapped_by(jvm.ProcessHandle.current().pid())
    else:
        assert "SharedArchiveFile" not in given and jvm_archive.JAVA_OPTS.split()[-1] in given
