"""`dataflow microbatch` on Spark: does a micro-batch cost what it reads, or what came before?

Two figures (issue 7), on a pipeline of billing's shape (`billing` itself, copied under the
name `bench_microbatch` over the bench input table `bench_ad_views`: watch seconds per ad in
hourly windows, early panes every 10 minutes of processing time, on-time and late panes,
accumulating, 1 day allowed lateness), with `--keys` ads (default 2,000) and every row an
ad view:

1. one micro-batch of `--new-rows` (100,000) new rows on top of a history of
   `--history-small` (1M) rows and, separately, of `--history-large` (10M) rows. Both
   histories have the same ads and the same rate (rows per hour of event time): the small
   one covers 3 days of event time, the large one 10x as long, ending at the same instant
   with the same last 3 days (identical rows). Windows more than the allowed lateness
   behind the watermark are garbage-collected and seen event ids expire after lateness plus
   a day, so the live state is the same size on both sides, and so are the new rows
   (identical: 1% of them late by 1-20 hours, 0.5% re-deliveries of events from the last
   hour of history, plus the generator's own duplicates and malformed rows). Figure: time
   of the batch with the large history / with the small one; goal 1.1x, limit 1.2x (issue
   14). Beside it the CPU seconds and peak memory (RSS of the process tree: driver, JVM,
   Python workers) during the batch, which should also be flat in history.
2. events per second of a steady stream on the small history: `--steady-batches` (10)
   micro-batches of `--steady-rows` (20,000) rows each, appended and run one after another,
   each with its own processing time (`--now`: the batch's last event time plus a minute,
   so processing time keeps pace with event time at the history's rate, 1.4 h per batch at
   full size).

How a history is made: its rows are generated (dataflow_core.sample) in chunks appended one
after another to the input table, each followed by `run_microbatch` with `--now` a minute
after the chunk's last event time, so the watermark moves and old windows close and are
collected as they would live: 10 chunks for the last 3 days, and the large history's older
part in chunks the size of the small history. The maintenance DAG's step
(`dataflow_core.airflow.maintenance.maintain`: expire seen ids, OPTIMIZE, VACUUM) runs after
every 7 days of processing time and at the end. Each history is built once and cached
under .cache/bench_microbatch/ (by its sizes); the build's time and the library it was built
with (commit, hash of dataflow_core/) are in the results. A history built by
an older library is used as a live deployment's tables would be after an upgrade;
`--rebuild` builds it afresh with the library as it stands.

Each measured run copies the cached warehouse to a scratch one and is a child process of its
own (one Spark at a time, master local[2]): it starts Spark, appends the new rows (not
timed), then times one `run_microbatch` call (Spark's start excluded) while sampling its own
process tree for CPU seconds and peak RSS. Where the time goes comes from
`run_microbatch`'s progress messages and from timing, from the outside, the library's
functions that read or write each table (wrapped in the child; the library is not
changed): the `MERGE` into each table, the pane-log write, the batch records; the rest of
each stretch between two progress messages is named after it (input: stream, tag, dedup
against seen ids; stage: run the model on the woken keys; finish). With `--repeat N` (3
unless `--quick`: one pair alone is at the mercy of the machine's load) the sides
alternate; per side the time is the fastest run's, CPU seconds the least, peak memory and
the seconds of each part the median (every run is kept in the results).

    .venv/bin/python benchmarks/bench_microbatch.py              # full size (history build ~40 min once)
    .venv/bin/python benchmarks/bench_microbatch.py --quick      # smoke test: 100k vs 1M history, 10k new rows
    .venv/bin/python benchmarks/bench_microbatch.py --history-small 500000 --history-large 5000000

Figures are printed as a table and written to benchmarks/results/microbatch.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from bench_backfill import ROOT, SEED, TreeSampler, phases_table, spawn, write_figures  # noqa: E402

RESULTS = HERE / "results" / "microbatch.json"
DATA = ROOT / ".cache" / "bench_microbatch"  # built histories (warehouses), kept between runs

PIPELINE = "bench_microbatch"  # billing's shape; its stage writes tables of the same name
INPUT = "bench_ad_views"
MASTER = "local[2]"
END = "2024-06-01T00:00:00Z"  # every history ends here; new rows follow it
SMALL_DAYS = 3  # the small history's event-time span; fixes the rate (rows per hour)
TAIL_CHUNKS = 10  # the last SMALL_DAYS of every history, in this many micro-batches
MAX_OLDER_CHUNKS = 20
LAG_MS = 60_000  # a batch's processing time: its last event time plus this
MAINTENANCE_EVERY_MS = 7 * 86_400_000  # the maintenance DAG's weekly schedule
LATE_SHARE, LATE_HOURS = 0.01, (1, 20)  # new rows this late (within the 1 day allowed lateness)
REDELIVERED_SHARE = 0.005  # new rows that re-deliver an event of the last hour
USERS, VIDEOS = 100_000, 1_000  # fixed, so chunks of every size look alike
GOAL, LIMIT = 1.1, 1.2  # the limit is issue 14's target
HISTORY_FORMAT = 1  # bump when the way histories are made changes
DAY_MS, HOUR_MS = 86_400_000, 3_600_000
_MASK_53 = (1 << 53) - 1


# --- what goes in: chunks of generated rows ---------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """Rows appended to the input table and then processed by one `run_microbatch`."""

    seed: int
    start_ms: int
    rows: int
    span_ms: int
    realism: bool = False  # add late rows and re-deliveries of recent events

    @property
    def now_ms(self) -> int:
        return self.start_ms + self.span_ms + LAG_MS


def end_ms() -> int:
    return int(dt.datetime.fromisoformat(END.replace("Z", "+00:00")).timestamp() * 1000)


def iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def rate(opts) -> float:
    """Rows per millisecond of event time: the small history's rows over SMALL_DAYS."""
    return opts.history_small / (SMALL_DAYS * DAY_MS)


