"""The suite's JVMs: their flags, and the class-data-sharing archive built for them.

A cold Spark driver loads, parses and verifies some 20k classes from jars before its first
Delta commit. The suite starts about thirty such JVMs (test workers, CLI runs, Airflow tasks,
killed runs, a cluster's), under flags of its own (below), so `make test` builds the product's
archive (`dataflow_core.spark.platform.class_archive`) for those flags too (`python -m
tests.jvm_archive`, beside the pure tests), and tests/conftest.py hands `-XX:SharedArchiveFile`
to every driver JVM: they map those classes instead (a cold two-commit job on 2 cores: about
30 s -> 19 s). Without an archive (`pytest` run directly, before any `make test`) the flags are
the same minus that one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dataflow_core.spark.platform import class_archive

SPARK_DEFAULTS = Path(__file__).with_name("spark-conf") / "spark-defaults.conf"

# The quick JIT only, for the JVMs that live for one command (CLI runs, Airflow tasks,
# killed runs): on data of a few rows a query is planned once and run on ten rows, and the
# optimizing JIT's compile threads would take the other test worker's core for code the
# command ends before it pays. A test worker's own session lives for the whole suite and
# runs the same Spark and Delta code paths thousands of times; it gets the optimizing JIT
# too (`for_long_lived_jvm`), under the product's thresholds for a local driver (no JIT flag
# of its own: `session.LOCAL_JIT_OPTIONS`): after its first minute, warm micro-batches take
# about a fifth less wall time.
# The quick JIT alone gets a 48 MB code cache, which Spark and Delta's many query shapes
# fill: the JVM then spends its time evicting and recompiling (about 10% of a test session's
# CPU), hence the larger cache that is never flushed. The archive must be written and read
# under the same collector.
QUICK_JIT = "-XX:TieredStopAtLevel=1"
JAVA_OPTS = f"{QUICK_JIT} -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m -XX:-UseCodeCacheFlushing"
# The suite's Spark settings (tests/spark-conf/spark-defaults.conf) reach every driver this
# way and not through SPARK_CONF_DIR: Spark puts that folder on the class path, and a JVM
# refuses to archive classes for a class path holding a folder that is not empty.
SUBMIT_ARGS = f"--properties-file {SPARK_DEFAULTS} pyspark-shell"


def java_options(long_lived: bool = False) -> str:
    """The drivers' flags: JAVA_OPTS (without QUICK_JIT for a JVM that lives for the whole
    suite), plus the archive built for JAVA_OPTS when there is one (JIT flags do not change
    which archive a JVM can map)."""
    options = JAVA_OPTS.replace(f"{QUICK_JIT} ", "") if long_lived else JAVA_OPTS
    return " ".join([options, *class_archive.driver_options(JAVA_OPTS)])


def for_long_lived_jvm() -> dict[str, str]:
    """The environment for a process whose Spark driver serves the jobs of a whole suite (a
    test worker's session): the optimizing JIT as well. Empty if the developer set flags of
    their own, which win. (Not the Airflow process of test_dags_dataflow's seven commands:
    its three minutes are too short, measured 222 s -> 265 s with the optimizing JIT.)"""
    if os.environ.get("DATAFLOW_SPARK_JAVA_OPTS") != java_options():
        return {}
    return {"DATAFLOW_SPARK_JAVA_OPTS": java_options(long_lived=True)}


def build() -> int:
    """Build the archive for the suite's flags unless it exists; one line either way."""
    path, said = class_archive.build(JAVA_OPTS, SUBMIT_ARGS)
    print(said, file=sys.stdout if path else sys.stderr)
    return 0  # a slower suite, not a failed one


if __name__ == "__main__":
    sys.exit(build())
