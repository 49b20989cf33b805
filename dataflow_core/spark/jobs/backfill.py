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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn, SumFn
from dataflow_core.model.time import END_OF_TIME, Instant, format_instant, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.model.windows import FixedWindows, GlobalWindows, Sessions, SlidingWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, get
from dataflow_core.runners.keyed import HoldSpan, Schedule, Step, downstream_schedule
from dataflow_core.spark.sinks import results as outputs
from dataflow_core.spark.execute.batch import final_values
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.input.rows import (
    EventRange, count_rows, elements, quarantined, read_rows, tag_rows, write_quarantine,
)
from dataflow_core.spark.sinks.runs import Ledger, Run, RunResult, finish_run, record_watermarks, start_run
from dataflow_core.spark.input.upstream import elements_from_panes, results_as_panes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Progress_ = Callable[[str], None]
MAX_WIDENINGS = 8


def parse_time(text: str | dt.datetime, option: str) -> Instant:
    """An ISO date (midnight UTC) or instant, for --start / --end."""
    if isinstance(text, dt.datetime):
        moment = text
    else:
        raw = str(text).strip()
        try:
            moment = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise DataflowError(
                f"{option}: {text!r} is not an ISO date or time (e.g. 2024-05-01 or 2024-05-01T06:00:00Z)"
            ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


@dataclass
class _StageOutcome:
    panes: int = 0
    retractions: int = 0
    corrected: int = 0


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
    if replay:
        ledger = _replay(spark, spec, span, interval, run, say)  # type: ignore[arg-type]
    else:
        ledger = _batch(spark, spec, span, run, fast, say)
    return finish_run(spark, run, ledger)


def _interval(text: str) -> int:
    try:
        ms = parse_duration(text)
    except ValueError as exc:
        raise DataflowError(f"--batch-interval: {exc}") from None
    if ms <= 0:
        raise DataflowError("--batch-interval: must be positive")
    return ms


# --- reading and quarantine -------------------------------------------------------


def _read(spark, spec: PipelineSpec, span: EventRange, read_span: EventRange, run: Run, ledger: Ledger, say):
    """Tagged rows of `read_span`; counts and quarantines those of `span` (the ledger's)."""
    from pyspark.sql import functions as F

    tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span))
    core = tag_rows(spark, spec, read_rows(spark, spec, span))
    counts = count_rows(core)
    ledger.read, ledger.quarantined = counts.read, counts.quarantined
    if counts.quarantined:
        write_quarantine(spark, spec, quarantined(core), run.run_id)
    say(f"read {counts.read:,} rows of {spec.input_table} in the range, {counts.quarantined:,} quarantined "
        f"(table {spec.input_table}_quarantine)")
    return tagged


# --- batch --------------------------------------------------------------------------


