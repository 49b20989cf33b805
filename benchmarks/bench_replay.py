"""Arrival-order replay of billing on Spark: events/s against plain Spark SQL in the same run.

The events are billing's input as the replay sees it after reading and deduplicating:
per ad (200 by default), watch seconds (decimal) at an event time over 48 hours, arriving
in ingest-time order (most within a minute, 5% up to 30 minutes late, 1% up to 6 hours
late). They are cut into one-minute micro-batches by ingest time, billing's watermark
estimator (heuristic, 2 minutes) is updated per batch, and billing's stage (hourly windows,
early panes every 10 minutes, on-time, a late pane per late view, 1 day allowed lateness)
runs per key in executors against that schedule: `dataflow backfill --replay`'s stage,
without reading the input table or writing Delta (issue 14's other items).

Cases, each timed as one Spark action on the same cached events in one session:

- `spark_sql`: the baseline, hourly sums per ad (what plain Spark SQL does with the rows);
- `replay_elements`: the stage fed element by element (combiner lifting off);
- `replay_lifted`: the stage with combiner lifting (Spark SQL pre-combines each key,
  window and step; the model sees windows rather than events).

Both replays must give the same output rows (a checksum of all of them); events/s, the
ratio of wall time to the baseline's, CPU seconds of the whole process tree (driver, JVM,
Python workers) and its peak RSS are reported against the target (50k events/s on 2 cores).

    .venv/bin/python benchmarks/bench_replay.py            # 1,000,000 events
    .venv/bin/python benchmarks/bench_replay.py --quick    # 50,000 events (a smoke test)
    .venv/bin/python benchmarks/bench_replay.py --events 200000 --profile

`--profile` also runs one key-by-key pass of the model in this process under cProfile (the
executors' Python work, without Spark) and prints where the time goes.
Figures are written to benchmarks/results/replay.json.
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "replay.json"
DATA = ROOT / ".cache" / "bench_replay"
TARGET_EPS = 50_000
GOAL_EPS = 100_000
T0 = 1_714_521_600_000  # 2024-05-01T00:00:00Z
SPAN_MS = 48 * 3600 * 1000
INTERVAL_MS = 60_000

for p in (str(ROOT), str(HERE)):  # after PYTHONPATH: another checkout's code can be measured
    if p not in sys.path:
        sys.path.append(p)


def generate(spark, n: int, keys: int, path: Path) -> None:
    spark.range(n).selectExpr(
        f"concat('ad-', CAST(floor(rand(1) * {keys}) AS STRING)) AS ad_id",
        "CAST(round(rand(2) * 300, 3) AS DECIMAL(18,3)) AS value",
        f"{T0}L + CAST(rand(3) * {SPAN_MS} AS BIGINT) AS event_ms",
        "CASE WHEN rand(4) < 0.01 THEN CAST(rand(5) * 6 * 3600000 AS BIGINT)"
        " WHEN rand(4) < 0.06 THEN CAST(rand(5) * 30 * 60000 AS BIGINT)"
        " ELSE CAST(rand(5) * 60000 AS BIGINT) END AS delay_ms",
    ).selectExpr("ad_id", "value", "event_ms", "event_ms + delay_ms AS ingest_ms").write.mode("overwrite").parquet(str(path))


def schedule_of(spark, events, strategy_spec):
    """One step per minute of ingest time, the watermark estimator updated per batch (as
    `jobs/replay.replay_range` builds it)."""
    from pyspark.sql import functions as F

    from dataflow_core.model.watermarks import BEGINNING_OF_TIME, Progress
    from dataflow_core.runners.schedule import Schedule, Step

    t = events.agg(F.min("ingest_ms"), F.max("ingest_ms")).first()
    t0 = t[0] - t[0] % INTERVAL_MS
    batched = events.withColumn("batch", F.floor((F.col("ingest_ms") - F.lit(t0)) / F.lit(INTERVAL_MS)).cast("bigint"))
    stats = {r["batch"]: (r["lo"], r["hi"]) for r in batched.groupBy("batch").agg(
        F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi")).collect()}
    estimator = strategy_spec.watermark()
    steps = []
    for b in range((t[1] - t0) // INTERVAL_MS + 1):
        at = t0 + (b + 1) * INTERVAL_MS
        wm = estimator.update(Progress(batch_event_times=stats.get(b) or (), processing_time=at))
        steps.append(Step((b,), at, wm))
    arrivals = batched.select(
        "ad_id", "value", "event_ms", F.lit(False).alias("retraction"), F.array("batch").alias("seq"),
        (F.lit(t0) + (F.col("batch") + 1) * F.lit(INTERVAL_MS)).alias("at_ms"))
    return Schedule(steps, BEGINNING_OF_TIME), arrivals


class Tree:
    """CPU seconds and peak RSS of this process and its descendants, sampled."""

    def __init__(self):
        from bench_backfill import TreeSampler

        self.sampler_cls = TreeSampler

    @staticmethod
    def snapshot() -> dict[int, float]:
        import psutil

        me = psutil.Process()
        out = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return out

    def __enter__(self):
        self.cpu0 = self.snapshot()  # processes started later (Python workers) count in full
        self.sampler = self.sampler_cls(os.getpid(), interval=0.1)
        self.sampler.start()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        last = self.snapshot()
        self.sampler.stop()
        seen = {**self.sampler.cpu, **last}  # the last reading of every process seen
        self.cpu_s = sum(max(0.0, v - self.cpu0.get(pid, 0.0)) for pid, v in seen.items())
        self.peak_bytes = self.sampler.peak
        self.peak_by_kind = self.sampler.peak_by_kind


def checksum(out):
    from pyspark.sql import functions as F

    cols = [c for c in out.columns]
    row = out.agg(F.count(F.lit(1)).alias("rows"), F.count_if(F.col("kind") == "pane").alias("panes"),
                  F.sum(F.xxhash64(*cols).cast("decimal(38,0)")).alias("hash")).first()
    return {"rows": row["rows"], "panes": row["panes"], "hash": str(row["hash"])}


def replay_case(spark, arrivals, schedule, stage, lift: bool | None):
    from dataflow_core.spark.execute.keyed_stage import KeyCodec, run_stage

    params = inspect.signature(run_stage).parameters
    kwargs = {}
    if "lift" in params:
        kwargs["lift"] = lift
    elif lift:
        return None  # code without combiner lifting
    if "track_holds" in params:
        kwargs["track_holds"] = False  # billing has no downstream stage
    out = run_stage(arrivals, stage.strategy, schedule, KeyCodec(stage.key_columns), stage.value_type, **kwargs)
    with Tree() as tree:
        figures = checksum(out)
    return {"seconds": tree.seconds, "cpu_s": tree.cpu_s, "peak_bytes": tree.peak_bytes,
            "peak_by_kind": tree.peak_by_kind, **figures}


def baseline_case(spark, events):
    from pyspark.sql import functions as F

    agg = events.groupBy("ad_id", F.floor(F.col("event_ms") / 3_600_000).alias("hour")).agg(
        F.sum("value").cast("decimal(28,3)").alias("value"))
    with Tree() as tree:
        figures = checksum(agg.withColumn("kind", F.lit("pane")))
    return {"seconds": tree.seconds, "cpu_s": tree.cpu_s, "peak_bytes": tree.peak_bytes,
            "peak_by_kind": tree.peak_by_kind, **figures}


def profile_model(arrivals, schedule, stage, lift: bool, limit: int) -> str:
    """The executors' Python work (every key through `run_key`) in this process, profiled."""
    import cProfile
    import io
    import pstats

    from dataflow_core.model.group_by_window import Element
    from dataflow_core.runners import keyed

    rows = arrivals.select("ad_id", "value", "event_ms", "seq", "at_ms").collect()
    by_key: dict = {}
    for r in rows:
        slot = by_key.setdefault(r[0], {}).setdefault(tuple(r[3]), (r[4], []))
        slot[1].append(Element(r[1], r[2]))
    arrivals_by_key = {k: [keyed.Arrival(s, at, tuple(sorted(els, key=lambda e: e.timestamp)))
                           for s, (at, els) in sorted(v.items())] for k, v in by_key.items()}
    kwargs = {"lift": lift, "track_holds": False} if "lift" in inspect.signature(keyed.run_stage).parameters else {}
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    keyed.run_stage(stage.strategy, schedule, arrivals_by_key, **kwargs)
    prof.disable()
    seconds = time.perf_counter() - t0
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(limit)
    return f"model alone ({'lifted' if lift else 'elements'}): {len(rows):,} events in {seconds:.1f} s " \
           f"= {len(rows) / seconds:,.0f} events/s (one core, profiled)\n" + buf.getvalue()


