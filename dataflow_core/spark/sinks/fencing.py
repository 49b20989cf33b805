"""Fencing and abandoning a locked run (the lock itself, taken and released: `sinks.pipeline_lock`).

Every commit of a locked run is fenced: it checks that the lock stands first (`fenced_commits`,
`check_lock`), as a micro-batch's commits check their claim. `abandon` is the operator's way
out of a run that fails on every re-run: the pipeline's tables go back to the versions its
lock found, the run is recorded failed and the lock released. A run still working is
abandoned only when forced, and then its idempotent keys in every table are spent first
(`_fence_keys`), so a commit under way when it was abandoned is refused by Delta itself.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from dataflow_core.errors import DataflowError, PipelineBusy
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.platform.delta import checked_commits, table_version
from dataflow_core.spark.sinks.batches import log_version, read_log
from dataflow_core.spark.sinks.corrections_plan import plan_table
from dataflow_core.spark.sinks.pipeline_lock import (
    BACKFILL_LOCK_HOLDER, PipelineLock, ensure_control_tables, lock_holder_gone, owner_words, pipeline_tables, record_of,
    release,
)
from dataflow_core.spark.sinks.runs import Run, fail_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_lock(spark: "SparkSession", spec: PipelineSpec, lock: PipelineLock) -> None:
    """Stop a run whose lock no longer stands (an operator abandoned it) before it writes
    again: its tables were restored, and what it would write next belongs to no history."""
    version = log_version(spark)
    if version == lock.record.fenced_at:
        return
    latest = (read_log(spark, spec).records or [None])[0]  # of this version or a later one
    if not latest or latest.status != "started" or latest.holder != lock.record.holder:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: run {lock.run.run_id} no longer holds its lock (abandoned); it stopped writing"
        )
    lock.record.fenced_at = version


@contextmanager
def fenced_commits(spark: "SparkSession", spec: PipelineSpec, lock: PipelineLock) -> Iterator[None]:
    """While inside, every commit this process makes to a table of the pipeline checks first
    that `lock` stands (`check_lock`), as a micro-batch's commits check their claim: a run
    abandoned while it works writes nothing more."""
    tables = set(pipeline_tables(spec))

    def check(name: str) -> None:
        if name in tables:
            check_lock(spark, spec, lock)

    with checked_commits(check):
        yield


def abandon(spark: "SparkSession", pipeline: str, run_id: str, say: Callable[[str], None],
            force: bool = False) -> list[str]:
    """The operator's way out of a backfill that fails on every re-run (a poison row, a key
    too big for a worker): every table of the pipeline goes back to the version its lock
    found (Delta's RESTORE; nothing else wrote them since), the run is recorded failed and
    the lock released, so micro-batches carry on as if it never ran. Refused for a run that
    does not lock the pipeline, and for one still working unless `force`: then its
    idempotent keys are spent in every table first (`_fence_keys`), so that no commit of it
    lands after the RESTORE, and it stops at its next commit (`fenced_commits`). Returns the
    tables restored."""
    from dataflow_core.pipelines import get

    spec = get(pipeline)
    ensure_control_tables(spark)
    latest = (read_log(spark, spec).records or [None])[0]
    if not latest or latest.status != "started" or latest.holder != BACKFILL_LOCK_HOLDER + run_id:
        what = "nothing" if not latest or latest.status != "started" else latest.holder
        raise DataflowError(f"pipeline {spec.name!r}: run {run_id} does not have it locked ({what} does); nothing abandoned")
    what = lock_holder_gone(spark, spec, latest)
    if what is None and not force:
        raise DataflowError(
            f"pipeline {spec.name!r}: run {run_id} is still working ({owner_words(spark, spec, latest)}); abandoning it "
            "now would restore its tables under it, so nothing was abandoned: stop it first (the same command "
            "resumes it later), or abandon it anyway with --force (its commits from then on are refused)")
    rec = record_of(latest)
    note = latest.lock_note()
    if what is None:
        say(f"run {run_id} is still working (--force): its commits are fenced before its tables are restored")
    _fence_keys(spark, spec, run_id)  # also for a run taken for gone from another machine, which may be wrong
    restored = [name for name in pipeline_tables(spec) if _restore(spark, name, rec.versions.get(name, -1))]
    run = Run(run_id, spec.name, note.get("command", "backfill"), note.get("args", "{}"), int(note.get("now", 0)))
    fail_run(spark, run, "abandoned by the operator (dataflow backfill --abandon); its writes were undone",
             finished_spent=True)
    rec.note = json.dumps({**note, "abandoned": True})
    release(spark, spec, rec, None)
    say(f"pipeline {spec.name}: run {run_id} abandoned; restored {', '.join(restored) or 'no table'} to the versions "
        "its lock found; micro-batches and backfills may run again")
    return restored


SPENT = 2**62
"""The idempotent-key version an abandon commits under each of the run's keys: above any the
run uses (0), so Delta skips every later commit of the run under its key."""


def _fence_keys(spark: "SparkSession", spec: PipelineSpec, run_id: str) -> None:
    """Spend the run's idempotent keys (`dataflow:<pipeline>:<table>:<run id>`, and a plan's
    preview's) in every table of the pipeline that exists: an empty commit under each at
    version SPENT. A later commit of the run under its key is then skipped, and one under way
    meanwhile fails (Delta checks the keys a commit read against those committed since), so
    a run still working cannot write after the RESTORE that follows."""
    from dataflow_core.spark.platform.tables import table_path

    for name in pipeline_tables(spec):
        if table_version(spark, name) < 0:
            continue  # a table it makes later: its commits there check the lock first
        path = table_path(spark, name)
        keys = [f"dataflow:{spec.name}:{name}:{run_id}"]
        if name in {plan_table(stage) for stage in spec.stages}:
            keys.append(f"dataflow:{spec.name}:{name}:{run_id}:preview")
        for key in keys:
            empty = spark.read.format("delta").load(path).limit(0)
            empty.write.format("delta").mode("append").option("txnAppId", key).option("txnVersion", SPENT).save(path)


def _restore(spark: "SparkSession", name: str, version: int) -> bool:
    """Table `name` as it was at `version` (-1: it did not exist, so it is emptied); True if
    it had changed since."""
    from delta.tables import DeltaTable

    from dataflow_core.spark.platform.tables import table_path

    if table_version(spark, name) <= version:
        return False
    table = DeltaTable.forPath(spark, table_path(spark, name))
    if version < 0:
        table.delete()
    else:
        table.restoreToVersion(version)
    return True