def _batch(spark, spec: PipelineSpec, span: EventRange, run: Run, fast, say) -> Ledger:
    from pyspark.sql import functions as F

    first = spec.stages[0]
    wfn = first.strategy.window_fn
    if isinstance(wfn, GlobalWindows):
        raise DataflowError(
            f"pipeline {spec.name!r}: stage {first.output!r} has one global window, which no "
            "event-time range owns; backfill needs interval windows in the first stage"
        )
    from dataflow_core.spark.jobs.corrections import live_watermarks

    live = live_watermarks(spark, spec)  # refuses while a micro-batch is unfinished
    ledger = Ledger()
    before, after = _margins(wfn)
    finals = None
    for attempt in range(MAX_WIDENINGS):
        read_span = span.widened(before, after)
        if attempt == 0:
            tagged = _read(spark, spec, span, read_span, run, ledger, say)
        else:
            tagged = tag_rows(spark, spec, read_rows(spark, spec, read_span))
        els = elements(spec, tagged).persist()
        finals = final_values(els, first.strategy, first.key_columns, first.value_type, run.now, fast)
        finals = finals.where((F.col("window_start") >= span.start) & (F.col("window_start") < span.end)).persist()
        if not isinstance(wfn, Sessions) or not _touches_edge(finals, read_span, wfn.gap, span):
            break
        say(f"a session reaches the edge of the rows read; widening the read by {2 * max(before, after) // 60000} min")
        finals.unpersist()
        els.unpersist()
        before, after = 2 * max(before, wfn.gap), 2 * max(after, wfn.gap)
    else:
        raise DataflowError(f"sessions of {spec.name!r} keep reaching the edge of the read after {MAX_WIDENINGS} widenings")
    unique = els.where((F.col("event_ms") >= span.start) & (F.col("event_ms") < span.end)).count()
    ledger.accepted = unique
    ledger.duplicates = ledger.read - ledger.quarantined - unique
    ledger.aggregated = unique  # a perfect watermark leaves nothing late
    say(f"{unique:,} unique events, {ledger.duplicates:,} duplicate deliveries; computing windows")
    owned = (F.col("window_start") >= F.lit(span.start)) & (F.col("window_start") < F.lit(span.end))
    _correct(spark, first, finals, run, ledger, say, owned_ms=owned, corrected=_live(spark, spec, first, els, live, run, say))
    finals.unpersist()
    els.unpersist()
    for up, stage in zip(spec.stages, spec.stages[1:]):
        current = outputs.current_results(spark, up)
        if current is None:
            continue
        mapped = elements_from_panes(results_as_panes(current, up), up, stage).persist()
        stage_finals = final_values(mapped, stage.strategy, stage.key_columns, stage.value_type, run.now, fast)
        _correct(spark, stage, stage_finals.persist(), run, ledger, say, owned_ms=None,
                 corrected=_live(spark, spec, stage, mapped, live, run, say))
        mapped.unpersist()
    return ledger


def _live(spark, spec: PipelineSpec, stage: StageSpec, els: "DataFrame", live: dict | None, run: Run, say):
    """When micro-batches run the pipeline: what carries a stage's corrections into their
    state (and, for the first stage, the counted event ids into their seen ids)."""
    if live is None:
        return None
    from dataflow_core.spark.jobs import corrections as live_state

    def corrected(fixes: "DataFrame") -> None:
        watermark = live.get(stage.output, BEGINNING_OF_TIME)
        live_state.restate(spark, spec, stage, fixes, els, watermark, run.run_id)
        if stage is spec.stages[0]:
            live_state.mark_seen(spark, spec, stage, fixes, els, run.run_id)
        say(f"stage {stage.output}: live state corrected (micro-batches carry on from these figures)")

    return corrected


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


