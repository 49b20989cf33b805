"""What the warehouse on S3 costs and what the product's log store buys (issue 49).

On a local S3 server (moto's, tests/s3_server.py), in one run:

1. one-row appends (a Delta commit each) on `s3a://` against a local folder, from one warm
   session: seconds per commit, and the object-store requests per commit (the server's log);
2. the billing backfill of tests/s3_backfill_twin.py (300 sample rows, six hours) on S3 and
   on a local folder in one process, in both orders (the first pays the JVM's warm-up):
   seconds, and the requests it made;
3. a warm micro-batch of billing (a first batch takes the pipeline live on a sample of
   `--batch-rows` rows, then a second sample as long is appended and timed as the next batch),
   on S3 and on a local folder in one process, in both orders: seconds, and the object-store
   requests of the timed batch;
4. the log store duel of tests/s3_append_driver.py (two drivers write log version N within
   milliseconds, ROUNDS times) with Delta's default S3 log store and with the product's:
   how many versions both drivers were told they had written (one of the two commits lost),
   and how many N.json were written twice.

A local server answers in well under a millisecond, so (1) and (2) measure the connector's
own work and request counts, not a network: on AWS each request adds its latency (10-30 ms).

    .venv/bin/python benchmarks/bench_s3.py [--rounds 10] [--appends 10]

Writes benchmarks/results/s3.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import s3_server  # noqa: E402

DEFAULT_STORE = "io.delta.storage.S3SingleDriverLogStore"


def _child_appends(local: str, s3: str, count: int) -> None:
    """In a child process: `count` one-row appends to each warehouse, each timed."""
    from dataflow_core.spark.platform.session import get_spark
    from dataflow_core.spark.platform.tables import write_table

    spark = get_spark("bench-s3-appends", master="local[1]", warehouse=s3)
    out = {}
    for name, warehouse in (("s3", s3), ("local", local)):
        get_spark(warehouse=warehouse)
        write_table(spark, spark.createDataFrame([(0,)], "n int"), "appends", mode="overwrite")  # warm
        times = []
        for number in range(count):
            started = time.perf_counter()
            write_table(spark, spark.createDataFrame([(number,)], "n int"), "appends", mode="append")
            times.append(time.perf_counter() - started)
        out[name] = times
    print(json.dumps({"appends": out}), flush=True)


def _child_microbatch(local: str, s3: str, rows: int, server: s3_server.S3Server, local_first: bool) -> None:
    """In a child process: per warehouse, billing taken live on a sample, then one more
    sample's rows as a timed micro-batch, with the object-store requests it made."""
    from dataflow_core.sample.config import SampleConfig, parse_start
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.jobs.microbatch import run_microbatch
    from dataflow_core.spark.platform.session import get_spark

    spark = get_spark("bench-s3-microbatch", master="local[2]", warehouse=s3)
    out = {}
    order = [("s3", s3), ("local", local)]
    for name, warehouse in reversed(order) if local_first else order:
        get_spark(warehouse=warehouse)
        for n, start in enumerate(("2024-05-01T00:00:00Z", "2024-05-01T06:00:00Z")):
            config = SampleConfig(rows=rows, seed=n + 1, start=parse_start(start), span_hours=6.0)
            write_sample(spark, config, table="video_events", mode="append" if n else "overwrite",
                         progress=lambda _: None)
            before, started = len(server.requests()), time.perf_counter()
            result = run_microbatch(spark, "billing", now=f"2024-05-01T{6 * (n + 1):02d}:05:00Z")
            assert result.ledger_ok, result.ledger
        out[name] = {"batch_s": round(time.perf_counter() - started, 2), "rows": result.ledger["read"],
                     "requests": len(server.requests()) - before}
    print(json.dumps({"microbatch": out}), flush=True)


