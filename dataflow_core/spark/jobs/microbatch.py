"""`dataflow microbatch`: one (or a loop of) exactly-once micro-batches of a pipeline.

New input comes from Structured Streaming's Delta source with an available-now trigger and
`foreachBatch`: the stream's checkpoint remembers which table versions were consumed and
refuses a second concurrent query on it (MillWheel's sequencer), and a batch that crashed
is delivered again, with the same rows, to the next run. A batch with no new input (a
"tick") still fires due timers and watermark panes. Commits that rewrite input rows (an
UPDATE or DELETE that fixes the input) are not live events: the stream skips them
(`skipChangeCommits`), and a `dataflow backfill` over their range applies them, to the
results and to the live state (`live_state`).

Each batch, in order: record its number and processing time (a retry reuses both);
quarantine bad rows; drop duplicate deliveries (event ids are remembered in
`<pipeline>__seen_ids` for the stage's allowed lateness plus a day of event time behind
the watermark); advance the watermark estimator; then per stage, on the keys that got data
or have a timer due (found through the state table's wake-up columns), fire timers,
deliver elements and move the watermark (`runners.keyed.run_key`); write panes, results and
state; record the batch as finished with its ledger and watermarks.

Exactly once: every write of batch N is a Delta commit under the idempotent key
(`dataflow:<pipeline>:<table>`, N), so a retried batch skips what already committed; and a
retry reads state and seen ids as of the versions recorded when the batch started (time
travel), so it computes exactly what the first attempt did.

Fenced (MillWheel's sequencer): each attempt at batch N claims it with a `started` row in
`dataflow_batches` under the idempotent key (`...:batches:started`, N*1000 + attempt), so
of two runs claiming the same attempt exactly one commits (the other is refused). A later
attempt (a retry after a crash, or a second run while the first still goes) supersedes the
earlier one: before each of its commits a run checks that no later attempt claimed its
batch, and stops with a clear message if one did. Both attempts compute the same rows from
the same recorded versions and write them under the same keys, so whichever commits first
wins and the other's commit is skipped: the tables are those of one run. A run whose input
is behind what is committed (its stream batch already finished, or a recreated stream
checkpoint) writes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from dataflow_core.errors import DataflowError
from dataflow_core.model.time import END_OF_TIME, Instant, format_instant, parse_duration
from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
from dataflow_core.pipelines import PipelineSpec, StageSpec, get
from dataflow_core.runners.keyed import WATERMARK, TIMERS, HoldSpan, Schedule, Step, downstream_schedule
from dataflow_core.spark.sinks import results as outputs
from dataflow_core.spark.jobs.backfill import format_watermark
from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage
from dataflow_core.spark.input.rows import elements, quarantined, tag_rows, write_quarantine
from dataflow_core.spark.sinks.runs import Ledger, RunResult
from dataflow_core.spark.platform.session import warehouse_root
from dataflow_core.spark.platform.tables import read_table, register_table, table_exists, table_path
from dataflow_core.spark.input.upstream import elements_from_panes

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BATCHES_TABLE = "dataflow_batches"
BATCHES_SCHEMA = (
    "pipeline string, batch bigint, stream_batch bigint, now_ms bigint, now timestamp, status string, "
    "recorded_at timestamp, versions string, watermarks string, estimator binary, ledger string, "
    "attempt int, run_token string, stream_id string"
)
CRASH_ENV = "DATAFLOW_CRASH_AT"
"""Test switch: the process exits (as if killed) right after the named commit point."""
SEEN_HORIZON = parse_duration("1d")
BUSY_EXIT = 75
WAKE_COLUMNS = ("wake_timer", "wake_watermark")
"""The state table is clustered on when each key next needs a visit (OPTIMIZE, run by the
maintenance DAG, lays it out so), so finding a batch's due keys skips the files of the rest."""
ATTEMPTS = 1000
"""Attempts per batch in the claim's idempotent-write version (N * ATTEMPTS + attempt)."""


class PipelineBusy(DataflowError):
    """Another run of the same pipeline holds it: it claimed this batch first, took it over,
    or holds the stream checkpoint."""


def state_table(stage: StageSpec) -> str:
    return f"{stage.output}__state"


