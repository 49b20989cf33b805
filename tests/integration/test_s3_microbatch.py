"""Micro-batches of one pipeline on an `s3a://` warehouse, each a real `dataflow microbatch`
process (its own driver and JVM), against uninterrupted runs on a local folder:

- the first batch's run is SIGKILLed at a random moment (Python driver, JVM and workers), then
  the same batch runs again to its end;
- two runs of the second batch at once: exactly one commits the batch, the other is refused
  in one line;

and the tables equal those of the uninterrupted runs.

On S3 this rests on the product's log store: the claim of the batch in `dataflow_batches` is a
Delta commit both drivers race for, and only a log store that lets exactly one of them create
the log version makes the loser see the winner's claim (docs/deployment.md)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from dataflow_core.errors import BUSY_EXIT
from dataflow_core.model.time import format_instant
from tests import s3_server
from tests.integration.test_backfill import to_rows
from tests.integration.test_microbatch import VIEWS, batches_of

REPO = Path(__file__).resolve().parents[2]
PIPELINE, INPUT = "t_s3mb", "t_s3mb_in"
TABLES = tuple(f"{PIPELINE}_{t}" for t in ("s_panes", "s", "short_panes", "short", "s__state"))
ROWS = to_rows(VIEWS)
_FIRST = next(b for b in batches_of(ROWS) if b[1])
BATCHES = [_FIRST, (batches_of(ROWS)[-1][0], [r for r in ROWS if r not in _FIRST[1]])]
"""The first batch with rows, then every other row at the last batch's end."""
KILL_WITHIN_S = 25.0
"""Kills come at random from start-up to this many seconds in (a run that finishes first is
run again all the same)."""


def _rows(uri: str, storage_options: dict | None) -> Counter:
    """A table's rows through delta-rs, without what names a run."""
    from deltalake import DeltaTable

    table = DeltaTable(uri, storage_options=storage_options).to_pyarrow_table()
    keep = [c for c in table.column_names if c not in ("run_id", "pane_id", "state", "batch")]
    return Counter(repr(tuple(row.values())) for row in table.select(keep).to_pylist())


def _kill_at_random(cmd: list[str], env: dict[str, str], seed: int) -> str:
    """Start `cmd` and SIGKILL its process group after a random delay; what happened, in words."""
    delay = random.Random(seed).uniform(3.0, KILL_WITHIN_S)
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        proc.wait(timeout=delay)
        return f"{delay:.1f}s: finished first (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        said = [line for line in proc.communicate()[0].splitlines() if line.startswith("[microbatch")][-1:]
        return f"{delay:.1f}s: killed after {said}"


def _command_lines_while(procs: list[subprocess.Popen], secret: str) -> dict[str, list[str]]:
    """The command lines (what `ps` shows any local user) of `procs` and their descendants,
    read every half second until they end: the Java ones seen, and those holding `secret`."""
    seen: dict[str, list[str]] = {"java": [], "with secret": []}
    while any(p.poll() is None for p in procs):
        for pid in _descendants({p.pid for p in procs}):
            try:
                text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # the process ended meanwhile
                continue
            if "SparkSubmit" in text and text[:200] not in seen["java"]:
                seen["java"].append(text[:200])
            if secret in text:
                seen["with secret"].append(text[:200])
        time.sleep(0.5)
    return seen


def _descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them, from /proc's parent ids."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, grew = set(roots), True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in found} - found
        found |= below
        grew = bool(below)
    return found


def test_a_killed_micro_batch_run_again_and_two_at_once_on_s3_equal_uninterrupted_runs(tmp_path: Path):
    from dataflow_core.objectstore import S3Settings

    seed = int(os.environ.get("DATAFLOW_KILL_SEED", time.time_ns() % 1_000_000))
    server = s3_server.start()
    setup = None
    try:
        server.create_bucket("lake")
        s3, local = "s3a://lake/mb", str(tmp_path / "local")
        env = {**os.environ, **server.env(), "DATAFLOW_SPARK_MASTER": "local[2]"}
        log = tmp_path / "setup.log"  # a file, not a pipe: nobody reads while the driver works
        with open(log, "w") as errors:
            setup = subprocess.Popen([sys.executable, "-m", "tests.s3_microbatch_setup", local, s3], env=env,
                                     cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True)
        assert setup.stdout.readline().strip() == "ready", log.read_text()[-4000:]

        (tmp_path / "s3mb_pipelines.py").write_text(
            "from tests.integration.test_backfill import sessions_pipeline\n"
            f"sessions_pipeline({PIPELINE!r}, {INPUT!r})\n")
        run_env = {**env, "DATAFLOW_WAREHOUSE": s3, "PYTHONPATH": f"{tmp_path}:{REPO}",
                   "DATAFLOW_PIPELINES": "s3mb_pipelines"}
        cmd = [sys.executable, "-m", "dataflow_core", "microbatch", "--pipeline", PIPELINE, "--now"]
        kill = _kill_at_random([*cmd, format_instant(BATCHES[0][0])], run_env, seed)
        out, _ = setup.communicate("go\n", timeout=600)  # the same batch again, then the second's rows
        assert setup.returncode == 0 and out.split() == ["done"], f"seed {seed}, {kill}:\n{log.read_text()[-4000:]}"

        procs = [subprocess.Popen([*cmd, format_instant(BATCHES[1][0])], env=run_env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
        shown = _command_lines_while(procs, server.env()["AWS_SECRET_ACCESS_KEY"])
        outcomes = sorted((p.wait(timeout=600), p.communicate()[0]) for p in procs)
        assert shown["java"] and not shown["with secret"], shown  # their JVMs were seen, none with the key
        report = "\n---\n".join(out[-3000:] for _, out in outcomes)
        assert [code for code, _ in outcomes] == [0, BUSY_EXIT], report
        assert outcomes[1][1].strip().splitlines()[-1].startswith(f"dataflow microbatch: pipeline '{PIPELINE}'"), report

        options = S3Settings.from_env(server.env()).storage_options()
        for table in TABLES:
            assert _rows(f"s3://lake/mb/{table}", options) == _rows(f"{local}/{table}", None), \
                f"{table} differs; seed {seed}, {kill}"
    finally:
        if setup is not None and setup.poll() is None:
            setup.kill()
        server.stop()