def _spread(rows: int, parts: int, start_ms: int, per_ms: float, seed: int, realism: bool = False) -> list[Chunk]:
    """`rows` in `parts` consecutive chunks from `start_ms`, at `per_ms` rows per ms."""
    chunks, done = [], 0
    for i in range(parts):
        n = rows * (i + 1) // parts - done
        a, b = start_ms + int(done / per_ms), start_ms + int((done + n) / per_ms)
        chunks.append(Chunk(seed + i, a, n, b - a, realism))
        done += n
    return chunks


def history_chunks(opts, side: str) -> list[Chunk]:
    """The chunks of a history, oldest first. Both sides end with the same SMALL_DAYS
    (same seeds, times and rows); the large side has older chunks before them."""
    r, end = rate(opts), end_ms()
    tail = _spread(opts.history_small, TAIL_CHUNKS, end - SMALL_DAYS * DAY_MS, r, SEED * 1000)
    if side == "small":
        return tail
    older = opts.history_large - opts.history_small
    parts = max(1, min(MAX_OLDER_CHUNKS, round(older / opts.history_small)))
    start = end - SMALL_DAYS * DAY_MS - int(older / r)
    return _spread(older, parts, start, r, SEED * 1000 + 100) + tail


def new_chunk(opts) -> Chunk:
    """The measured batch's rows: just after the history, at its rate."""
    return _spread(opts.new_rows, 1, end_ms(), rate(opts), SEED * 1000 + 999, realism=True)[0]


def steady_chunks(opts) -> list[Chunk]:
    n = opts.steady_batches
    return _spread(opts.steady_rows * n, n, end_ms(), rate(opts), SEED * 1000 + 500, realism=True)


# --- the child side: Spark work ----------------------------------------------------------------


def register_pipeline() -> None:
    """`billing` as it ships, renamed and over the bench input table (same stages, watermark,
    key, value and row filter)."""
    from dataclasses import replace

    from dataflow_core.pipelines import get, register

    billing = get("billing")
    stage = replace(billing.stages[0], output=PIPELINE)
    register(replace(billing, name=PIPELINE, input_table=INPUT, stages=(stage,),
                     description=f"billing's shape over {INPUT} (benchmark)"))


