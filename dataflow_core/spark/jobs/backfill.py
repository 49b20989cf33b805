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
touch each other's windows; the read is widened by the first stage's window reach
(`WindowFn.reach`) just enough to complete the windows of the range (for merging windows,
until no window of the range reaches the edge of what was read).

One writer at a time: a run has the pipeline locked (`sinks.pipeline_lock`) before it reads, and reads
the version of the input its lock pinned however often it is resumed; it records itself
finished (or failed, with its reason) and only then releases the lock.

With `plan_only` a batch run stops once every stage's plan is stored, records itself
`planned` and releases the pipeline; `jobs.plans` applies or rejects the plan later.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError, first_line
from dataflow_core.model.input_rules import ProcessingTime
from dataflow_core.model.time import format_instant
from dataflow_core.model.windows import GlobalWindows
from dataflow_core.options import parse_interval, parse_time
from dataflow_core.pipelines import PipelineSpec, StageSpec, layout
from dataflow_core.pipelines.check import with_value_types
from dataflow_core.spark.execute.batch import final_values
from dataflow_core.spark.input.rows import DUPLICATES, EventRange
from dataflow_core.spark.input.upstream import elements_from_panes
from dataflow_core.spark.jobs.corrections import Correcting, correct_stage
from dataflow_core.spark.jobs.crash import crash_point
from dataflow_core.spark.jobs.plan_diff import store_previews
from dataflow_core.spark.jobs.range_input import RangeRead, range_elements, read_margins, read_range
from dataflow_core.spark.jobs.replay import replay_range
from dataflow_core.spark.platform.cache import persist_uncompressed
from dataflow_core.spark.platform.delta import gone_cause
from dataflow_core.spark.platform.session import warehouse_root
from dataflow_core.spark.sinks.definitions import record_definitions, refuse_changed_definitions
from dataflow_core.spark.sinks.lock_holders import Heartbeat, this_owner
from dataflow_core.spark.sinks.fencing import check_lock, fenced_commits
from dataflow_core.spark.sinks.pipeline_lock import PipelineLock, planned_from, release, release_finished, take_lock
from dataflow_core.spark.sinks.results import corrected_results, current_results, standing_panes
from dataflow_core.spark.sinks.runs import (
    APPLIED, Ledger, Run, RunResult, fail_run, finish_run, record_decision, record_planned,
)

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
    plan_only: bool = False,
) -> RunResult:
    """Runs one backfill (see the module docstring); returns its run id and ledger.
    PipelineBusy (before anything is read or written) while another run has the pipeline locked.
    `plan_only`: store the plan of corrections, apply none (`jobs.plans`)."""
    spec = with_value_types(pipeline, warehouse_root(spark))
    span = EventRange(parse_time(start, "--start"), parse_time(end, "--end"))
    interval = parse_interval(batch_interval, "--batch-interval") if replay else None
    now_ms = parse_time(now, "--now") if now is not None else None
    say = progress or (lambda _m: None)
    args: dict = {"start": format_instant(span.start), "end": format_instant(span.end), "replay": replay}
    if replay and plan_only:
        raise DataflowError("--plan-only plans the corrections of a batch backfill; a --replay writes the pane "
                            "history a live run would have emitted, which corrects nothing: leave out one of them")
    if replay:
        args["batch_interval"] = batch_interval
    else:
        _check_first_stage(spec)
    if plan_only:  # a plan is a run of its own: a plain backfill of the range never resumes it
        args["plan_only"] = True
    refuse_changed_definitions(spark, spec)
    lock = take_lock(spark, spec, "replay" if replay else "backfill", args, now_ms, say)
    run = lock.run
    if not run.resumed:
        say(f"run {run.run_id} has locked pipeline {spec.name} (batch {lock.record.batch}) at processing time "
            f"{format_instant(run.now)}, reading version {lock.input_version} of {spec.input_table}; "
            f"micro-batches and other backfills wait until it {'has planned' if plan_only else 'finishes'}")
    result = BackfillRun(spark, spec, span, lock, say, fast=fast, plan_only=plan_only).finish(interval)
    if not (run.resumed and not replay and not plan_only):
        return result
    changed = _input_changed_since(spark, spec, span, lock.input_version)
    if not changed:
        return result
    say(f"run {run.run_id} resumed and finished at the input's version {lock.input_version}, pinned when it began; "
        f"{changed} since: correcting the range again with the input as it is now")
    return run_backfill(spark, pipeline, start, end, now=now, fast=fast, progress=progress)


def _input_changed_since(spark, spec: PipelineSpec, span: EventRange, pinned: int) -> str:
    """What changed in the input rows a backfill of `span` reads since version `pinned`, in
    words (empty when nothing did): a resumed run reads its pin, and the command that resumed
    it promises the range as the input stands when it ran."""
    from dataflow_core.spark.jobs.plan_staleness import span_read, stale_tables
    from dataflow_core.spark.platform.delta import table_version
    from dataflow_core.spark.sinks.pipeline_lock import input_key

    key = input_key(spec.name)
    moved = stale_tables(spark, spec, {key: pinned}, {key: table_version(spark, spec.input_table)}, span,
                         span_read(spec, span))
    return "; ".join(m.describe() for m in moved)


