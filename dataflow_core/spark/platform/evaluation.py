"""Spark's interpreted expressions for jobs over little input, compiled ones for the rest.

Spark compiles a Java class for every projection, filter, ordering and fused stage it runs
(Janino), and the JVM then warms each class from scratch. A micro-batch of 50k rows runs
about 250 such classes: in a fresh process compiling them and warming the compiler took
more time than evaluating the expressions on those rows. Evaluated without them (Spark's
interpreted mode, `spark.sql.codegen.factoryMode=NO_CODEGEN` and no whole-stage code
generation), a 50k-row micro-batch of billing's shape took 13.6 s instead of 16.2 s in a
fresh process and 8.2 s instead of 9.7 s warm, with a sixth less CPU; a 500k-row batch took
8% longer. So a job whose input is under `spark.dataflow.interpretedBelowBytes` (bytes of
its input files, from Spark's own estimate of the plan; default 8 MiB, about 140k rows of
billing's input; 0 never) runs interpreted, and a larger one as Spark would.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Iterator

from dataflow_core.errors import DataflowError
from dataflow_core.spark.platform.delta import session_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

INTERPRETED_BELOW_CONF = "spark.dataflow.interpretedBelowBytes"
INTERPRETED_BELOW_DEFAULT = 8 * 2**20
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def interpreted_below(spark: "SparkSession") -> int:
    """The input size under which a job runs interpreted (`INTERPRETED_BELOW_CONF`)."""
    given = spark.conf.get(INTERPRETED_BELOW_CONF, None)
    if given is None:
        return INTERPRETED_BELOW_DEFAULT
    try:
        limit = int(given)
    except ValueError:
        limit = -1
    if limit < 0:
        raise DataflowError(f"{INTERPRETED_BELOW_CONF}={given!r}: give a number of bytes (0: never interpret)")
    return limit


def input_bytes(df: "DataFrame") -> int:
    """Spark's estimate of a DataFrame's size (its input files' bytes), without a job."""
    return int(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())


@contextmanager
def sized_evaluation(spark: "SparkSession", rows: "DataFrame | None") -> Iterator[bool]:
    """Interpreted evaluation (`INTERPRETED`) for the commands run inside, when `rows` (the
    job's input; None: none) is small, on `spark` and on the session `rows` belongs to (a
    stream batch's own); restored afterwards. Yields whether it interprets."""
    small = (0 if rows is None else input_bytes(rows)) < interpreted_below(spark)
    with ExitStack() as stack:
        if small:
            sessions = [spark] if rows is None or rows.sparkSession is spark else [spark, rows.sparkSession]
            for session in sessions:
                stack.enter_context(session_settings(session, INTERPRETED))
        yield small