def chunk_rows(spark, opts, chunk: Chunk):
    """The chunk's rows as the sample generator makes them (every row an ad view), plus for
    `realism` late rows (event time moved back 1-20 h) and re-deliveries of events from the
    hour before the chunk (already in the input table)."""
    from pyspark.sql import functions as F

    from dataflow_core.sample.config import SampleConfig
    from dataflow_core.sample.video_events import EVENT_TIME_FORMAT, generate_events, utc_date
    from dataflow_core.spark.platform.tables import read_table, table_exists

    config = SampleConfig(
        rows=chunk.rows, seed=chunk.seed, start=dt.datetime.fromtimestamp(chunk.start_ms / 1000, dt.timezone.utc),
        span_hours=chunk.span_ms / HOUR_MS, ad_share=1.0, ads=opts.keys, users=USERS, videos=VIDEOS,
    )
    df = generate_events(spark, config)
    if not chunk.realism:
        return df
    u = F.xxhash64(F.lit(chunk.seed), F.col("event_id"), F.lit("late")).bitwiseAND(F.lit(_MASK_53)) / float(1 << 53)
    late = F.col("event_time").isNotNull() & (u < LATE_SHARE)
    lo, hi = LATE_HOURS
    moved = F.timestamp_millis(F.unix_millis("event_time") - (lo * HOUR_MS + F.floor(u / LATE_SHARE * (hi - lo) * HOUR_MS)))
    df = df.withColumn("_late", late).withColumn("event_time", F.when(F.col("_late"), moved).otherwise(F.col("event_time")))
    df = df.withColumn("event_time_raw", F.when(F.col("_late"), F.date_format("event_time", EVENT_TIME_FORMAT))
                       .otherwise(F.col("event_time_raw")))
    df = df.withColumn("event_date", F.when(F.col("_late"), utc_date(F.col("event_time"))).otherwise(F.col("event_date")))
    df = df.drop("_late")
    if table_exists(spark, INPUT):
        wanted = REDELIVERED_SHARE * chunk.rows / max(1.0, rate(opts) * HOUR_MS)  # share of the last hour's rows
        pick = F.xxhash64(F.lit(chunk.seed), F.col("event_id"), F.lit("again")).bitwiseAND(F.lit(_MASK_53)) / float(1 << 53)
        again = read_table(spark, INPUT).where(
            (F.col("event_date") >= F.to_date(F.timestamp_millis(F.lit(chunk.start_ms - HOUR_MS))))
            & (F.unix_millis("event_time") >= chunk.start_ms - HOUR_MS) & (F.unix_millis("event_time") < chunk.start_ms)
            & (pick < F.lit(min(1.0, wanted)))
        ).withColumn("ingest_time", F.timestamp_millis(F.lit(chunk.start_ms + LAG_MS)))
        df = df.unionByName(again.select(*df.columns))
    return df


def append_chunk(spark, opts, chunk: Chunk) -> int:
    from dataflow_core.sample.video_events import PARTITION_COLUMN
    from dataflow_core.spark.platform.tables import write_table

    return write_table(spark, chunk_rows(spark, opts, chunk), INPUT, mode="append",
                       partition_by=[PARTITION_COLUMN]).rows_inserted


class PhaseClock:
    """Where a batch's time goes, timed from outside the library: chosen functions of
    dataflow_core are wrapped (those missing in the library as it stands are skipped) and
    each outermost call is recorded as an interval; calls inside a timed call count as its
    time (per thread: the writes a batch makes at once are each timed, and overlap).
    Progress messages mark stretches; what no wrapped call covers in a stretch is named
    after the stretch."""

    TARGETS = (
        ("dataflow_core.spark.jobs.live_sequencer", "records", "read dataflow_batches"),
        ("dataflow_core.spark.jobs.live_sequencer", "_begin", "begin: batch records, claim"),
        ("dataflow_core.spark.jobs.live_sequencer", "fence", "fence: read dataflow_batches"),
        ("dataflow_core.spark.jobs.live_input", "write_quarantine", "quarantine MERGE"),
        ("dataflow_core.spark.jobs.live_input", "remember_ids", "seen ids MERGE (remember)"),
        ("dataflow_core.spark.jobs.live_stage", "write_panes", "pane log write"),
        ("dataflow_core.spark.jobs.live_stage", "write_results", "results MERGE"),
        ("dataflow_core.spark.jobs.live_stage", "write_state", "state MERGE"),
        ("dataflow_core.spark.jobs.live_sequencer", "append_record", "dataflow_batches append"),
    )

    def __init__(self) -> None:
        self.t0: float | None = None
        self.local = threading.local()  # .depth: this thread's timed calls under way
        self.calls: list[tuple[float, float, str]] = []
        self.marks: list[tuple[float, str]] = []
        self.missing: list[str] = []

    def install(self) -> "PhaseClock":
        for module, attr, label in self.TARGETS:
            m = importlib.import_module(module)
            f = getattr(m, attr, None)
            if f is None:
                self.missing.append(f"{module}.{attr}")
                continue
            setattr(m, attr, self._wrap(f, label))
        return self

    def _wrap(self, f, label):
        def timed(*args, **kwargs):
            if self.t0 is None or getattr(self.local, "depth", 0):
                return f(*args, **kwargs)
            name = label or f"MERGE {kwargs.get('name', args[1] if len(args) > 1 else '?')}"
            self.local.depth = 1
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                self.local.depth = 0
                self.calls.append((start - self.t0, time.perf_counter() - self.t0, name))

        return timed

    def start(self) -> None:
        self.t0, self.calls, self.marks = time.perf_counter(), [], []

    def say(self, message: str) -> None:
        self.marks.append((time.perf_counter() - self.t0, message))

    def parts(self, total: float) -> dict[str, float]:
        """Seconds per wrapped call's name, and per stretch the rest."""
        out: dict[str, float] = {}
        for a, b, name in self.calls:
            out[name] = out.get(name, 0.0) + (b - a)
        bounds = [0.0] + [t for t, _ in self.marks] + [total]
        names = [_stretch(m) for _, m in self.marks] + ["finish: last writes, stream commit (rest)"]
        for (a, b), name in zip(zip(bounds, bounds[1:]), names):
            out[name] = out.get(name, 0.0) + (b - a - _covered(a, b, [(x, y) for x, y, _ in self.calls]))
        return {k: round(v, 3) for k, v in out.items()}