def _correct(
    spark, stage: StageSpec, finals: "DataFrame", run: Run, ledger: Ledger, say, owned_ms,
    corrected: Callable[["DataFrame"], None] | None = None,
) -> None:
    """Diff the recomputed windows against the stage's results; write the corrections, and
    hand them (`live_state.CORRECTION_COLUMNS`) to `corrected` (the live state's update)."""
    from pyspark.sql import functions as F

    keys = list(stage.key_columns)
    wid = [*keys, "window_start", "window_end"]
    ours = finals.select(*wid, "value", "ts", F.lit(True).alias("_c"))
    current = outputs.current_results(spark, stage)
    if current is not None:
        theirs = current.select(
            *keys,
            F.unix_millis("window_start").alias("window_start"),
            F.unix_millis("window_end").alias("window_end"),
            "value", F.unix_millis("timestamp").alias("ts"), "timing", "pane_index", "on_time_index",
        )
        if owned_ms is not None:
            theirs = theirs.where(owned_ms)
    else:
        theirs = None
    c = ours.select(*wid, F.col("value").alias("c_value"), F.col("ts").alias("c_ts"), "_c")
    if theirs is None:
        diff = c.select(
            *wid, "c_value", "c_ts", F.lit(None).cast(stage.value_type).alias("r_value"),
            F.lit(None).cast("bigint").alias("r_ts"), F.lit(None).cast("string").alias("r_timing"),
            F.lit(None).cast("int").alias("r_index"), F.lit(None).cast("int").alias("r_on_time"),
            F.lit(True).alias("has_c"), F.lit(False).alias("has_r"),
        )
    else:
        r = theirs.select(
            *wid, F.col("value").alias("r_value"), F.col("ts").alias("r_ts"), F.col("timing").alias("r_timing"),
            F.col("pane_index").alias("r_index"), F.col("on_time_index").alias("r_on_time"),
            F.lit(True).alias("_r"),
        )
        cond = [c[k].eqNullSafe(r[k]) for k in wid]
        joined = c.join(r, cond, "full_outer")
        diff = joined.select(
            *[F.coalesce(c[k], r[k]).alias(k) for k in wid],
            "c_value", "c_ts", "r_value", "r_ts", "r_timing", "r_index", "r_on_time",
            F.coalesce(c["_c"], F.lit(False)).alias("has_c"), F.coalesce(r["_r"], F.lit(False)).alias("has_r"),
        )
    changed = diff.where(
        (F.col("has_c") != F.col("has_r"))
        | ~(F.col("c_value").eqNullSafe(F.col("r_value")) & F.col("c_ts").eqNullSafe(F.col("r_ts")))
    ).persist()
    now = F.lit(run.now).cast("bigint")
    empty = stage.strategy.combiner.extract_output(stage.strategy.combiner.create_accumulator())
    if not stage.retracting and empty is not None:
        # Without retractions, a window that lost all its data is corrected by a pane with
        # the empty aggregate (a count of 0), so pane-log readers see the change too.
        changed = changed.select(
            *[c for c in changed.columns if c not in ("c_value", "c_ts", "has_c")],
            F.when(F.col("has_c"), F.col("c_value")).otherwise(F.lit(empty).cast(stage.value_type)).alias("c_value"),
            F.when(F.col("has_c"), F.col("c_ts")).otherwise(F.col("r_ts")).alias("c_ts"),
            F.lit(True).alias("has_c"),
        )
    retract = changed.where(F.col("has_r")) if stage.retracting else changed.limit(0)
    retractions = retract.select(
        *wid, F.col("r_value").alias("value"), F.col("r_ts").alias("ts"), F.col("r_timing").alias("timing"),
        F.col("r_index").alias("pane_index"), F.col("r_on_time").alias("on_time_index"),
        (F.col("r_index") == 0).alias("is_first"), F.lit(False).alias("is_last"),
        F.lit(True).alias("is_retraction"), now.alias("emitted_at"),
    )
    index = F.coalesce(F.col("r_index") + 1, F.lit(0))
    value = F.col("c_value")
    if stage.strategy.accumulation is AccumulationMode.DISCARDING and type(stage.strategy.combiner) in (SumFn, CountFn):
        value = F.col("c_value") - F.coalesce(F.col("r_value"), F.lit(0))  # a discarding pane is the difference
    fresh = changed.where("has_c").select(
        *wid, value.cast(stage.value_type).alias("value"), F.col("c_ts").alias("ts"),
        F.when(F.col("r_on_time").isNull(), F.lit("ON_TIME")).otherwise(F.lit("LATE")).alias("timing"),
        index.alias("pane_index"),
        F.coalesce(F.col("r_on_time") + 1, F.lit(0)).alias("on_time_index"),
        (index == 0).alias("is_first"), F.lit(True).alias("is_last"),
        F.lit(False).alias("is_retraction"), now.alias("emitted_at"),
    )
    panes = retractions.unionByName(fresh)
    counts = changed.agg(
        F.count_if("has_c").alias("panes"),
        F.count_if(F.col("has_r")).alias("corrected"),
    ).first()
    n_retractions = retract.count()
    fixes = None
    if corrected is not None:
        # Taken now: the writes below make Spark recompute `changed` against the new results.
        gone = changed.where(~F.col("has_c")).select(
            *wid, F.lit(False).alias("present"), F.lit(None).cast(stage.value_type).alias("value"),
            F.lit(None).cast("bigint").alias("ts"), F.lit("LATE").alias("timing"), F.lit(-1).alias("pane_index"),
            F.lit(None).cast("int").alias("on_time_index"), F.lit(False).alias("is_retraction"),
            now.alias("emitted_at"))
        fixes = fresh.withColumn("present", F.lit(True)).unionByName(gone, allowMissingColumns=True).localCheckpoint()
    rows = outputs.pane_rows(stage, panes, run.run_id)
    written = outputs.write_panes(spark, stage, rows)
    if stage.keeps_results:
        results = outputs.pane_rows(stage, fresh, run.run_id).select(
            *keys, "window_start", "window_end",
            "value",
            "timestamp", "timing", "pane_index", "on_time_index",
            F.col("emitted_at").alias("updated_at"), "pane_id", "run_id", F.lit(False).alias("_delete"),
        )
        if stage.strategy.accumulation is AccumulationMode.DISCARDING:
            totals = changed.where("has_c").select(*wid, F.col("c_value").cast(stage.value_type).alias("_total"))
            results = _with_totals(results, totals, wid)
        gone = changed.where(~F.col("has_c")).select(
            *keys, F.timestamp_millis("window_start").alias("window_start"),
            F.timestamp_millis("window_end").alias("window_end"),
        )
        deletes = results.limit(0).unionByName(gone, allowMissingColumns=True).withColumn("_delete", F.lit(True))
        outputs.merge_results(spark, stage, results.unionByName(deletes))
    if fixes is not None:
        corrected(fixes)  # type: ignore[misc]
    changed.unpersist()
    outcome = {"panes": int(counts["panes"]), "retractions": n_retractions, "corrected_windows": int(counts["corrected"])}
    ledger.per_stage[stage.output] = outcome
    ledger.panes += outcome["panes"]
    ledger.retractions += n_retractions
    ledger.corrected_windows += outcome["corrected_windows"]
    say(f"stage {stage.output}: {outcome['panes']:,} panes, {n_retractions:,} retractions "
        f"({written:,} new in {stage.output}_panes), {outcome['corrected_windows']:,} windows corrected")