@dataclass
class BackfillRun:
    """One backfill run, from the moment `lock` has the pipeline locked for it to its release:
    what each of its steps reads (the range, the lock with its pinned input version and the
    stages' live watermarks, progress, the fast-path choice) and what they add to (the
    ledger, the stages that got a plan of corrections)."""

    spark: "SparkSession"
    spec: PipelineSpec
    span: EventRange
    lock: PipelineLock
    say: Progress_
    fast: bool | None = None
    plan_only: bool = False
    ledger: Ledger = field(default_factory=Ledger)
    planned: list[StageSpec] = field(default_factory=list)  # stages with a plan of corrections (batch mode)

    @property
    def run(self) -> Run:
        return self.lock.run

    @property
    def correcting(self) -> Correcting:
        return Correcting(self.spark, self.spec, self.run, self.ledger, self.say,
                          self.lock.record.watermarks or None, self.plan_only)

    def check_lock(self) -> None:
        check_lock(self.spark, self.spec, self.lock)

    def finish(self, replay_interval: int | None = None, decided_by: str | None = None) -> RunResult:
        """The run to its end (a replay of `replay_interval` batches, or a batch backfill):
        recorded finished (or `planned`, with the versions it was planned from; `applied`
        too, by `decided_by`, for a plan being applied) or failed, and the lock released
        last (until then, a re-run resumes this run)."""
        spark, spec, run, lock, say = self.spark, self.spec, self.run, self.lock, self.say
        # While it works, the run beats (others tell it from a run that is gone) and each of
        # its commits checks its lock first (an abandoned run writes nothing more).
        with Heartbeat(spark, spec.name, run.run_id, lock.owner or this_owner()), fenced_commits(spark, spec, lock):
            try:
                if replay_interval is not None:
                    self.ledger = replay_range(spark, spec, self.span, replay_interval, run, say, lock.input_version)
                else:
                    self._batch()
                self.check_lock()
                if self.plan_only:
                    versions = planned_from(spec, lock)
                    store_previews(spark, spec, run, versions)
                    record_planned(spark, run, self.ledger, versions)
                    result = RunResult(run.run_id, self.ledger.as_dict(), run.now)
                else:
                    result = finish_run(spark, run, self.ledger)
                    record_definitions(spark, spec)
                    if decided_by is not None:
                        record_decision(spark, run, APPLIED, decided_by)
                crash_point("backfill-finished")
            except BaseException as exc:
                _record_failure(spark, run, exc)
                raise
        if self.plan_only:
            say(f"run {run.run_id} planned its corrections and applied none; the pipeline is released. "
                f"See them: dataflow plan show {run.run_id}; apply: dataflow backfill --pipeline {spec.name} "
                f"--apply {run.run_id}")
            release(spark, spec, lock.record, None)
        else:  # last: until here, a re-run resumes this run
            if self.planned:  # a finished run is never resumed: its plans have served
                say(f"run {run.run_id} finished; dropping its plans of corrections")
            release_finished(spark, spec, lock.record, run.run_id, self.planned, self.ledger)
        return result

    # --- batch ----------------------------------------------------------------------

    def _batch(self) -> None:
        """Every window of the range recomputed and corrected, stage by stage, from the
        input as of the version the lock pinned. A resumed run whose input version is gone
        fails with one line."""
        run, version, spec = self.run, self.lock.input_version, self.spec
        try:
            self._corrected()
        except Exception as exc:
            cause = gone_cause(exc) if run.resumed else None
            if cause is None:
                raise
            raise DataflowError(
                f"backfill run {run.run_id} of {spec.name!r} cannot resume: it reads version {version} of "
                f"{spec.input_table}, which can no longer be read (vacuumed, or the log cleaned: {cause}). Abandon "
                f"it (`dataflow backfill --pipeline {spec.name} --abandon {run.run_id}`: its writes are undone) "
                "and run the backfill again"
            ) from None

    def _corrected(self) -> None:
        """`_batch` on the pinned input; a plan quarantines nothing (its apply does). The
        range's bad rows are written while its windows are computed and written
        (`range_input.read_range`)."""
        spec, span = self.spec, self.span
        read = read_range(self.spark, spec, span, span.widened(*read_margins(spec.stages[0].strategy.window_fn)),
                          self.run, self.ledger, self.say, self.lock.input_version, quarantine=not self.plan_only)
        try:
            self._first_stage(read)
        except BaseException:
            read.wait(failed=True)
            raise

    def _first_stage(self, read: RangeRead) -> None:
        """`_corrected`'s work once the range is `read` (its bad rows waited for before its
        cache goes), then the later stages'."""
        spec, span, ledger = self.spec, self.span, self.ledger
        first = spec.stages[0]
        finals, els, cached = self._first_finals(read)
        ledger.aggregated = ledger.accepted  # a perfect watermark leaves nothing late
        self.say(f"{ledger.accepted:,} unique events, {ledger.duplicates:,} duplicate deliveries; computing windows")
        self.check_lock()
        outcome = correct_stage(self.correcting, first, finals, els, owned=span, input_version=self.lock.input_version,
                                had_results=self.lock.record.versions.get(first.output, -1) >= 0)
        if outcome.planned:
            self.planned.append(first)
        finals.unpersist()
        read.wait()
        cached.unpersist()
        self._later_stages(outcome.results)

    def _first_finals(self, read: RangeRead) -> tuple["DataFrame", "DataFrame", "DataFrame"]:
        """The first stage's final windows starting in the range, its elements and their
        cache: for merging windows, the read widened until no window reaches its edge (the
        ledger's counts then come from the widened read)."""
        from pyspark.sql import functions as F

        spark, spec, span, run, ledger = self.spark, self.spec, self.span, self.run, self.ledger
        first = spec.stages[0]
        wfn = first.strategy.window_fn
        before, after = read_margins(wfn)
        for attempt in range(MAX_WIDENINGS):
            read_span = span.widened(before, after)
            if attempt == 0:
                els, cached = read.elements, read.cached
            else:
                cached = range_elements(spark, spec, read_span, self.lock.input_version, span, ProcessingTime(run.now))
                els = cached.drop(DUPLICATES)
            finals = final_values(els, first.strategy, first.key_columns, first.value_type, run.now, self.fast)
            finals = finals.where((F.col("window_start") >= span.start) & (F.col("window_start") < span.end))
            if not wfn.is_merging:
                break
            finals = persist_uncompressed(finals)  # read twice: whether a window reaches the edge, then corrected
            if not _touches_edge(finals, read_span, wfn.reach, span):
                break
            self.say(f"a merged window reaches the edge of the rows read; widening the read by "
                     f"{2 * max(before, after) // 60000} min")
            finals.unpersist()
            read.wait()
            cached.unpersist()
            before, after = 2 * max(before, wfn.reach), 2 * max(after, wfn.reach)
        else:
            raise DataflowError(
                f"windows of {spec.name!r} keep reaching the edge of the read after {MAX_WIDENINGS} widenings")
        if attempt:  # the widened read's elements may settle which delivery of an event counts
            counts = cached.agg(
                F.count_if((F.col("event_ms") >= span.start) & (F.col("event_ms") < span.end)).alias("unique"),
                F.sum(DUPLICATES).alias("lost")).first()
            ledger.accepted, ledger.duplicates = int(counts["unique"]), int(counts["lost"] or 0)
        return finals, els, cached

    def _later_stages(self, fixes: "DataFrame | None") -> None:
        """Each later stage corrected from its upstream's results. Applied, those are the
        table, corrected by the stage before. Planned only (`fixes`: the upstream's planned
        results rows), they are the table with the upstream's plan laid over it in memory, so
        every stage of a plan is planned at once, exactly as its apply will chain them (the
        stored plans are then applied in order, each against what the plan was made from);
        planning stage by stage, each after the one before was applied, would leave nothing
        to preview beyond the first stage."""
        spark, spec, run = self.spark, self.spec, self.run
        for up, stage in zip(spec.stages, spec.stages[1:]):
            current = current_results(spark, up)
            if self.plan_only and fixes is not None:
                current = corrected_results(current, fixes, up)
            if current is None:
                continue
            mapped = persist_uncompressed(elements_from_panes(standing_panes(current, up), up, stage))
            stage_finals = final_values(mapped, stage.strategy, stage.key_columns, stage.value_type, run.now, self.fast)
            self.check_lock()
            outcome = correct_stage(self.correcting, stage, stage_finals, mapped, owned=None,
                                    had_results=self.lock.record.versions.get(layout.results(stage), -1) >= 0)
            if outcome.planned:
                self.planned.append(stage)
            mapped.unpersist()
            if fixes is not None:
                fixes.unpersist()
            fixes = outcome.results
        if fixes is not None:
            fixes.unpersist()