def _covered(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    """How much of [a, b] the spans cover (their union: calls made at once overlap)."""
    covered, reach = 0.0, a
    for x, y in sorted(spans):
        x, y = max(x, reach), min(y, b)
        if y > x:
            covered, reach = covered + y - x, y
    return covered


def _stretch(message: str) -> str:
    if message.startswith("batch "):
        return "input: stream, read and tag new rows, dedup against seen ids (rest)"
    if message.startswith("  "):
        return f"stage {message.strip().split(':')[0]}: woken keys, run the model (rest)"
    return f"until '{message[:40]}' (rest)"


def start_spark(opts, name: str):
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import read_table, table_exists

    register_pipeline()
    spark = get_spark(f"bench-microbatch-{name}", warehouse=opts.warehouse)
    if table_exists(spark, INPUT):  # warm up: the first query of a JVM pays for class loading
        read_table(spark, INPUT).limit(1).collect()
    return spark


def timed_batch(spark, clock: PhaseClock, now_ms: int) -> dict:
    """One `run_microbatch`, timed, with its process tree's CPU seconds and peak RSS."""
    from dataflow_core.spark.jobs.microbatch import run_microbatch

    sampler = TreeSampler.running(os.getpid())
    cpu0, rss0 = sampler.cpu_seconds, sampler.peak
    clock.start()
    result = run_microbatch(spark, PIPELINE, now=iso(now_ms), progress=clock.say)
    seconds = time.perf_counter() - clock.t0
    sampler.stop()
    return {
        "seconds": seconds, "batch_cpu_s": sampler.cpu_seconds - cpu0, "batch_peak_bytes": sampler.peak,
        "batch_peak_by_kind": sampler.peak_by_kind, "rss_before_bytes": rss0,
        "phases": [(round(t, 2), m) for t, m in clock.marks], "parts": clock.parts(seconds),
        "ledger": {k: v for k, v in result.ledger.items() if k != "per_stage"},
    }


def table_details(spark) -> dict[str, dict]:
    """Each table of the warehouse (input, pane log, results, state, seen ids, batch records,
    quarantine): rows, active files, bytes and Delta version."""
    from dataflow_core.spark.platform.tables import list_tables, read_table, table_path

    out = {}
    for t in list_tables(spark):
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{table_path(spark, t)}`").first()
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table_path(spark, t)}` LIMIT 1").first()
        out[t] = {"rows": read_table(spark, t).count(), "files": int(detail["numFiles"]),
                  "bytes": int(detail["sizeInBytes"]), "version": int(history["version"])}
    return out


def child(opts) -> int:
    out: dict = {"what": opts.what, "library": library_state()}
    started = time.perf_counter()
    spark = start_spark(opts, opts.what)
    out["spark_start_s"] = time.perf_counter() - started
    if opts.what == "build":
        out.update(build(spark, opts))
    elif opts.what == "batch":
        chunk = new_chunk(opts)
        t0 = time.perf_counter()
        out["appended_rows"] = append_chunk(spark, opts, chunk)
        out["append_s"] = time.perf_counter() - t0
        clock = PhaseClock().install()
        out.update(timed_batch(spark, clock, chunk.now_ms))
        out["clock_missing"] = clock.missing
        out["tables_after"] = table_details(spark)  # after the timing: reading them first would warm Delta's caches
    elif opts.what == "steady":
        clock = PhaseClock().install()
        batches = []
        for chunk in steady_chunks(opts):
            n = append_chunk(spark, opts, chunk)
            b = timed_batch(spark, clock, chunk.now_ms)
            b["appended_rows"] = n
            batches.append(b)
        out["batches"] = batches
        out["seconds"] = sum(b["seconds"] for b in batches)
        out["batch_cpu_s"] = sum(b["batch_cpu_s"] for b in batches)
        out["batch_peak_bytes"] = max(b["batch_peak_bytes"] for b in batches)
        out["rows"] = sum(b["appended_rows"] for b in batches)
        out["read"] = sum(b["ledger"]["read"] for b in batches)
        out["accepted"] = sum(b["ledger"]["accepted"] for b in batches)
        out["tables_after"] = table_details(spark)
    print("RESULT " + json.dumps(out, default=str), flush=True)
    return 0


def build(spark, opts) -> dict:
    """Append and process the history chunk by chunk; maintenance weekly and at the end."""
    from dataflow_core.airflow.maintenance import maintain
    from dataflow_core.spark.jobs.microbatch import run_microbatch

    log = open(Path(opts.warehouse) / "build.log", "a", buffering=1)
    say = lambda m: log.write(f"{time.strftime('%H:%M:%S')} {m}\n")  # noqa: E731
    chunks = history_chunks(opts, opts.side)
    done, last_maintenance = [], chunks[0].start_ms
    t_build = time.perf_counter()
    for i, chunk in enumerate(chunks):
        t0 = time.perf_counter()
        n = append_chunk(spark, opts, chunk)
        t1 = time.perf_counter()
        result = run_microbatch(spark, PIPELINE, now=iso(chunk.now_ms), progress=lambda m: say("  " + m))
        t2 = time.perf_counter()
        entry = {"rows": n, "append_s": round(t1 - t0, 2), "batch_s": round(t2 - t1, 2), "now": iso(chunk.now_ms),
                 "ledger": {k: v for k, v in result.ledger.items() if k != "per_stage"}}
        if chunk.now_ms - last_maintenance >= MAINTENANCE_EVERY_MS or i == len(chunks) - 1:
            maintain(PIPELINE, say=lambda m: say("  maintenance: " + m))
            entry["maintenance_s"] = round(time.perf_counter() - t2, 2)
            last_maintenance = chunk.now_ms
        done.append(entry)
        say(f"chunk {i + 1}/{len(chunks)}: {n:,} rows appended in {entry['append_s']} s, batch "
            f"{entry['batch_s']} s" + (f", maintenance {entry['maintenance_s']} s" if "maintenance_s" in entry else ""))
    seconds = time.perf_counter() - t_build
    tables = table_details(spark)
    say(f"built in {seconds:.0f} s; tables: {tables}")
    return {"seconds": seconds, "chunks": done, "tables": tables, "end": END,
            "span_days": (chunks[-1].start_ms + chunks[-1].span_ms - chunks[0].start_ms) / DAY_MS}


# --- the parent: histories, measured runs, the table ------------------------------------------


def library_state() -> dict:
    """The commit and a hash of the library's source as it stands (other work may be under
    way in the same tree), and which of its files differ from the commit."""
    digest = hashlib.sha256()
    for folder in ("dataflow_core",):
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {"commit": git("rev-parse", "--short", "HEAD"), "source_hash": digest.hexdigest()[:12],
            "uncommitted": git("status", "--porcelain", "--", "dataflow_core").splitlines()}


def run(opts, what: str, warehouse: Path, label: str, extra: list[str] = ()) -> dict:
    command = [sys.executable, __file__, "--child", "--what", what, "--warehouse", str(warehouse),
               *opts.sizes_args, "--driver-memory", opts.driver_memory, *extra]
    return spawn(command, label, env={"DATAFLOW_SPARK_MASTER": MASTER,
                                      "DATAFLOW_SPARK_DRIVER_MEMORY": opts.driver_memory})


def history(opts, side: str) -> tuple[Path, dict]:
    """The side's history warehouse (built now unless cached) and its build record."""
    rows = opts.history_small if side == "small" else opts.history_large
    folder = DATA / f"history_{rows}_of_{opts.history_small}_k{opts.keys}_d{SMALL_DAYS}_s{SEED}_f{HISTORY_FORMAT}"
    if (folder / "build.json").is_file() and not opts.rebuild:
        record = json.loads((folder / "build.json").read_text())
        record["cached"] = True
        return folder, record
    shutil.rmtree(folder, ignore_errors=True)
    building = folder.with_name(folder.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    chunks = history_chunks(opts, side)
    print(f"  building the {side} history: {rows:,} rows in {len(chunks)} micro-batches "
          f"(progress in {building / 'build.log'}) ...", flush=True)
    record = run(opts, "build", building, f"build {side} history", ["--side", side])
    record["built_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    (building / "build.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    building.rename(folder)
    record["cached"] = False
    return folder, record


def scratch_copy(source: Path, scratch: Path, name: str) -> Path:
    """A fresh copy of a history warehouse, so every measured run starts from the same tables."""
    target = scratch / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("build.json", "build.log"))
    return target


def batch_case(opts, scratch: Path, histories: dict) -> dict:
    """The measured batch on each side, `--repeat` times, interleaved (load on the shared
    machine hits both sides alike). Per side: time is the fastest run's, CPU seconds the
    least, peak memory and each part's seconds the median over the runs."""
    from statistics import median

    out: dict = {"new_rows": opts.new_rows, "runs": {"small": [], "large": []}}
    for rep in range(opts.repeat):
        for side in ("small", "large"):
            folder, _ = histories[side]
            r = run(opts, "batch", scratch_copy(folder, scratch, f"{side}-{rep}"), f"batch on the {side} history")
            shutil.rmtree(scratch / f"{side}-{rep}", ignore_errors=True)
            r["history_rows"] = opts.history_small if side == "small" else opts.history_large
            if side not in out or r["seconds"] < out[side]["seconds"]:
                out[side] = r
            out["runs"][side].append({k: r[k] for k in ("seconds", "batch_cpu_s", "batch_peak_bytes", "wall_s",
                                                         "cpu_s", "parts", "library")})
    runs = out["runs"]
    per_side = {side: {
        "best_s": min(r["seconds"] for r in runs[side]), "median_s": median(r["seconds"] for r in runs[side]),
        "least_cpu_s": min(r["batch_cpu_s"] for r in runs[side]),
        "median_peak_bytes": median(r["batch_peak_bytes"] for r in runs[side]),
    } for side in runs}
    out["per_side"] = per_side
    ps, pl = per_side["small"], per_side["large"]
    out["time_ratio"] = pl["best_s"] / ps["best_s"]
    out["median_time_ratio"] = pl["median_s"] / ps["median_s"]
    out["cpu_ratio"] = pl["least_cpu_s"] / ps["least_cpu_s"]
    out["memory_ratio"] = pl["median_peak_bytes"] / ps["median_peak_bytes"]
    out["goal"], out["limit"] = GOAL, LIMIT
    out["library_changed_between_sides"] = len({r["library"]["source_hash"] for side in runs for r in runs[side]}) > 1
    names = list(dict.fromkeys(n for side in runs for r in runs[side] for n in r["parts"]))
    part = lambda side, n: round(median(r["parts"].get(n, 0.0) for r in runs[side]), 3)  # noqa: E731
    out["parts"] = {n: {"small_s": part("small", n), "large_s": part("large", n),
                        "growth_s": round(part("large", n) - part("small", n), 3)} for n in names}
    return out


def steady_case(opts, scratch: Path, histories: dict) -> dict:
    folder, _ = histories["small"]
    r = run(opts, "steady", scratch_copy(folder, scratch, "steady"), "steady batches on the small history")
    shutil.rmtree(scratch / "steady", ignore_errors=True)
    r["events_per_s"] = r["read"] / r["seconds"]
    r["accepted_per_s"] = r["accepted"] / r["seconds"]
    rest = r["batches"][1:]  # without the first batch, which pays for the JVM's warm-up
    if rest:
        r["events_per_s_after_first"] = sum(b["ledger"]["read"] for b in rest) / sum(b["seconds"] for b in rest)
    r["batch_seconds"] = [round(b["seconds"], 2) for b in r["batches"]]
    r["processing_time_step"] = f"{steady_chunks(opts)[0].span_ms / 60_000:.0f} min"
    return r


def report(figures: dict) -> list[str]:
    mib = lambda b: f"{b / 2**20:,.0f} MiB"  # noqa: E731
    lib = lambda d: f"{d['commit']} (source {d['source_hash']}{', with uncommitted changes' if d['uncommitted'] else ''})"  # noqa: E731
    lines = [f"library measured: {lib(figures['library'])}"]
    if not figures["settings"]["issue_sizes"]:
        lines.append("sizes differ from the issue's (1M vs 10M rows of history, 100k new rows)"
                     + (f": {figures['settings']['note']}" if figures["settings"]["note"] else ""))
    h = figures["histories"]
    for side in ("small", "large"):
        rec = h[side]
        rows = {t: d["rows"] for t, d in rec["tables"].items()}
        lines.append(f"{side} history: {rec['rows']:,} rows over {rec['span_days']:.0f} days of event time, built in "
                     f"{rec['seconds'] / 60:.1f} min{' (cached)' if rec['cached'] else ''} by library "
                     f"{lib(rec['library'])}; rows per table: " + ", ".join(f"{t} {n:,}" for t, n in rows.items()))
    if "batch" in figures:
        f = figures["batch"]
        s, l = f["small"], f["large"]
        verdict = "ok" if f["time_ratio"] <= GOAL else ("within limit" if f["time_ratio"] <= LIMIT else "OVER LIMIT")
        lines.append("")
        if f["library_changed_between_sides"]:
            lines.append("WARNING: the library changed between the measured runs (see runs[*].library); "
                         "the ratio compares different code")
        lines.append(f"{'1. one batch of ' + format(f['new_rows'], ',') + ' new rows':<48} "
                     f"{format(s['history_rows'], ',') + ' hist.':>14} {format(l['history_rows'], ',') + ' hist.':>14} "
                     f"{'ratio':>7}  goal / limit")
        ps, pl, n = f["per_side"]["small"], f["per_side"]["large"], len(f["runs"]["small"])
        lines.append(f"{f'   time of run_microbatch (best of {n})':<48} {ps['best_s']:>12.1f} s {pl['best_s']:>12.1f} s "
                     f"{f['time_ratio']:>6.2f}x  {GOAL}x / {LIMIT}x ({verdict})")
        lines.append(f"{f'   time of run_microbatch (median of {n})':<48} {ps['median_s']:>12.1f} s "
                     f"{pl['median_s']:>12.1f} s {f['median_time_ratio']:>6.2f}x")
        lines.append(f"{'   CPU seconds during the batch (tree, least)':<48} {ps['least_cpu_s']:>12.1f} s "
                     f"{pl['least_cpu_s']:>12.1f} s {f['cpu_ratio']:>6.2f}x")
        lines.append(f"{'   peak memory during the batch (RSS, median)':<48} {mib(ps['median_peak_bytes']):>14} "
                     f"{mib(pl['median_peak_bytes']):>14} {f['memory_ratio']:>6.2f}x")
        for side in ("small", "large"):
            lines.append(f"     {side} runs: " + "; ".join(
                f"{r['seconds']:.1f} s, {r['batch_cpu_s']:.0f} CPU s, {mib(r['batch_peak_bytes'])}" for r in f["runs"][side]))
        lines.append(f"{'   fastest run, whole child (Spark start, append)':<48} {s['wall_s']:>12.1f} s {l['wall_s']:>12.1f} s")
        lines.append(f"{'   fastest run, whole child: CPU seconds':<48} {s['cpu_s']:>12.1f} s {l['cpu_s']:>12.1f} s")
        lines.append("   where the batch's time goes (median seconds over the runs: small history, large history, growth):")
        for name, p in sorted(f["parts"].items(), key=lambda kv: -kv[1]["growth_s"]):
            lines.append(f"     {name:<66} {p['small_s']:>7.1f} {p['large_s']:>7.1f} {p['growth_s']:>+7.1f}")
        for side, run_ in (("small", s), ("large", l)):
            lines.append(f"   progress messages, fastest run on the {side} history ({run_['seconds']:.1f} s):")
            lines += phases_table(run_["phases"])
        lines.append("   tables after the batch (rows / active files / Delta version): small history; large history")
        for t in s["tables_after"]:
            a, b = s["tables_after"][t], l["tables_after"].get(t, {})
            lines.append(f"     {t:<32} {a['rows']:>11,} / {a['files']:>4} / v{a['version']:<5} "
                         f"{b.get('rows', 0):>11,} / {b.get('files', 0):>4} / v{b.get('version', 0)}")
    if "steady" in figures:
        f = figures["steady"]
        lines.append("")
        lines.append(f"2. steady stream on the small history: {len(f['batches'])} batches of "
                     f"{f['rows'] // max(1, len(f['batches'])):,} rows (processing time {f['processing_time_step']} "
                     f"apart): {f['events_per_s']:,.0f} rows read/s ({f['accepted_per_s']:,.0f} accepted/s), "
                     f"{f['batch_cpu_s']:.0f} CPU s in the batches, peak {mib(f['batch_peak_bytes'])}")
        if "events_per_s_after_first" in f:
            lines.append(f"   without the first batch (JVM warm-up): {f['events_per_s_after_first']:,.0f} rows read/s")
        lines.append(f"   seconds per batch: {', '.join(f'{x:.1f}' for x in f['batch_seconds'])}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-small", type=int, default=None, help="rows of the small history (default 1,000,000; --quick 100,000)")
    parser.add_argument("--history-large", type=int, default=None, help="rows of the large history (default 10,000,000; --quick 1,000,000)")
    parser.add_argument("--new-rows", type=int, default=None, help="rows of the measured batch (default 100,000; --quick 10,000)")
    parser.add_argument("--steady-batches", type=int, default=None, help="batches of figure 2 (default 10; --quick 5)")
    parser.add_argument("--steady-rows", type=int, default=None, help="rows per batch of figure 2 (default 20,000; --quick 2,000)")
    parser.add_argument("--keys", type=int, default=2_000, help="distinct ads (the pipeline's keys; default 2,000)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition: a smoke test")
    parser.add_argument("--only", default="1,2", help="which figures, e.g. 1 (default 1,2)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="measured batches per side, alternating; the fastest counts (default 3: on a "
                             "2-core machine three single pairs gave 1.38x, 0.93x and 1.21x; --quick 1)")
    parser.add_argument("--rebuild", action="store_true",
                        help="build the histories afresh (default: reuse those cached, whatever library built them)")
    parser.add_argument("--driver-memory", default=os.environ.get("DATAFLOW_SPARK_DRIVER_MEMORY", "6g"))
    parser.add_argument("--note", default="", help="a remark kept with the figures (e.g. why these sizes)")
    parser.add_argument("--output", default=str(RESULTS), help="where to write the figures (JSON)")
    # internal: one child run
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--what", help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--warehouse", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    q = opts.quick
    opts.history_small = opts.history_small or (100_000 if q else 1_000_000)
    opts.history_large = opts.history_large or (1_000_000 if q else 10_000_000)
    opts.new_rows = opts.new_rows or (10_000 if q else 100_000)
    opts.steady_batches = opts.steady_batches or (5 if q else 10)
    opts.steady_rows = opts.steady_rows or (2_000 if q else 20_000)
    opts.repeat = opts.repeat or (1 if q else 3)
    if opts.history_large <= opts.history_small:
        parser.error("--history-large must be more than --history-small")
    opts.sizes_args = ["--history-small", str(opts.history_small), "--history-large", str(opts.history_large),
                       "--new-rows", str(opts.new_rows), "--steady-batches", str(opts.steady_batches),
                       "--steady-rows", str(opts.steady_rows), "--keys", str(opts.keys)]
    if opts.child:
        return child(opts)

    only = {int(x) for x in opts.only.split(",") if x.strip()}
    per_hour = rate(opts) * HOUR_MS
    figures: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "settings": {"history_small": opts.history_small, "history_large": opts.history_large,
                     "new_rows": opts.new_rows, "steady_batches": opts.steady_batches, "steady_rows": opts.steady_rows,
                     "keys": opts.keys, "rows_per_event_hour": round(per_hour), "small_history_days": SMALL_DAYS,
                     "large_history_days": SMALL_DAYS * opts.history_large / opts.history_small,
                     "new_rows_event_hours": round(opts.new_rows / per_hour, 2), "quick": q, "repeat": opts.repeat,
                     "driver_memory": opts.driver_memory, "master": MASTER, "pipeline": "billing's shape",
                     "history_ends": END,
                     "issue_sizes": opts.history_small == 1_000_000 and opts.history_large == 10_000_000
                     and opts.new_rows == 100_000, "note": opts.note},
        "library": library_state(),
    }
    print(f"micro-batch cost against history: {opts.history_small:,} vs {opts.history_large:,} rows of history, "
          f"{opts.keys:,} ads, {per_hour:,.0f} rows per event-time hour", flush=True)
    histories = {side: history(opts, side) for side in ("small", "large")}
    figures["histories"] = {side: {"rows": opts.history_small if side == "small" else opts.history_large,
                                   "folder": str(folder), **rec} for side, (folder, rec) in histories.items()}
    scratch = Path(tempfile.mkdtemp(prefix="bench_microbatch_"))
    try:
        if 1 in only:
            print(f"1. one batch of {opts.new_rows:,} new rows on each history", flush=True)
            figures["batch"] = batch_case(opts, scratch, histories)
        if 2 in only:
            print(f"2. {opts.steady_batches} steady batches of {opts.steady_rows:,} rows", flush=True)
            figures["steady"] = steady_case(opts, scratch, histories)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print("\n".join(report(figures)))
    write_figures(figures, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