def mib(n) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=None, help="events (default 1,000,000; --quick 50,000)")
    parser.add_argument("--keys", type=int, default=200, help="distinct ads (keys; default 200)")
    parser.add_argument("--quick", action="store_true", help="a small run: a smoke test")
    parser.add_argument("--profile", action="store_true", help="also profile the model alone in this process")
    parser.add_argument("--only", default="spark_sql,replay_elements,replay_lifted")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--data", default=str(DATA), help=f"where generated events are kept (default {DATA})")
    opts = parser.parse_args(argv)
    n = opts.events or (50_000 if opts.quick else 1_000_000)
    os.environ.setdefault("DATAFLOW_SPARK_DRIVER_MEMORY", "4g")

    from dataflow_core.pipelines import get
    from dataflow_core.spark.platform.session import get_spark

    spec = get("billing")
    stage = spec.stages[0]
    spark = get_spark("bench-replay", master="local[2]")
    path = Path(opts.data) / f"events-{n}-{opts.keys}"
    if not (path / "_SUCCESS").exists():
        print(f"generating {n:,} events over {opts.keys} keys in {path}", flush=True)
        generate(spark, n, opts.keys, path)
    events = spark.read.parquet(str(path)).persist()
    assert events.count() == n
    schedule, arrivals = schedule_of(spark, events, spec)
    arrivals = arrivals.persist()
    arrivals.count()
    print(f"{n:,} events, {opts.keys} keys, {len(schedule):,} one-minute micro-batches", flush=True)

    figures: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_average": os.getloadavg()},
        "settings": {"events": n, "keys": opts.keys, "batches": len(schedule), "master": "local[2]",
                     "pipeline": "billing"},
        "target_events_per_s": TARGET_EPS, "goal_events_per_s": GOAL_EPS,
    }
    cases = [c.strip() for c in opts.only.split(",") if c.strip()]
    for case in cases:
        print(f"== {case}", flush=True)
        if case == "spark_sql":
            r = baseline_case(spark, events)
        else:
            r = replay_case(spark, arrivals, schedule, stage, lift=None if case == "replay_lifted" else False)
        if r is None:
            print("   (not available in this code)")
            continue
        r["events_per_s"] = n / r["seconds"]
        figures[case] = r
        print(f"   {r['seconds']:.1f} s wall, {r['cpu_s']:.1f} s CPU, {r['events_per_s']:,.0f} events/s, "
              f"peak {mib(r['peak_bytes'])}", flush=True)
    base = figures.get("spark_sql")
    lines = [f"replay of billing, {n:,} events, {opts.keys} keys, {len(schedule):,} micro-batches (2 cores)",
             f"{'case':<18}{'events/s':>12}{'wall s':>9}{'CPU s':>9}{'x SQL wall':>12}{'x SQL CPU':>11}{'peak RSS':>11}"]
    for case in ("spark_sql", "replay_elements", "replay_lifted"):
        r = figures.get(case)
        if r is None:
            continue
        if base:
            r["ratio_wall"] = r["seconds"] / base["seconds"]
            r["ratio_cpu"] = r["cpu_s"] / base["cpu_s"] if base["cpu_s"] else None
        lines.append(f"{case:<18}{r['events_per_s']:>12,.0f}{r['seconds']:>9.1f}{r['cpu_s']:>9.1f}"
                     f"{r.get('ratio_wall', 1):>11.2f}x{(r.get('ratio_cpu') or 0):>10.2f}x{mib(r['peak_bytes']):>11}")
    for case in ("replay_lifted", "replay_elements"):
        if case in figures:
            eps = figures[case]["events_per_s"]
            met = "MET" if eps >= TARGET_EPS else "NOT met"
            lines.append(f"target: {TARGET_EPS:,} events/s (goal {GOAL_EPS:,}): {case} {eps:,.0f} events/s, {met}")
            figures["target_met"] = eps >= TARGET_EPS
            break
    if "replay_elements" in figures and "replay_lifted" in figures:
        a, b = figures["replay_elements"], figures["replay_lifted"]
        same = (a["rows"], a["hash"]) == (b["rows"], b["hash"])
        figures["lifted_equals_elements"] = same
        lines.append(f"lifted output == element-by-element output: {same} ({b['panes']:,} panes); "
                     f"lifting speed-up {a['seconds'] / b['seconds']:.2f}x wall")
        if not same:
            print("\n".join(lines))
            print("ERROR: lifting changed the output", file=sys.stderr)
            return 1
    print()
    print("\n".join(lines))
    if opts.profile:
        for lift in (False, True):
            text = profile_model(arrivals, schedule, stage, lift, 25)
            print(text)
            figures.setdefault("profile", []).append(text)
    from bench_backfill import write_figures  # late: its import puts this checkout first on sys.path

    write_figures(figures, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