def _record_failure(spark, run: Run, exc: BaseException) -> None:
    """The run's `failed` row with a one-line reason; the lock stays, so the same command
    resumes the run (or `--abandon` undoes it). Best effort: the error itself is raised."""
    try:
        fail_run(spark, run, f"{type(exc).__name__}: {first_line(exc)}"[:500])
    except Exception:  # noqa: BLE001 - the original error matters more than its record
        pass


def _check_first_stage(spec: PipelineSpec) -> None:
    first = spec.stages[0]
    wfn = first.strategy.window_fn
    if isinstance(wfn, GlobalWindows) or wfn.reach is None:
        what = "one global window, which no event-time range owns" if isinstance(wfn, GlobalWindows) else (
            f"windows of unknown reach ({wfn.describe()} declares no `reach`)")
        raise DataflowError(
            f"pipeline {spec.name!r}: stage {first.output!r} has {what}; backfill needs interval windows of known "
            "reach in the first stage"
        )


def _touches_edge(finals: "DataFrame", read: EventRange, gap: int, span: EventRange) -> bool:
    """A merged window within its reach of the edge of what was read may continue beyond it."""
    from pyspark.sql import functions as F

    near = (F.col("window_start") < read.start + gap) | (F.col("window_end") > read.end - gap)
    return bool(finals.where(near).limit(1).count())
