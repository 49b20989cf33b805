"""A backfill of a live pipeline as a real `dataflow backfill` process: killed with SIGKILL at
random moments, the input changed (a view deleted, a late one appended) and run again; then, on the same pipeline, one paused with SIGSTOP after
reading while the input changes again and a micro-batch tries to run. Once both sides have
run, the results equal a recomputation from the input: deleted views are not counted, late
views are counted once, and every window's pane log is one history. (One test, not two: the
live batches before and the checks after are the same, and each costs a minute of the
suite.)"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataflow_core.errors import PipelineBusy
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.panes import history_breaks
from dataflow_core.model.time import format_instant
from dataflow_core.spark.jobs.backfill import run_backfill
from dataflow_core.spark.jobs.crash import CRASH_ENV, RAISE_ENV
from dataflow_core.spark.jobs.microbatch import run_microbatch
from dataflow_core.spark.platform.tables import read_table
from tests.integration.test_backfill import DAY0, M, to_rows, write_input
from tests.integration.test_backfill_live import _delete
from tests.integration.test_microbatch import in_warehouse
from tests.integration.test_one_history import VIEWS, _billing, _histories, _results, _sums

REPO = Path(__file__).resolve().parents[2]
PIPELINE = "t_bl_proc"
S = 1000
NOW = format_instant(DAY0 + 11 * M)
"""The processing time of the killed backfills; the paused one runs a minute later."""
KILLS = 1
"""Backfill processes killed before the one run to the end: each costs a JVM's start, and the
in-process law (`test_backfill_locks.test_crash_and_change_law`) covers every crash point."""
KILL_WITHIN_S = 30.0
"""Kills come at random from start-up to this many seconds in: about as long as a whole run takes
here (a run that finishes first is run again all the same)."""


@functools.cache
def _spec():
    """The pipeline the processes load from $DATAFLOW_PIPELINES, registered here too."""
    return _billing(PIPELINE, AccumulationMode.RETRACTING)


def dataflow_process(warehouse: Path, modules: Path, pipeline: str, *args: str, master: str = "local[2]",
                     stderr: int = subprocess.STDOUT, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A real `dataflow ARGS` process (its own session: it can be killed as a group) on the
    retracting billing pipeline `pipeline`, which it loads from a module written to
    `modules`; stderr into stdout unless `stderr` says otherwise; `env`: more of its
    environment (the crash switch's, say: the test's own is never inherited)."""
    (modules / f"{pipeline}_pipelines.py").write_text(
        "from dataflow_core.model.accumulation import AccumulationMode\n"
        "from tests.integration.test_one_history import _billing\n"
        f"_billing({pipeline!r}, AccumulationMode.RETRACTING)\n")
    more = env or {}
    env = {**os.environ, "DATAFLOW_WAREHOUSE": str(warehouse), "DATAFLOW_SPARK_MASTER": master,
           "PYTHONPATH": f"{modules}:{REPO}", "DATAFLOW_PIPELINES": f"{pipeline}_pipelines", "PYTHONUNBUFFERED": "1"}
    env.pop(CRASH_ENV, None)
    env.pop(RAISE_ENV, None)
    env.update(more)
    return subprocess.Popen([sys.executable, "-m", "dataflow_core", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)


def _backfill(warehouse: Path, modules: Path, now: str = NOW) -> subprocess.Popen:
    return dataflow_process(warehouse, modules, PIPELINE, "backfill", "--pipeline", PIPELINE,
                            "--start", "2024-05-01", "--end", "2024-05-02", "--now", now)


def _live(spark, rows) -> list[tuple]:
    """Micro-batches over the first 8 minutes of arrivals, EARLY panes out; returns what
    they read."""
    spec = _spec()
    early = [r for r in rows if r[5] < DAY0 + 8 * M]
    write_input(spark, spec.input_table, early)
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 8 * M)).ledger_ok
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 8 * M + 150 * S)).ledger_ok
    return early


