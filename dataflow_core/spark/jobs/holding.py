"""Writers that are neither a backfill nor a micro-batch take the pipeline too: maintenance
(OPTIMIZE, VACUUM, seen ids forgotten past their horizon) and the input gate's quarantine
MERGE. Unheld, their commits race the live batches' (a conflict turns a micro-batch into a
failure or a skip) and an `--abandon`'s RESTORE.

`holding` claims the pipeline as `dataflow reset` and `--reject` do (`sinks.holds.take_hold`:
busy while another run works holding it, stuck when that run is gone or failed; a caller that
waits for a working holder tries again, `cli.waiting.until_free`); while inside, the run beats and every commit
it makes to a table of the pipeline checks first that its hold stands (`fenced_commits`;
commands that bypass `append_rows`/`merge_rows`, such as OPTIMIZE, call `check_hold`
themselves). Each of these writes is one atomic commit that leaves the tables as true as
they were, so a failure inside records the run failed and releases the pipeline at once:
live batches go on, and the next run does the work again. Only a run that dies (killed)
keeps its hold; the same command resumes it (its arguments are the same every time), or
`dataflow backfill --abandon` undoes it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from dataflow_core.errors import first_line
from dataflow_core.pipelines import PipelineSpec
from dataflow_core.spark.jobs.crash import SimulatedCrash
from dataflow_core.spark.sinks.batches import holder_of, read_log
from dataflow_core.spark.sinks.holders import Heartbeat, this_owner
from dataflow_core.spark.sinks.holds import Hold, fenced_commits, release, take_hold
from dataflow_core.spark.sinks.runs import Ledger, fail_run, finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Say = Callable[[str], None]


@contextmanager
def holding(spark: "SparkSession", spec: PipelineSpec, command: str, say: Say = lambda _m: None) -> Iterator[Hold]:
    """The pipeline held by a run of `command` while inside (see the module docstring):
    PipelineBusy (before anything is written) when a working run holds it, PipelineStuck
    when that run is gone or failed."""
    hold = take_hold(spark, spec, command, {}, None, say)
    with Heartbeat(spark, spec.name, hold.run.run_id, hold.owner or this_owner()), fenced_commits(spark, spec, hold):
        try:
            yield hold
        except SimulatedCrash:
            raise  # the crash switch stands for a death: the hold stays, as a killed run's does
        except BaseException as exc:
            _fail_and_release(spark, spec, hold, exc, say)
            raise
        finish_run(spark, hold.run, Ledger())
    release(spark, spec, hold.record, None)


def _fail_and_release(spark: "SparkSession", spec: PipelineSpec, hold: Hold, exc: BaseException, say: Say) -> None:
    """The run recorded failed and the pipeline released, unless the hold is no longer its
    own (abandoned: the abandon did both). Best effort: `exc` is what the caller hears."""
    try:
        latest = (read_log(spark, spec).records or [None])[0]
        if not latest or latest["status"] != "started" or holder_of(latest) != hold.record.holder:
            return
        fail_run(spark, hold.run, f"{type(exc).__name__}: {first_line(exc)}"[:500])
        release(spark, spec, hold.record, None)
    except Exception as again:  # noqa: BLE001 - the hold stays; the next command names it
        say(f"run {hold.run.run_id} failed and could not release pipeline {spec.name} ({first_line(again)[:200]})")