def seen_table(spec: PipelineSpec) -> str:
    return f"{spec.name}__seen_ids"


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        print(f"[crash switch] exiting at {name}", flush=True)
        os._exit(137)


# --- batch records -----------------------------------------------------------------


@dataclass
class BatchRecord:
    batch: int
    stream_batch: int | None
    now: Instant
    versions: dict[str, int]
    attempt: int = 0
    token: str = ""
    stream_id: str | None = None
    watermarks: dict[str, Instant] = field(default_factory=dict)
    estimator: Any = None


def _batches(spark, spec: PipelineSpec) -> "DataFrame | None":
    from pyspark.sql import functions as F

    if not table_exists(spark, BATCHES_TABLE):
        return None
    return read_table(spark, BATCHES_TABLE).where(F.col("pipeline") == spec.name)


def _records(spark, spec: PipelineSpec) -> list[dict]:
    """The newest records: per batch 'finished' first, then attempts newest first."""
    from pyspark.sql import functions as F

    batches = _batches(spark, spec)
    if batches is None:
        return []
    attempt = F.col("attempt") if "attempt" in batches.columns else F.lit(0)
    rows = batches.withColumn("_attempt", F.coalesce(attempt, F.lit(0))).orderBy(
        F.col("batch").desc(), F.col("status").asc(), F.col("_attempt").desc()
    ).limit(4).collect()
    return [r.asDict() for r in rows]


def _append_record(spark, spec: PipelineSpec, rec: BatchRecord, status: str, ledger: Ledger | None) -> None:
    row = (
        spec.name, rec.batch, rec.stream_batch, rec.now, dt.datetime.fromtimestamp(rec.now / 1000, dt.timezone.utc),
        status, dt.datetime.now(dt.timezone.utc), json.dumps(rec.versions), json.dumps(rec.watermarks),
        pickle.dumps(rec.estimator) if rec.estimator is not None else None,
        json.dumps(ledger.as_dict()) if ledger else None, rec.attempt, rec.token, rec.stream_id,
    )
    version = rec.batch * ATTEMPTS + rec.attempt if status == "started" else rec.batch
    df = spark.createDataFrame([row], BATCHES_SCHEMA)
    (
        df.write.format("delta").mode("append").option("mergeSchema", "true")
        .option("txnAppId", f"dataflow:{spec.name}:batches:{status}").option("txnVersion", version)
        .save(table_path(spark, BATCHES_TABLE))
    )
    register_table(spark, BATCHES_TABLE)