def microbatch(server: s3_server.S3Server, rows: int, local_first: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        prefix = "microbatch-local-first" if local_first else "microbatch-s3-first"
        child = subprocess.run([sys.executable, __file__, "--child-microbatch", str(rows), tmp, f"s3a://lake/{prefix}",
                                str(server.pid), server.endpoint, "local-first" if local_first else "s3-first"],
                               env={**os.environ, **server.env()}, cwd=ROOT, capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"the micro-batch child failed:\n{child.stdout[-3000:]}{child.stderr[-3000:]}")
    out = json.loads(child.stdout.strip().splitlines()[-1])["microbatch"]
    return {"rows": out["s3"]["rows"], "s3_batch_s": out["s3"]["batch_s"], "local_batch_s": out["local"]["batch_s"],
            "ratio": round(out["s3"]["batch_s"] / out["local"]["batch_s"], 2),
            "s3_requests_per_batch": out["s3"]["requests"]}


def _requests(server: s3_server.S3Server) -> int:
    return len(server.requests())


def _kind(method: str, path: str) -> str:
    """What a request was for: listing, probing, reading or writing the log or the data."""
    if method == "GET" and ("list-type" in path or "prefix=" in path or "delimiter" in path):
        return "LIST"
    where = "log" if "/_delta_log/" in path else "data"
    return f"{method} {where}"


def appends(server: s3_server.S3Server, count: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, **server.env()}
        before = _requests(server)
        child = subprocess.run([sys.executable, __file__, "--child-appends", str(count), tmp, "s3a://lake/appends"],
                               env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    times = json.loads(child.stdout.strip().splitlines()[-1])["appends"]
    median = {name: sorted(values)[len(values) // 2] for name, values in times.items()}
    # the warm-up overwrite and table creation are in the count too: a rough upper bound
    made = server.requests()[before:]
    kinds: dict[str, int] = {}
    for method, path in made:
        kinds[_kind(method, path)] = kinds.get(_kind(method, path), 0) + 1
    per_commit = {kind: round(n / (count + 1), 1) for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])}
    return {"commits": count, "s3_median_s": round(median["s3"], 3), "local_median_s": round(median["local"], 3),
            "ratio": round(median["s3"] / median["local"], 2), "s3_requests_per_commit": round(len(made) / (count + 1), 1),
            "s3_requests_per_commit_by_kind": per_commit}


def backfill(server: s3_server.S3Server, local_first: bool) -> dict:
    """The twin backfill; whichever warehouse goes first pays the JVM's warm-up, hence both orders."""
    with tempfile.TemporaryDirectory() as tmp:
        before = _requests(server)
        prefix = "backfill-local-first" if local_first else "backfill-s3-first"
        child = subprocess.run([sys.executable, "-m", "tests.s3_backfill_twin", tmp, f"s3a://lake/{prefix}",
                                *(["local-first"] if local_first else [])],
                               env={**os.environ, **server.env()}, cwd=ROOT, capture_output=True, text=True, check=True)
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["s3"]["rows"] == out["local"]["rows"]
    return {"s3_backfill_s": out["s3"]["backfill_s"], "local_backfill_s": out["local"]["backfill_s"],
            "ratio": round(out["s3"]["backfill_s"] / out["local"]["backfill_s"], 2),
            "s3_generate_s": out["s3"]["generate_s"], "local_generate_s": out["local"]["generate_s"],
            "s3_requests_generate_and_backfill": _requests(server) - before}


def duel(server: s3_server.S3Server, store: str | None, rounds: int, prefix: str) -> dict:
    env = {**os.environ, **server.env(), "DATAFLOW_WAREHOUSE": f"s3a://lake/{prefix}"}
    if store:
        env["DATAFLOW_S3_LOG_STORE"] = store
    with tempfile.TemporaryDirectory() as barrier:
        drivers = [subprocess.Popen([sys.executable, "-m", "tests.s3_append_driver", "duel", tag, other, str(rounds),
                                     barrier], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
                   for tag, other in (("a", "b"), ("b", "a"))]
        lines = [line for driver in drivers for line in driver.communicate()[0].splitlines()]
    results = [json.loads(line) for line in lines if '"won"' in line]
    wins: dict[int, int] = {}
    for result in results:
        wins[result["round"]] = wins.get(result["round"], 0) + int(result["won"])
    versions = server.versions("lake", f"{prefix}/duel/_delta_log/")
    return {"rounds": rounds, "rounds_both_won": sum(1 for n in wins.values() if n > 1),
            "log_files_written_twice": sum(1 for n in versions.values() if n > 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--appends", type=int, default=10)
    parser.add_argument("--child-appends", nargs=3, metavar=("COUNT", "LOCAL", "S3"))
    parser.add_argument("--batch-rows", type=int, default=5000, help="rows per micro-batch sample")
    parser.add_argument("--child-microbatch", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--only", default="appends,backfill,microbatch,duel", help="comma-separated parts to run")
    args = parser.parse_args()
    if args.child_appends:
        _child_appends(args.child_appends[1], args.child_appends[2], int(args.child_appends[0]))
        return 0
    if args.child_microbatch:
        rows, local, s3, pid, endpoint, order = args.child_microbatch
        _child_microbatch(local, s3, int(rows), s3_server.S3Server(int(pid), endpoint), order == "local-first")
        return 0
    server = s3_server.start()
    try:
        server.create_bucket("lake", versioning=True)
        only, figures = args.only.split(","), {}
        if "appends" in only:
            figures["appends"] = appends(server, args.appends)
        if "backfill" in only:
            figures["backfill_s3_first"] = backfill(server, local_first=False)
            figures["backfill_local_first"] = backfill(server, local_first=True)
        if "microbatch" in only:
            figures["microbatch_s3_first"] = microbatch(server, args.batch_rows, local_first=False)
            figures["microbatch_local_first"] = microbatch(server, args.batch_rows, local_first=True)
        if "duel" in only:
            figures["duel_default_log_store"] = duel(server, DEFAULT_STORE, args.rounds, "duel-default")
            figures["duel_product_log_store"] = duel(server, None, args.rounds, "duel-product")
    finally:
        server.stop()
    print(json.dumps(figures, indent=2))
    out = ROOT / "benchmarks" / "results" / "s3.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps({**previous, **figures}, indent=2) + "\n")  # parts not run keep their figures
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