def _with_totals(results: "DataFrame", totals: "DataFrame", wid: list[str]) -> "DataFrame":
    """Discarding stages keep the window's total in the results, not the last pane."""
    from pyspark.sql import functions as F

    t = totals.select(
        *[c for c in wid if c not in ("window_start", "window_end")],
        F.timestamp_millis("window_start").alias("window_start"),
        F.timestamp_millis("window_end").alias("window_end"),
        "_total",
    )
    keys = [c for c in wid]
    joined = results.join(t, [results[k].eqNullSafe(t[k]) for k in keys], "left")
    cols = [results[c] if c != "value" else F.coalesce(t["_total"], results["value"]).alias("value") for c in results.columns]
    return joined.select(*cols)


# --- replay -----------------------------------------------------------------------


def _replay(spark, spec: PipelineSpec, span: EventRange, interval: int, run: Run, say) -> Ledger:
    from pyspark.sql import functions as F

    ledger = Ledger()
    tagged = _read(spark, spec, span, span, run, ledger, say)
    els = elements(spec, tagged).persist()
    unique = els.count()
    ledger.accepted = unique
    ledger.duplicates = ledger.read - ledger.quarantined - unique
    if not unique:
        say("no accepted rows in the range; nothing to replay")
        els.unpersist()
        return ledger
    t0_row = els.agg(F.min("ingest_ms").alias("t0"), F.max("ingest_ms").alias("t1")).first()
    t0 = t0_row["t0"] - t0_row["t0"] % interval
    batches = els.withColumn("batch", F.floor((F.col("ingest_ms") - F.lit(t0)) / F.lit(interval)).cast("bigint"))
    stats = {
        r["batch"]: (r["lo"], r["hi"])
        for r in batches.groupBy("batch").agg(F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi")).collect()
    }
    last = (t0_row["t1"] - t0) // interval
    estimator = spec.watermark()
    steps = []
    for b in range(last + 1):
        at = t0 + (b + 1) * interval
        lo_hi = stats.get(b)
        wm = estimator.update(Progress(batch_event_times=lo_hi or (), processing_time=at))
        steps.append(Step((b,), at, wm))
    schedule = Schedule(steps, BEGINNING_OF_TIME)
    say(f"{unique:,} unique events in {len(steps):,} micro-batches of {interval // 1000}s; "
        f"watermark ends at {format_watermark(steps[-1].watermark)}")
    record_watermarks(spark, run, spec.stages[0].output, [(n, s.time, s.watermark) for n, s in enumerate(steps)])
    first = spec.stages[0]
    arrivals = batches.select(
        *first.key_columns, "value", "event_ms", F.lit(False).alias("retraction"),
        F.array(F.col("batch")).alias("seq"), (F.lit(t0) + (F.col("batch") + 1) * F.lit(interval)).alias("at_ms"),
    )
    out = run_stage(arrivals, first.strategy, schedule, KeyCodec(first.key_columns), first.value_type).persist()
    totals = out.where("kind = 'stats'").agg(F.sum("elements").alias("n"), F.sum("dropped").alias("d")).first()
    ledger.dropped_late = int(totals["d"] or 0)
    ledger.aggregated = int(totals["n"] or 0) - ledger.dropped_late
    _write_history(spark, first, out, run, ledger, say)
    previous, prev_stage = out, first
    for stage in spec.stages[1:]:
        spans = [
            HoldSpan(tuple(r["sub"]), r["hold_time"], None if r["hold_end"] is None else tuple(r["hold_end"]),
                     r["hold_end_time"], r["hold"])
            for r in previous.where("kind = 'hold'").select("sub", "hold", "hold_end", "hold_time", "hold_end_time").collect()
        ]
        schedule = downstream_schedule(schedule, spans)
        record_watermarks(spark, run, stage.output, [(n, s.time, s.watermark) for n, s in enumerate(schedule.steps)])
        panes = previous.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn("at_ms", F.col("emitted_at"))
        mapped = elements_from_panes(panes, prev_stage, stage, passthrough=("seq", "at_ms"))
        out2 = run_stage(mapped, stage.strategy, schedule, KeyCodec(stage.key_columns), stage.value_type).persist()
        _write_history(spark, stage, out2, run, ledger, say)
        previous.unpersist()
        previous, prev_stage = out2, stage
    previous.unpersist()
    els.unpersist()
    return ledger


def _write_history(spark, stage: StageSpec, out: "DataFrame", run: Run, ledger: Ledger, say) -> None:
    from pyspark.sql import functions as F

    panes = out.where("kind = 'pane'")
    counts = panes.agg(F.count_if(~F.col("is_retraction")).alias("p"), F.count_if("is_retraction").alias("r")).first()
    written = outputs.write_panes(spark, stage, outputs.pane_rows(stage, panes, run.run_id))
    if stage.keeps_results:
        finals = outputs.final_rows(stage, panes, run.run_id)
        if stage.strategy.accumulation is AccumulationMode.DISCARDING:
            wid = [*stage.key_columns, "window_start", "window_end"]
            merge = F.sum if type(stage.strategy.combiner) in (SumFn, CountFn) else (
                F.min if stage.strategy.combiner.name == "min" else F.max)
            totals = panes.groupBy(*wid).agg(merge("value").alias("_total"))
            finals = _with_totals(finals, totals, wid)
        outputs.merge_results(spark, stage, finals)
    p, r = int(counts["p"]), int(counts["r"])
    ledger.per_stage[stage.output] = {"panes": p, "retractions": r, "corrected_windows": 0}
    ledger.panes += p
    ledger.retractions += r
    say(f"stage {stage.output}: {p:,} panes and {r:,} retractions ({written:,} new in {stage.output}_panes)")


def format_watermark(ms: Instant) -> str:
    """A watermark for messages: an instant, or the beginning or end of time."""
    if ms >= END_OF_TIME:
        return "the end of time"
    if ms <= BEGINNING_OF_TIME:
        return "the beginning of time"
    return format_instant(ms)