def _change(spark, standing: list[tuple], n: int = 1) -> list[tuple]:
    """The `n`th change: a counted view deleted and a late view appended; returns the input
    as it stands."""
    spec = _spec()
    gone = standing[0]
    _delete(spark, spec.input_table, gone[0])
    late = (f"late-{n}", "u9", gone[2], "23", DAY0 + 60 * S, DAY0 + (8 + n) * M)
    write_input(spark, spec.input_table, [late], mode="append")
    return [r for r in standing if r[0] != gone[0]] + [late]


def _carry_on_and_check(spark, rows, standing) -> None:
    """The rest of the arrivals, micro-batches up to every timer; then the results are a
    recomputation and every window one history."""
    spec = _spec()
    rest = [r for r in rows if r[5] >= DAY0 + 8 * M]
    write_input(spark, spec.input_table, rest, mode="append")
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 30 * M)).ledger_ok
    assert run_microbatch(spark, spec.name, now=format_instant(DAY0 + 3 * 3600 * S)).ledger_ok
    assert _results(spark, spec.stages[0]) == _sums(standing + rest)
    for window, history in _histories(spark, spec.stages[0]).items():
        assert history_breaks(history) == [], (window, history)
    runs = read_table(spark, "dataflow_runs").where(f"pipeline = '{PIPELINE}' AND status = 'finished'").collect()
    assert runs and all(json.loads(r["ledger"])["balanced"] for r in runs), "every backfill's ledger balances"


def test_a_backfill_killed_at_random_moments_then_one_paused_while_the_input_changes(spark, tmp_path):
    """First, the backfill of a changed input (a view deleted, a late one appended) is killed
    with SIGKILL (its process group: driver, JVM, workers) after random delays, then run to
    the end. Then the input changes again while the next backfill is stopped with SIGSTOP
    once it has read: a micro-batch is refused (the backfill has the pipeline locked); SIGCONT, the
    backfill finishes; a micro-batch and the next night's backfill then bring every figure to
    the input as it stands, and the micro-batches carry on. Set DATAFLOW_KILL_SEED to replay
    a failure."""
    seed = int(os.environ.get("DATAFLOW_KILL_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    rows = to_rows(VIEWS)
    warehouse = tmp_path / "wh"
    kills = []
    with in_warehouse(spark, warehouse):
        standing = _change(spark, _live(spark, rows))
        for n in range(KILLS):
            delay = rng.uniform(3.0, KILL_WITHIN_S)
            proc = _backfill(warehouse, tmp_path)
            try:
                proc.wait(timeout=delay)
                kills.append(f"{delay:.1f}s: finished first (exit {proc.returncode})")
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                last = [ln for ln in proc.communicate()[0].splitlines() if ln.startswith("[backfill")][-1:]
                kills.append(f"{delay:.1f}s: killed after {last}")
            # Between the kill and the re-run, a counted view is deleted and a late one arrives:
            # the re-run reads the version it pinned, so the late view is the micro-batches'.
            standing = _change(spark, standing, 10 + n)
        again = run_backfill(spark, PIPELINE, "2024-05-01", "2024-05-02", now=NOW)
        assert again.ledger_ok, f"seed {seed}, {kills}"

        proc = _backfill(warehouse, tmp_path, now=format_instant(DAY0 + 12 * M))
        output = []
        try:
            for line in proc.stdout:  # type: ignore[union-attr]
                output.append(line)
                if "computing windows" in line:
                    os.killpg(proc.pid, signal.SIGSTOP)
                    break
            else:
                pytest.fail("the backfill ended before reading: " + "".join(output))
            standing = _change(spark, standing, 2)
            with pytest.raises(PipelineBusy, match="locked by backfill"):
                run_microbatch(spark, PIPELINE, now=format_instant(DAY0 + 12 * M))
        finally:
            os.killpg(proc.pid, signal.SIGCONT)
        rest_of_output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, "".join(output) + rest_of_output
        assert run_microbatch(spark, PIPELINE, now=format_instant(DAY0 + 13 * M)).ledger_ok  # the late view
        assert run_backfill(spark, PIPELINE, "2024-05-01", "2024-05-02", now=format_instant(DAY0 + 14 * M)).ledger_ok
        try:
            _carry_on_and_check(spark, rows, standing)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, kills {kills}: {exc}") from None
