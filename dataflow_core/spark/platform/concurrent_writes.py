"""Writes to different Delta tables, made at once.

A run's writes at one commit point (a stage's pane log, results and state; a batch's bad
rows and seen ids) go to different tables, each under an idempotent key of its own, and
none reads what another writes. Made one after the other, each waits for the others'
driver work (planning, Delta's snapshot and commit) while the cores sit idle; made at once,
one write's driver work runs beside another's Spark job. Exactly once does not depend on
their order: a retry reads what the first attempt read (recorded versions, or the lock's
input version) and skips whatever commit already landed, in any subset.

Each write gets a session of its own, a clone of the caller's (its settings, registered
tables), since Delta takes a MERGE's idempotent key (`txnAppId`/`txnVersion`) and the
query settings a write scopes (`delta.session_settings`) from the session: two writes
sharing one would see each other's. A thread of its own inherits the caller's Spark local
properties (a stream's job group and description), as PySpark's `InheritableThread` does,
and the caller's context variables (the fence of the run it writes for).
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from dataflow_core.spark.platform.tables import REGISTERED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


def write_at_once(spark: "SparkSession", writes: Sequence[Callable[["SparkSession"], T]]) -> list[T]:
    """Run each write at once (see the module docstring), one of them in the caller's
    thread and session, and wait for all of them; their results in order. When one fails,
    the others still run to their end (each commit is whole or absent anyway) and the first
    failure in order is raised."""
    if not writes:
        return []
    pending = begin_writes(spark, writes[1:])
    try:
        first = writes[0](spark)
    finally:
        rest = pending.wait()
    return [first, *rest]


class Writes:
    """Writes under way in threads of their own (`begin_writes`); `wait` for their results."""

    def __init__(self, spark: "SparkSession", writes: Sequence[Callable[["SparkSession"], T]]):
        from pyspark import InheritableThread

        self._spark = spark
        self._sessions = [_clone(spark) for _ in writes]
        self._futures: list[Future] = [Future() for _ in writes]
        # each in a copy of the caller's context: its run's commit checks (`delta.checked_commits`) go along
        self._threads = [InheritableThread(target=contextvars.copy_context().run, args=(_run, *args), daemon=True)
                         for args in zip(writes, self._sessions, self._futures)]
        for thread in self._threads:
            thread.start()

    def wait(self, failed: bool = False) -> list:
        """Their results in order, once every write has ended; the first failure in order
        is raised (the others still ran to their end), unless the caller `failed` itself:
        its own failure is then the one to report."""
        for thread in self._threads:
            thread.join()
        for session in self._sessions:
            _keep_registrations(self._spark, session)
        self._sessions = []
        failure = next((f.exception() for f in self._futures if f.exception() is not None), None)
        if failure is not None and not failed:
            raise failure
        return [None if f.exception() is not None else f.result() for f in self._futures]


def begin_writes(spark: "SparkSession", writes: Sequence[Callable[["SparkSession"], T]]) -> Writes:
    """Start each write in a thread and a session of its own (see the module docstring),
    while the caller goes on with work that does not read what they write."""
    return Writes(spark, writes)


def _run(write: Callable[["SparkSession"], T], session: "SparkSession", future: Future) -> None:
    try:
        future.set_result(write(session))
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, raised there
        future.set_exception(exc)


def _clone(spark: "SparkSession") -> "SparkSession":
    """A session of the caller's Spark application with a copy of its state (settings,
    temporary views, registered tables): Spark's own `cloneSession`, one call."""
    from pyspark.sql import SparkSession

    return SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())


def _keep_registrations(spark: "SparkSession", session: "SparkSession") -> None:
    """Tables a write registered (in the catalog the sessions share) stay marked as
    registered in the caller's session, which would otherwise register them again."""
    theirs = {k: v for k, v in session.conf.getAll.items() if k.startswith(REGISTERED)}
    ours = spark.conf.getAll
    for key, value in theirs.items():
        if ours.get(key) != value:
            spark.conf.set(key, value)