def _claim(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Claim attempt `rec.attempt` at batch `rec.batch`; refused when another run claimed it
    first (Delta commits at most one row per idempotent key)."""
    from pyspark.sql import functions as F

    failure: Exception | None = None
    try:
        _append_record(spark, spec, rec, "started", None)
    except Exception as exc:  # a concurrent claim of the same key fails the loser's commit
        failure = exc
    mine = _batches(spark, spec).where(
        (F.col("batch") == rec.batch) & (F.col("status") == "started") & (F.col("attempt") == rec.attempt)
    ).select("run_token").collect()
    if mine and mine[0]["run_token"] != rec.token:
        raise PipelineBusy(
            f"pipeline {spec.name!r} is already running: another run claimed batch {rec.batch} "
            f"(attempt {rec.attempt}) first; this run stopped without writing"
        )
    if not mine:
        raise failure or DataflowError(f"pipeline {spec.name!r}: the claim of batch {rec.batch} did not commit")


def _fence(spark, spec: PipelineSpec, rec: BatchRecord) -> None:
    """Stop before a commit if a later attempt took this batch over (this run is a zombie)."""
    from pyspark.sql import functions as F

    latest = _batches(spark, spec).where((F.col("batch") == rec.batch) & (F.col("status") == "started")).agg(
        F.max("attempt").alias("a")).first()["a"]
    if latest is not None and latest > rec.attempt:
        raise PipelineBusy(
            f"pipeline {spec.name!r}: another run took over batch {rec.batch} (attempt {latest}) while "
            f"this one (attempt {rec.attempt}) was still going; this run stopped, and what it had "
            "committed is exactly what the other commits"
        )


def _version(spark, name: str) -> int:
    from delta.tables import DeltaTable

    if not table_exists(spark, name):
        return -1
    return int(DeltaTable.forPath(spark, table_path(spark, name)).history(1).collect()[0]["version"])


def _as_of(spark, name: str, version: int) -> "DataFrame | None":
    if version < 0:
        return None
    return spark.read.format("delta").option("versionAsOf", version).load(table_path(spark, name))


# --- the run ------------------------------------------------------------------------


def run_microbatch(
    spark: "SparkSession",
    pipeline: str,
    now: str | dt.datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Every input row committed since the last batch, as one or more micro-batches (a
    tick when there is none). Raises PipelineBusy when another run holds the pipeline."""
    from pyspark.errors import StreamingQueryException

    from dataflow_core.spark.jobs.backfill import parse_time

    spec = get(pipeline)
    say = progress or (lambda _m: None)
    now_ms = parse_time(now, "--now") if now is not None else int(time.time() * 1000)
    token = uuid.uuid4().hex
    done: list[tuple[BatchRecord, Ledger]] = []
    pending = _records(spark, spec)
    if pending and pending[0]["status"] == "started" and pending[0]["stream_batch"] is None:
        say(f"finishing tick batch {pending[0]['batch']} that did not complete")
        done.append(_process(spark, spec, None, None, now_ms, say, token, pending[0]["stream_id"]))
    if not table_exists(spark, spec.input_table):
        raise DataflowError(f"pipeline {spec.name!r}: its input table {spec.input_table} does not exist yet")
    checkpoint = f"{warehouse_root(spark)}/_dataflow_checkpoints/{spec.name}"
    failures: list[BaseException] = []
    started = threading.Event()
    stream: dict[str, Any] = {"batches": 0}

    def each(df: "DataFrame", stream_batch: int) -> None:
        stream["batches"] += 1
        started.wait(60)
        try:
            result = _process(spark, spec, df, stream_batch, now_ms, say, token, stream.get("id"))
        except BaseException as exc:  # re-raised below as itself, not as a stream error
            if _concurrent(exc) and not isinstance(exc, PipelineBusy):
                exc = PipelineBusy(
                    f"pipeline {spec.name!r}: another run committed to the same table at the same moment "
                    f"({type(exc).__name__}); this run stopped, and what it had committed is exactly what "
                    "the other commits"
                )
            failures.append(exc)
            raise exc
        if result is not None:
            done.append(result)

    busy = PipelineBusy(
        f"pipeline {spec.name!r} is already running elsewhere (its stream checkpoint {checkpoint} is "
        "taken); this run stopped, and the tables are as the other run leaves them"
    )
    try:
        query = (
            spark.readStream.format("delta").option("skipChangeCommits", "true")
            .load(table_path(spark, spec.input_table))
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    except Exception as exc:  # two runs creating the same checkpoint at once
        if _concurrent(exc):
            raise busy from None
        raise
    stream["id"] = str(query.id)
    started.set()
    try:
        query.awaitTermination()
    except StreamingQueryException as exc:
        if failures:
            raise failures[0] from None
        if _concurrent(exc):
            raise busy from None
        raise
    if not stream["batches"]:
        tick = _process(spark, spec, None, None, now_ms, say, token, stream["id"])
        if tick is not None:
            done.append(tick)
    if not done:
        last = _records(spark, spec)[0]
        say(f"nothing new since batch {last['batch']} at {format_instant(last['now_ms'])}: nothing to do")
        return RunResult(f"{spec.name}-batch-{last['batch']}", Ledger().as_dict(), last["now_ms"])
    total = Ledger()
    for _, ledger in done:
        for k in ("read", "accepted", "duplicates", "quarantined", "aggregated", "dropped_late", "panes", "retractions"):
            setattr(total, k, getattr(total, k) + getattr(ledger, k))
        for stage, counts in ledger.per_stage.items():
            agg = total.per_stage.setdefault(stage, {"panes": 0, "retractions": 0, "corrected_windows": 0})
            for k, v in counts.items():
                agg[k] = agg.get(k, 0) + v
    last = done[-1][0]
    return RunResult(f"{spec.name}-batch-{last.batch}", total.as_dict(), last.now)


def _concurrent(exc: BaseException) -> bool:
    """An error that says another run wrote first: to the stream checkpoint (offsets,
    commits, its metadata) or to a Delta table (a conflicting commit)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(m in text for m in (
        "Concurrent update", "Multiple streaming", "ConcurrentModification", "concurrently using",  # the stream
        "ConcurrentAppend", "ConcurrentTransaction", "ConcurrentWrite", "ConcurrentDelete", "DELTA_CONCURRENT",  # Delta
    ))


def _committed_stream(spark, spec: PipelineSpec) -> tuple[int | None, str | None, int | None]:
    """The last finished batch that consumed stream input: its stream batch, the stream's
    query id and the batch number."""
    from pyspark.sql import functions as F

    batches = _batches(spark, spec)
    if batches is None:
        return None, None, None
    row = batches.where((F.col("status") == "finished") & F.col("stream_batch").isNotNull()).agg(
        F.max_by("stream_batch", "batch").alias("s"),
        F.max_by("stream_id" if "stream_id" in batches.columns else F.lit(None).cast("string"), "batch").alias("id"),
        F.max("batch").alias("b"),
    ).first()
    return row["s"], row["id"], row["b"]


def _begin(
    spark, spec: PipelineSpec, stream_batch: int | None, now_ms: Instant, token: str, stream_id: str | None,
) -> tuple[BatchRecord, dict | None] | None:
    """This batch's record, claimed (a retry resumes the unfinished batch with the next
    attempt), and the last finished one; None when there is nothing to do: the stream
    re-delivered a batch that already finished, or a tick at the last batch's time."""
    records = _records(spark, spec)
    last_finished = next((r for r in records if r["status"] == "finished"), None)
    latest = records[0] if records else None
    if stream_batch is not None:
        done_stream, done_id, done_batch = _committed_stream(spark, spec)
        if done_id is not None and stream_id is not None and done_id != stream_id:
            raise DataflowError(
                f"pipeline {spec.name!r}: its stream checkpoint was recreated (stream {stream_id}, but batch "
                f"{done_batch} was read by stream {done_id}); it would read the input again from the start. "
                "Restore the checkpoint, or start the pipeline afresh (its outputs, state and dataflow_batches rows)"
            )
        if done_stream is not None and stream_batch <= done_stream:
            return None  # input behind the committed state: already processed as batch <= done_batch
    if latest and latest["status"] == "started":
        if latest["stream_batch"] != stream_batch:
            raise DataflowError(
                f"pipeline {spec.name!r}: batch {latest['batch']} did not finish and is not the one "
                "the stream delivers now; its checkpoint and dataflow_batches disagree"
            )
        rec = BatchRecord(latest["batch"], stream_batch, latest["now_ms"], json.loads(latest["versions"]),
                          attempt=(latest.get("attempt") or 0) + 1, token=token, stream_id=stream_id)
        if rec.attempt >= ATTEMPTS:
            raise DataflowError(f"pipeline {spec.name!r}: batch {rec.batch} was attempted {ATTEMPTS} times; giving up")
        _claim(spark, spec, rec)
        return rec, last_finished
    if stream_batch is None and last_finished and now_ms == last_finished["now_ms"]:
        return None  # a tick at the same processing time fires nothing new
    number = (last_finished["batch"] + 1) if last_finished else 0
    if last_finished and now_ms < last_finished["now_ms"]:
        raise DataflowError(
            f"--now {format_instant(now_ms)} is before the last batch's processing time "
            f"{format_instant(last_finished['now_ms'])}; processing time never moves back"
        )
    names = [seen_table(spec)] + [state_table(s) for s in spec.stages]
    rec = BatchRecord(number, stream_batch, now_ms, {n: _version(spark, n) for n in names},
                      token=token, stream_id=stream_id)
    _claim(spark, spec, rec)
    _crash_point("started")
    return rec, last_finished


def _process(
    spark, spec: PipelineSpec, rows: "DataFrame | None", stream_batch, now_ms, say, token: str, stream_id,
) -> tuple[BatchRecord, Ledger] | None:
    from pyspark.sql import functions as F

    begun = _begin(spark, spec, stream_batch, now_ms, token, stream_id)
    if begun is None:
        if stream_batch is not None:
            say(f"stream batch {stream_batch} was already processed and committed; writing nothing")
        return None
    rec, prev = begun
    n = rec.batch

    def txn(table: str) -> outputs.Txn:
        """The idempotent key of this batch's commit to `table`, once sure no later attempt
        took the batch over."""
        _fence(spark, spec, rec)
        return f"dataflow:{spec.name}:{table}", n

    prev_wms = json.loads(prev["watermarks"]) if prev else {}
    prev_now = prev["now_ms"] if prev else BEGINNING_OF_TIME
    estimator = pickle.loads(prev["estimator"]) if prev and prev["estimator"] else spec.watermark()
    old_wm = prev_wms.get("input", BEGINNING_OF_TIME)
    ledger = Ledger()

    # Input: select, quarantine, deduplicate against ids seen in earlier batches.
    first = spec.stages[0]
    if rows is not None and spec.where:
        rows = rows.where(F.expr(spec.where))
    if rows is None:
        els = None
    else:
        tagged = tag_rows(spark, spec, rows).persist()
        counts = tagged.agg(F.count(F.lit(1)).alias("read"), F.count_if(F.size("_dataflow_failed") > 0).alias("bad")).first()
        ledger.read, ledger.quarantined = int(counts["read"]), int(counts["bad"])
        if ledger.quarantined:
            write_quarantine(spark, spec, quarantined(tagged), f"batch-{n}", txn("quarantine"))
        _crash_point("quarantined")
        candidates = elements(spec, tagged)
        seen = _as_of(spark, seen_table(spec), rec.versions[seen_table(spec)])
        if seen is not None:
            candidates = candidates.join(seen.select("event_id"), "event_id", "left_anti")
        els = candidates.persist()
        ledger.accepted = els.count()
        ledger.duplicates = ledger.read - ledger.quarantined - ledger.accepted
        remember_ids(spark, spec, els, n, txn(seen_table(spec)), old_wm if n % 100 == 0 else None)
        tagged.unpersist()
    _crash_point("deduplicated")
    stats = els.agg(F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi")).first() if els is not None else None
    lo_hi = (stats["lo"], stats["hi"]) if stats and stats["lo"] is not None else ()
    new_wm = estimator.update(Progress(batch_event_times=lo_hi, processing_time=rec.now))
    say(f"batch {n} at {format_instant(rec.now)}: {ledger.read:,} rows read, {ledger.accepted:,} accepted, "
        f"{ledger.duplicates:,} duplicates, {ledger.quarantined:,} quarantined; watermark -> {format_watermark(new_wm)}")

    schedule = Schedule([Step((n,), rec.now, new_wm)], old_wm, start_time=prev_now)
    if els is not None:
        arrivals = els.select(
            *first.key_columns, "value", "event_ms", F.lit(False).alias("retraction"),
            F.array(F.lit(n).cast("bigint")).alias("seq"), F.lit(rec.now).cast("bigint").alias("at_ms"),
        )
    else:
        arrivals = None
    watermarks = {"input": new_wm}
    previous_out: "DataFrame | None" = None
    prev_stage: StageSpec | None = None
    for i, stage in enumerate(spec.stages):
        if i:
            spans = _spans(previous_out, schedule, spark, prev_stage, rec.versions, new_wm_of(schedule), touched_keys)
            schedule = downstream_schedule(schedule, spans, start=prev_wms.get(stage.output, BEGINNING_OF_TIME))
            panes = previous_out.where("kind = 'pane'").withColumnRenamed("sub", "seq").withColumn("at_ms", F.col("emitted_at"))
            arrivals = elements_from_panes(panes, prev_stage, stage, passthrough=("seq", "at_ms"))
        out, touched_keys = _run(spark, stage, arrivals, schedule, rec, i == 0)
        ledger_stage = _write(spark, stage, out, rec, txn)
        ledger.per_stage[stage.output] = ledger_stage
        ledger.panes += ledger_stage["panes"]
        ledger.retractions += ledger_stage["retractions"]
        if i == 0:
            totals = out.where("kind = 'stats'").agg(F.sum("elements").alias("e"), F.sum("dropped").alias("d")).first()
            ledger.dropped_late = int(totals["d"] or 0)
            ledger.aggregated = int(totals["e"] or 0) - ledger.dropped_late
        if previous_out is not None:
            previous_out.unpersist()
        previous_out, prev_stage = out, stage
        watermarks[stage.output] = new_wm_of(schedule)  # this stage's input watermark
        say(f"  {stage.output}: {ledger_stage['panes']:,} panes, {ledger_stage['retractions']:,} retractions")
    if previous_out is not None:
        previous_out.unpersist()
    if els is not None:
        els.unpersist()
    rec.watermarks = watermarks
    rec.estimator = estimator
    _crash_point("before-finish")
    _fence(spark, spec, rec)
    _append_record(spark, spec, rec, "finished", ledger)
    return rec, ledger


def new_wm_of(schedule: Schedule) -> Instant:
    return schedule.steps[-1].watermark if schedule.steps else schedule.start


def _run(spark, stage: StageSpec, arrivals, schedule: Schedule, rec: BatchRecord, first: bool):
    """The stage on the keys that got data or have something due; returns its output
    rows and the DataFrame of the keys it touched."""
    from pyspark.sql import functions as F

    keys = list(stage.key_columns)
    states = _as_of(spark, state_table(stage), rec.versions[state_table(stage)])
    wm = new_wm_of(schedule)
    latest_time = max((s.time for s in schedule.steps), default=rec.now)
    if arrivals is None:
        arrivals = _empty_arrivals(spark, stage, first)
    if states is not None:
        due = states.where((F.col("wake_timer") < F.lit(latest_time)) | (F.col("wake_watermark") <= F.lit(wm)))
        with_data = states.join(arrivals.select(*keys).distinct(), keys, "left_semi")
        woken = due.unionByName(with_data).dropDuplicates(keys)
    else:
        woken = spark.createDataFrame([], _state_schema(arrivals, stage))
    out = run_stage(arrivals, stage.strategy, schedule, KeyCodec(stage.key_columns), stage.value_type,
                    states=woken.select(*keys, "state")).persist()
    touched = out.where("kind = 'state'").select(*keys)
    return out, touched


def _state_schema(arrivals, stage: StageSpec) -> str:
    cols = [f"`{c}` {arrivals.schema[c].dataType.simpleString()}" for c in stage.key_columns]
    return ", ".join(cols + ["state binary", "wake_timer bigint", "wake_watermark bigint", "hold bigint"])


def _empty_arrivals(spark, stage: StageSpec, first: bool):
    from pyspark.sql.types import _parse_datatype_string  # noqa: F401

    types = ", ".join(f"`{c}` string" for c in stage.key_columns)
    value_type = stage.input_type if not first else "string"
    return spark.createDataFrame(
        [], f"{types}, value {value_type}, event_ms bigint, retraction boolean, seq array<bigint>, at_ms bigint"
    )


def _spans(previous_out, schedule: Schedule, spark, prev_stage: StageSpec, versions, wm, touched_keys) -> list[HoldSpan]:
    """Hold spans of the upstream stage in this batch: from the keys it ran, plus the keys
    it did not run whose stored hold is below the watermark (they hold all batch long)."""
    from pyspark.sql import functions as F

    spans = [
        HoldSpan(tuple(r["sub"]), r["hold_time"], None if r["hold_end"] is None else tuple(r["hold_end"]),
                 r["hold_end_time"], r["hold"])
        for r in previous_out.where("kind = 'hold'").collect()
    ]
    states = _as_of(spark, state_table(prev_stage), versions[state_table(prev_stage)])
    if states is not None:
        step = schedule.steps[0]
        idle = states.where(F.col("hold") < F.lit(wm)).join(touched_keys, list(prev_stage.key_columns), "left_anti")
        for r in idle.select("hold").collect():
            h = r["hold"]
            if h < schedule.start:
                spans.append(HoldSpan((*step.seq, TIMERS, -END_OF_TIME), schedule.start_time or step.time, None, None, h))
            else:
                spans.append(HoldSpan((*step.seq, WATERMARK, 0), step.time, None, None, h))
    return spans


def _write(spark, stage: StageSpec, out: "DataFrame", rec: BatchRecord, txn) -> dict[str, int]:
    from pyspark.sql import functions as F

    run_id = f"batch-{rec.batch}"
    panes = out.where("kind = 'pane'")
    counts = panes.agg(F.count_if(~F.col("is_retraction")).alias("p"), F.count_if("is_retraction").alias("r"),
                       F.min("window_end").alias("end")).first()
    emitted = counts["p"] + counts["r"] > 0
    if emitted:
        outputs.write_panes(spark, stage, outputs.pane_rows(stage, panes, run_id), txn=txn(f"{stage.output}_panes"))
    _crash_point(f"{stage.output}-panes")
    if stage.keeps_results and emitted:
        outputs.merge_results(spark, stage, outputs.final_rows(stage, panes, run_id), txn=txn(stage.output),
                              window_end_from=counts["end"])
    _crash_point(f"{stage.output}-results")
    write_state(spark, stage, out, rec.batch, txn(state_table(stage)))
    _crash_point(f"{stage.output}-state")
    return {"panes": int(counts["p"]), "retractions": int(counts["r"]), "corrected_windows": 0}


def write_state(spark, stage: StageSpec, out: "DataFrame", batch: int, txn: outputs.Txn) -> None:
    """MERGE the `'state'` rows of a stage's output into its state table (a key whose state
    is null holds no window any more and is deleted)."""
    from pyspark.sql import functions as F

    ts = lambda c: F.when(F.abs(F.col(c)) < F.lit(END_OF_TIME - 1), F.timestamp_millis(F.col(c)))  # noqa: E731
    state_rows = out.where("kind = 'state'").select(
        *stage.key_columns, "state", "wake_timer", "wake_watermark", "hold",
        ts("wake_timer").alias("next_timer_at"), ts("wake_watermark").alias("next_watermark_at"),
        F.transform("windows", lambda w: F.struct(
            F.timestamp_millis(w["window_start"]).alias("window_start"),
            F.timestamp_millis(w["window_end"]).alias("window_end"),
            w["pending"].alias("pending_elements"), w["next_index"].alias("panes_emitted"),
            F.timestamp_millis(w["next_timer"]).alias("next_timer"), w["closed"].alias("closed"),
        )).alias("windows"),
        F.lit(batch).alias("batch"),
        F.col("state").isNull().alias("_delete"),
    )
    outputs.merge_rows(spark, state_table(stage), state_rows, list(stage.key_columns), delete=True, update=True,
                       txn=txn, cluster_by=WAKE_COLUMNS)


def remember_ids(
    spark, spec: PipelineSpec, els: "DataFrame", batch: int, txn: outputs.Txn, watermark: Instant | None = None,
) -> None:
    """Event ids of `els` join the seen set. With `watermark`, ids further behind it than
    the first stage's allowed lateness plus a day are forgotten (a delivery that late would
    be dropped as too late anyway)."""
    from pyspark.sql import functions as F

    rows = els.select("event_id", "event_ms", F.lit(batch).cast("bigint").alias("batch"), F.lit(False).alias("_delete"))
    name = seen_table(spec)
    if watermark is not None and watermark > BEGINNING_OF_TIME and table_exists(spark, name):
        horizon = watermark - spec.stages[0].strategy.allowed_lateness - SEEN_HORIZON
        expired = read_table(spark, name).where(F.col("event_ms") < F.lit(horizon)).select(
            "event_id", "event_ms", "batch", F.lit(True).alias("_delete"))
        rows = rows.unionByName(expired)
    outputs.merge_rows(spark, name, rows, ["event_id"], delete=True, update=False, txn=txn)


def expire_seen_ids(spark: "SparkSession", spec: PipelineSpec) -> int:
    """Forget event ids beyond the horizon (see `remember_ids`) outside a batch: for
    maintenance. Returns how many were deleted."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    name = seen_table(spec)
    records = [r for r in _records(spark, spec) if r["status"] == "finished"]
    if not table_exists(spark, name) or not records:
        return 0
    wm = json.loads(records[0]["watermarks"]).get("input", BEGINNING_OF_TIME)
    if wm <= BEGINNING_OF_TIME:
        return 0
    horizon = wm - spec.stages[0].strategy.allowed_lateness - SEEN_HORIZON
    table = DeltaTable.forPath(spark, table_path(spark, name))
    expired = table.toDF().where(F.col("event_ms") < F.lit(horizon)).count()
    if expired:
        table.delete(F.col("event_ms") < F.lit(horizon))
    return expired
