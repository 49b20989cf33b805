"""Writers that are neither a backfill nor a micro-batch take the pipeline too: maintenance
(OPTIMIZE, VACUUM, seen ids forgotten past their horizon) and the input gate's quarantine
MERGE. Unlocked, their commits race the live batches' (a conflict turns a micro-batch into a
failure or a skip) and an `--abandon`'s RESTORE.

`locked_writes` claims the pipeline as `dataflow reset` and `--reject` do (`sinks.pipeline_lock.take_lock`:
busy while another run works locking it, stuck when that run is gone or failed; a caller that
waits for a working holder tries again, `cli.waiting.until_free`); while inside, the run beats and every commit
it makes to a table of the pipeline checks first that its lock stands (`fenced_commits`;
commands that bypass `append_rows`/`merge_rows`, such as OPTIMIZE, call `check_lock`
themselves). Each of these writes is one atomic commit that leaves the tables as true as
they were, so a failure inside records the run failed and releases the pipeline at once:
live batches go on, and the next run does the work again. Only a run that dies (killed)
keeps its lock; the same command resumes it (its arguments are the same every time), or
`dataflow backfill --abandon` undoes it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from dataflow_core.errors import first_line
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.sinks.batches import read_log
from dataflow_core.spark.sinks.lock_holders import Heartbeat, this_owner
from dataflow_core.spark.sinks.fencing import fenced_commits
from dataflow_core.spark.sinks.pipeline_lock import PipelineLock, release, take_lock
from dataflow_core.spark.sinks.runs import Ledger, fail_run, finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]


@contextmanager
def locked_writes(spark: "SparkSession", spec: PipelineSpec, command: str,
                  say: Say = lambda _m: None) -> Iterator[PipelineLock]:
    """The pipeline locked by a run of `command` while inside, every commit to its tables
    fenced by the lock, and the lock released after (see the module docstring):
    PipelineBusy (before anything is written) when a working run has it locked, PipelineStuck
    when that run is gone or failed."""
    lock = take_lock(spark, spec, command, {}, None, say)
    with Heartbeat(spark, spec.name, lock.run.run_id, lock.owner or this_owner()), fenced_commits(spark, spec, lock):
        try:
            yield lock
        except SimulatedCrash:
            raise  # the crash switch stands for a death: the lock stays, as a killed run's does
        except BaseException as exc:
            _fail_and_release(spark, spec, lock, exc, say)
            raise
        finish_run(spark, lock.run, Ledger())
    release(spark, spec, lock.record, None)


def _fail_and_release(spark: "SparkSession", spec: PipelineSpec, lock: PipelineLock, exc: BaseException, say: Say) -> None:
    """The run recorded failed and the pipeline released, unless the lock is no longer its
    own (abandoned: the abandon did both). Best effort: `exc` is what the caller hears."""
    try:
        latest = (read_log(spark, spec).records or [None])[0]
        if not latest or latest.status != "started" or latest.holder != lock.record.holder:
            return
        fail_run(spark, lock.run, f"{type(exc).__name__}: {first_line(exc)}"[:500])
        release(spark, spec, lock.record, None)
    except Exception as again:  # noqa: BLE001 - the lock stays; the next command names it
        say(f"run {lock.run.run_id} failed and could not release pipeline {spec.name} ({first_line(again)[:200]})")
