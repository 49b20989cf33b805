"""Micro-batches under faults, each a real `dataflow microbatch` process: killed with
SIGKILL at a random moment of one of several batches, then the same batch again; and two runs
of one pipeline at once. Either way the tables must be those of uninterrupted runs. What
comes after a kill, or after the race, runs on this process's session: the processes
under test are the ones that die or race."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from dataflow_core.model.time import format_instant
from dataflow_core.errors import BUSY_EXIT
from dataflow_core.spark.jobs.microbatch import CRASH_ENV, run_microbatch
from tests.integration.test_backfill import SCHEMA, sessions_pipeline, to_rows, ts
from tests.integration.test_microbatch import VIEWS, batches_of, in_warehouse

REPO = Path(__file__).resolve().parents[2]
PIPELINE, INPUT = "t_fault", "t_fault_in"
TABLES = ("t_fault_s_panes", "t_fault_s", "t_fault_short_panes", "t_fault_short", "t_fault_s__state")
BATCHES = [b for b in batches_of(to_rows(VIEWS)) if b[1]][:2]  # two batches with rows (each kill costs a JVM)
KILL_WITHIN_S = 30.0
"""Kills come at random from start-up to this many seconds in: about as long as a whole run takes
here (a run that finishes first is run again all the same)."""


def _modules(tmp_path: Path) -> Path:
    (tmp_path / "fault_pipelines.py").write_text(
        "from tests.integration.test_backfill import sessions_pipeline\n"
        f"sessions_pipeline({PIPELINE!r}, {INPUT!r})\n"
    )
    return tmp_path


def _command(warehouse: Path, modules: Path, now: int) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "DATAFLOW_WAREHOUSE": str(warehouse), "DATAFLOW_SPARK_MASTER": "local[2]",
           "PYTHONPATH": f"{modules}:{REPO}", "DATAFLOW_PIPELINES": "fault_pipelines"}
    env.pop(CRASH_ENV, None)
    return [sys.executable, "-m", "dataflow_core", "microbatch", "--pipeline", PIPELINE,
            "--now", format_instant(now)], env


def _again(spark, warehouse: Path, now: int, said: list[str] | None = None):
    """The same micro-batch once more, on the shared session: what the killed or refused
    process leaves must be enough for any run to carry on from."""
    _registered()
    with in_warehouse(spark, warehouse):
        return run_microbatch(spark, PIPELINE, now=format_instant(now), progress=None if said is None else said.append)


def _append(spark, warehouse: Path, rows: list[tuple]) -> None:
    df = spark.createDataFrame([(e, u, a, v, ts(t), ts(i)) for e, u, a, v, t, i in rows], SCHEMA)
    df.write.format("delta").mode("append").save(str(warehouse / INPUT))


def _tables(spark, warehouse: Path) -> dict[str, Counter]:
    """Each table's rows without what names a run (ids, batch numbers, pickled state bytes,
    whose bytes may differ for equal state)."""
    out = {}
    for table in TABLES:
        df = spark.read.format("delta").load(str(warehouse / table))
        cols = [c for c in df.columns if c not in ("run_id", "pane_id", "state", "batch")]
        out[table] = Counter(repr(tuple(r)) for r in df.select(*cols).collect())
    return out


@functools.cache
def _registered() -> None:
    """The pipeline the processes load from $DATAFLOW_PIPELINES, registered in this process too."""
    sessions_pipeline(PIPELINE, INPUT)


def _clean(spark, tmp_path: Path, batches) -> dict[str, Counter]:
    """The tables of uninterrupted runs of the same micro-batches, here on the shared session
    (what is under test is the killed or concurrent processes, not this baseline)."""
    _registered()
    warehouse = tmp_path / "clean"
    with in_warehouse(spark, warehouse):
        for end, rows in batches:
            _append(spark, warehouse, rows)
            assert run_microbatch(spark, PIPELINE, now=format_instant(end)).ledger_ok
    return _tables(spark, warehouse)


def test_sigkill_at_random_moments_over_several_batches_then_the_same_command(spark, tmp_path):
    """Of two batches, one chosen at random (the first, on a fresh warehouse, or the second,
    over the first's tables and state) is run as a process and killed (SIGKILL to its process
    group: Python driver, JVM and workers) after a random delay, anywhere from start-up to the
    last commit, and then the same batch runs to the end; the other batch runs here. One
    killed process, not one per batch: each costs a JVM's start, and the seed varies which
    batch and which moment. Set DATAFLOW_KILL_SEED to replay a failure."""
    seed = int(os.environ.get("DATAFLOW_KILL_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    modules = _modules(tmp_path)
    expected = _clean(spark, tmp_path, BATCHES)
    warehouse = tmp_path / "killed"
    killed = rng.randrange(len(BATCHES))
    kills = [f"batch {killed + 1} of {len(BATCHES)}"]
    for n, (end, rows) in enumerate(BATCHES):
        _append(spark, warehouse, rows)
        if n != killed:
            assert _again(spark, warehouse, end).ledger_ok, f"seed {seed}, {kills}"
            continue
        cmd, env = _command(warehouse, modules, end)
        delay = rng.uniform(4.0, KILL_WITHIN_S)
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            proc.wait(timeout=delay)
            kills.append(f"{delay:.1f}s: finished first (exit {proc.returncode})")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output = proc.communicate()[0]
            last = [line for line in output.splitlines() if line.startswith("[microbatch")][-1:]
            kills.append(f"{delay:.1f}s: killed after {last}")
        assert _again(spark, warehouse, end).ledger_ok, f"seed {seed}, {kills}"
    got = _tables(spark, warehouse)
    for table in TABLES:
        assert got[table] == expected[table], f"{table} differs; seed {seed}, kills {kills}"


def test_two_runs_at_once_one_is_refused_and_the_tables_are_those_of_one_run(spark, tmp_path):
    modules = _modules(tmp_path)
    batches = [(BATCHES[-1][0], [r for _, rows in BATCHES for r in rows])]
    expected = _clean(spark, tmp_path, batches)
    warehouse = tmp_path / "twice"
    _append(spark, warehouse, batches[0][1])
    cmd, env = _command(warehouse, modules, batches[0][0])
    procs = [subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outcomes = sorted((p.wait(timeout=600), p.communicate()[0]) for p in procs)
    codes = [code for code, _ in outcomes]
    report = "\n---\n".join(out for _, out in outcomes)
    assert codes == [0, BUSY_EXIT], report
    refused = outcomes[1][1].strip().splitlines()[-1]
    assert refused.startswith("dataflow microbatch: pipeline 't_fault'"), refused
    assert "Traceback" not in outcomes[1][1], "one readable line, not a traceback"
    assert _tables(spark, warehouse) == expected
    said: list[str] = []
    again = _again(spark, warehouse, batches[0][0], said)
    assert again.ledger["read"] == 0 and any("nothing to do" in line for line in said), said
    assert _tables(spark, warehouse) == expected
