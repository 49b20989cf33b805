"""`dataflow backfill`: a pipeline over an event-time range of its Delta input.

Batch mode (the paper's figure 10) computes every window of the range from the input as
it stands, with a perfect watermark, and corrects what earlier runs wrote: each changed
window gets (in retracting mode) the retraction of its standing pane, then the corrected
pane; results rows are replaced, and rows of windows that no longer exist are retracted
and deleted. A later stage is recomputed from its upstream's current results, so it is
corrected too. Re-running the same backfill finds nothing to change.

Replay mode (figure 11) processes the range's input in ingest-time order as micro-batches
of `batch_interval`, the pipeline's watermark estimator updated after each batch and the
processing time set to each batch's end, and writes the pane history a live pipeline would
have emitted.

A window belongs to the range its start falls in, so backfills of adjacent ranges never
touch each other's windows; the read is widened just enough to complete the windows of
the range (for sessions, until no session of the range reaches the edge of what was read).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import format_instant, parse_duration
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.options import parse_time
from dataflow_core.pipelines import PipelineSpec, StageSpec, get
from dataflow_core.spark.execute.batch import final_values
from dataflow_core.spark.input.rows import EventRange
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.jobs.corrections import correct_stage
from dataflow_core.spark.jobs.range_input import range_elements, read_range
from dataflow_core.spark.jobs.replay import replay_range
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.delta import gone_cause, table_version
from dataflow_core.spark.sinks.batches import hold_for_backfill, release_backfill
from dataflow_core.spark.sinks.corrections_plan import forget_plans, read_plan
from dataflow_core.spark.sinks.results import current_results, standing_panes
from dataflow_core.spark.sinks.runs import Ledger, Run, RunResult, finish_run, start_run

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progress_ = Callable[[str], None]
MAX_WIDENINGS = 8


def run_backfill(
    spark: "SparkSession",
    pipeline: str,
    start: str | dt.datetime,
    end: str | dt.datetime,
    replay: bool = False,
    batch_interval: str = "1m",
    now: str | dt.datetime | None = None,
    fast: bool | None = None,
    progress: Progress_ | None = None,
) -> RunResult:
    """Runs one backfill (see the module docstring); returns its run id and ledger."""
    spec = get(pipeline)
    span = EventRange(parse_time(start, "--start"), parse_time(end, "--end"))
    interval = _interval(batch_interval) if replay else None
    now_ms = parse_time(now, "--now") if now is not None else int(time.time() * 1000)
    say = progress or (lambda _m: None)
    args = {"start": format_instant(span.start), "end": format_instant(span.end), "replay": replay}
    if replay:
        args["batch_interval"] = batch_interval
    run = start_run(spark, spec.name, "replay" if replay else "backfill", args, now_ms)
    if run.resumed:
        say(f"resuming unfinished run {run.run_id} (processing time {format_instant(run.now)})")
    hold = hold_for_backfill(spark, spec, run.run_id)  # PipelineBusy while a micro-batch holds it
    if hold is not None:
        say(f"holding pipeline {spec.name} (live batch {hold.batch}): micro-batches wait until this run finishes")
    planned: list[StageSpec] = []  # stages with a plan of corrections (batch mode)
    if replay:
        ledger = replay_range(spark, spec, span, interval, run, say)  # type: ignore[arg-type]
    else:
        ledger = _batch(spark, spec, span, run, fast, say, None if hold is None else hold.watermarks, planned)
    if hold is not None:
        release_backfill(spark, spec, hold, ledger)
    result = finish_run(spark, run, ledger)
    if planned:  # a finished run is never resumed: its plans have served
        say(f"run {run.run_id} finished; dropping its plans of corrections")
    for stage in planned:
        forget_plans(spark, stage, [run.run_id])
    return result


def _interval(text: str) -> int:
    try:
        ms = parse_duration(text)
    except ValueError as exc:
        raise DataflowError(f"--batch-interval: {exc}") from None
    if ms <= 0:
        raise DataflowError("--batch-interval: must be positive")
    return ms


# --- batch --------------------------------------------------------------------------


def _batch(spark, spec: PipelineSpec, span: EventRange, run: Run, fast, say, live: dict | None,
           planned_stages: list[StageSpec]) -> Ledger:
    """Every window of the range recomputed and corrected, stage by stage; `live` holds the
    stages' live watermarks when micro-batches run the pipeline. The stages that got a plan
    of corrections are added to `planned_stages`. A resumed run whose plan names a version
    of the input that is gone fails with one line."""
    first = spec.stages[0]
    wfn = first.strategy.window_fn
    if isinstance(wfn, GlobalWindows):
        raise DataflowError(
            f"pipeline {spec.name!r}: stage {first.output!r} has one global window, which no "
            "event-time range owns; backfill needs interval windows in the first stage"
        )
    version, planned = _input_version(spark, spec, first, run)
    try:
        return _corrected(spark, spec, span, run, fast, say, live, planned_stages, version)
    except Exception as exc:
        cause = gone_cause(exc) if planned else None
        if cause is None:
            raise
        raise DataflowError(
            f"backfill run {run.run_id} of {spec.name!r} cannot resume: it planned stage {first.output!r} from "
            f"version {version} of {spec.input_table}, which can no longer be read (vacuumed, or the log cleaned: "
            f"{cause}); what it wrote before it stopped stays. To start it afresh, move away the tables it was "
            f"writing ({first.output}, {first.output}_panes, {first.output}__corrections, {spec.name}__seen_ids) "
            "and run it again"
        ) from None


def _corrected(spark, spec: PipelineSpec, span: EventRange, run: Run, fast, say, live: dict | None,
               planned: list[StageSpec], version: int) -> Ledger:
    """`_batch` on the input as of `version`."""
    from pyspark.sql import functions as F

    first = spec.stages[0]
    wfn = first.strategy.window_fn
    ledger = Ledger()
    before, after = _margins(wfn)
    finals = None
    for attempt in range(MAX_WIDENINGS):
        read_span = span.widened(before, after)
        if attempt == 0:
            els, cached = read_range(spark, spec, span, read_span, run, ledger, say, version)
        else:
            els = cached = range_elements(spark, spec, read_span, version)
        finals = final_values(els, first.strategy, first.key_columns, first.value_type, run.now, fast)
        finals = finals.where((F.col("window_start") >= span.start) & (F.col("window_start") < span.end))
        if not isinstance(wfn, Sessions):
            break
        finals = persist_uncompressed(finals)  # read twice: whether a session reaches the edge, then corrected
        if not _touches_edge(finals, read_span, wfn.gap, span):
            break
        say(f"a session reaches the edge of the rows read; widening the read by {2 * max(before, after) // 60000} min")
        finals.unpersist()
        cached.unpersist()
        before, after = 2 * max(before, wfn.gap), 2 * max(after, wfn.gap)
    else:
        raise DataflowError(f"sessions of {spec.name!r} keep reaching the edge of the read after {MAX_WIDENINGS} widenings")
    if attempt:  # the widened read's elements may settle which delivery of an event counts
        ledger.accepted = els.where((F.col("event_ms") >= span.start) & (F.col("event_ms") < span.end)).count()
        ledger.duplicates = ledger.read - ledger.quarantined - ledger.accepted
    ledger.aggregated = ledger.accepted  # a perfect watermark leaves nothing late
    say(f"{ledger.accepted:,} unique events, {ledger.duplicates:,} duplicate deliveries; computing windows")
    if correct_stage(spark, spec, first, finals, els, run, ledger, say, owned=span, live_watermarks=live,
                     input_version=version):
        planned.append(first)
    finals.unpersist()
    cached.unpersist()
    for up, stage in zip(spec.stages, spec.stages[1:]):
        current = current_results(spark, up)
        if current is None:
            continue
        mapped = persist_uncompressed(elements_from_panes(standing_panes(current, up), up, stage))
        stage_finals = final_values(mapped, stage.strategy, stage.key_columns, stage.value_type, run.now, fast)
        if correct_stage(spark, spec, stage, stage_finals, mapped, run, ledger, say, owned=None, live_watermarks=live):
            planned.append(stage)
        mapped.unpersist()
    return ledger


def _input_version(spark, spec: PipelineSpec, first: StageSpec, run: Run) -> tuple[int, bool]:
    """The version of the input the run reads (one snapshot for all its reads): the latest,
    or, resuming a run that planned to recompute its first stage from the input, the version
    that plan names (`sinks.corrections_plan`); and whether it is that planned one."""
    if run.resumed:
        plan = read_plan(spark, first, run.run_id)
        if plan is not None and plan.input_version is not None:
            return plan.input_version, True
    return table_version(spark, spec.input_table), False


def _margins(wfn) -> tuple[int, int]:
    """How far before and after the range to read so its windows are complete."""
    if isinstance(wfn, (FixedWindows, SlidingWindows)):
        return 0, wfn.size
    if isinstance(wfn, Sessions):
        return 4 * wfn.gap, 4 * wfn.gap
    return 0, 0


def _touches_edge(finals: "DataFrame", read: EventRange, gap: int, span: EventRange) -> bool:
    """A session near the edge of what was read may continue beyond it."""
    from pyspark.sql import functions as F

    near = (F.col("window_start") < read.start + gap) | (F.col("window_end") > read.end - gap)
    return bool(finals.where(near).limit(1).count())
