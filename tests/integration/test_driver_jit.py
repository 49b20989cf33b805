"""The JIT thresholds a local driver is given (`session.LOCAL_JIT_OPTIONS`), and when the
user's own JIT flags replace them. That a driver started as the product starts one runs with
them is checked on its JVM in test_class_archive.py (the same new process)."""

from __future__ import annotations

import pytest

from dataflow_core.spark.platform.session import LOCAL_JIT_OPTIONS, _driver_java_options

pytestmark = pytest.mark.integration


def test_a_local_driver_gets_the_jit_thresholds_before_the_users_flags(monkeypatch):
    monkeypatch.setenv("DATAFLOW_SPARK_JAVA_OPTS", "-XX:+UseSerialGC -Xss4m")
    options = _driver_java_options(local=True).split()
    assert set(LOCAL_JIT_OPTIONS) <= set(options)
    # before the user's flags: a later occurrence of a -XX flag wins in HotSpot
    assert max(map(options.index, LOCAL_JIT_OPTIONS)) < options.index("-XX:+UseSerialGC")


def test_a_clusters_driver_keeps_hotspots_thresholds(monkeypatch):
    monkeypatch.delenv("DATAFLOW_SPARK_JAVA_OPTS", raising=False)
    assert not set(LOCAL_JIT_OPTIONS) & set(_driver_java_options(local=False).split())


@pytest.mark.parametrize("theirs", [
    "-XX:TieredStopAtLevel=1", "-XX:CompileThresholdScaling=1", "-XX:-TieredCompilation", "-Xint",
    "-XX:+UseSerialGC -XX:Tier4InvocationThreshold=20000",
])
def test_the_users_jit_flags_replace_the_thresholds(monkeypatch, theirs: str):
    monkeypatch.setenv("DATAFLOW_SPARK_JAVA_OPTS", theirs)
    options = _driver_java_options(local=True).split()
    assert not set(LOCAL_JIT_OPTIONS) & set(options)
    assert theirs.split() == [o for o in options if o in theirs.split()]
