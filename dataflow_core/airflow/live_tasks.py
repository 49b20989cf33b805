"""The micro-batch DAGs' task bodies: one micro-batch, and what a task log says of the
results' completeness (the earliest pending processing-time timer, read without Spark).
Shared plumbing (Spark in the task's process, logging) is `airflow.tasks`'.
"""

from __future__ import annotations

import time
from typing import Any

from dataflow_core.airflow.tasks import (
    Say, checked, ledger_counts, log, log_info, shown_counts, spark_session, written_per_stage,
)
from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import layout


class Busy(Exception):
    """The pipeline is already running elsewhere (the task is skipped, not failed)."""


def microbatch(pipeline: str, say: Say = log_info) -> dict[str, Any]:
    """One micro-batch of `pipeline`; raises Busy when another run has the pipeline locked."""
    try:
        from dataflow_core.errors import PipelineBusy
        from dataflow_core.spark.jobs.microbatch import run_microbatch
    except ImportError as exc:
        raise DataflowError(
            f"micro-batches are not available in this installation ({exc}); "
            "dataflow_core.spark.jobs.microbatch is needed"
        ) from None
    from dataflow_core.airflow.assets import results_versions, run_corrections
    from dataflow_core.airflow.lineage import report_lineage

    spark = spark_session(f"dataflow-microbatch-{pipeline}")
    checked(spark, pipeline)
    before = finished_batches(pipeline)
    versions = results_versions(pipeline)
    try:
        result = run_microbatch(spark, pipeline, progress=lambda m: say("  " + m))
    except PipelineBusy as exc:
        raise Busy(str(exc)) from None
    batches = [b for b in finished_batches(pipeline) if b not in before]
    ledger = ledger_counts(result.ledger)
    say(f"micro-batch {result.run_id} of {pipeline}: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in shown_counts(ledger).items()))
    if not result.ledger_ok:
        raise DataflowError(f"micro-batch {result.run_id} of {pipeline}: the ledger does not balance: {result.ledger}")
    # The pane log names a micro-batch's panes by the batch (`batch-N`), not by the run id.
    run_ids = [f"batch-{b}" for b in batches]
    say(f"batches written: {', '.join(run_ids) or 'none (nothing new)'}")
    try:
        timer = next_timer(pipeline)
        say(completeness(timer, time.time() * 1000))
    except DataflowError as exc:  # the batch is done; not knowing its next timer must not fail it
        timer = None
        log.warning(f"cannot tell when the results are complete: {exc}")
    report_lineage(pipeline)
    return {"run_id": result.run_id, "pane_run_ids": run_ids, "ledger": ledger,
            "written": written_per_stage(result.ledger), "next_timer": timer,
            "corrections": run_corrections(pipeline, [result.run_id, *run_ids], versions, late_only=True)}


def next_timer(pipeline: str, warehouse: str | None = None) -> int | None:
    """The earliest processing-time timer (ms) any key of the pipeline still has pending
    (least `wake_timer` of the stages' `<output>__state` tables, read without Spark), or None.
    Such a timer fires only in a batch that runs after it: until then the results of its
    windows lack the pane it will emit."""
    from dataflow_core.model.time import END_OF_TIME
    from dataflow_core.pipelines import get
    from dataflow_core.query import list_tables, query

    tables = set(list_tables(warehouse))
    found = []
    for stage in get(pipeline).stages:
        name = layout.state(stage)
        if name in tables:
            least = query(f"SELECT min(wake_timer) AS t FROM {name}", warehouse).table.column(0).to_pylist()[0]
            if least is not None and int(least) < END_OF_TIME - 1:
                found.append(int(least))
    return min(found) if found else None


def completeness(timer: int | None, now_ms: float) -> str:
    """One line saying when the live results are complete, so that an operator reading a task's
    log knows whether a window may still change without reading the state table."""
    from dataflow_core.model.time import format_instant

    if timer is None:
        return "no processing-time timer is pending: the results are complete for what the watermark has passed"
    when = format_instant(timer)
    if timer < now_ms:
        return f"a processing-time timer was due at {when}: the next batch fires it"
    return f"a processing-time timer is due at {when}: the results of its windows are incomplete until a batch runs after it"


def finished_batches(pipeline: str, warehouse: str | None = None) -> list[int]:
    """The numbers of `pipeline`'s finished micro-batches (from `dataflow_batches`, read
    without Spark)."""
    from dataflow_core.query import list_tables, literal, query

    if layout.BATCHES not in list_tables(warehouse):
        return []
    table = query(f"SELECT DISTINCT batch FROM {layout.BATCHES} WHERE pipeline = "
                  f"{literal(pipeline)} AND status = 'finished' ORDER BY batch", warehouse).table
    return [int(b) for b in table.column(0).to_pylist()]
