"""The pipeline's loop lock (`sinks.loop_lock`, issue 63.7): created exclusively with the
store's own conditional create, owned, renewed by a heartbeat, taken over once lapsed by
exactly one taker, and a loop that lost it stops before its next batch. The exclusivity on
this process's session (threads racing); what is about processes (a loop stopped past the
lock's timeout, another taking over, the first let go) with real `dataflow` processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from dataflow_core.errors import PipelineBusy
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.spark.jobs.reset import reset_pipeline
from dataflow_core.spark.platform.tables import read_table
from dataflow_core.spark.sinks.files import create_exclusive, delete_file, write_text
from dataflow_core.spark.sinks.lock_holders import Owner, beat, heartbeat_path
from dataflow_core.spark.sinks.loop_lock import (
    TIMEOUT_ENV, LockHolder, LockLost, LoopLock, lock_holder, lock_path, lock_timeout_s,
)
from tests.integration.test_backfill import M, to_rows, write_input
from tests.integration.test_backfill_locks import _read_until
from tests.integration.test_backfill_live_processes import dataflow_process
from tests.integration.test_microbatch import in_warehouse
from tests.integration.test_one_history import VIEWS, _billing

LOOP = "microbatch --loop"


def _race(spark, pipeline: str, n: int) -> tuple[list[LoopLock], list[str]]:
    """`n` threads taking the pipeline's lock at the same moment: the locks taken, and the
    busy lines of the others."""
    barrier, won, busy = threading.Barrier(n), [], []

    def take() -> None:
        lock = LoopLock(spark, pipeline, LOOP, "refused")
        barrier.wait()
        try:
            won.append(lock.__enter__())
        except PipelineBusy as exc:
            busy.append(str(exc))

    threads = [threading.Thread(target=take) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return won, busy


def test_of_takers_at_once_exactly_one_wins_a_free_or_a_lapsed_lock(spark, tmp_path):
    """Four takers of a free lock: one wins, three are busy naming it. Its lock deleted (as a
    reset taking it over does), its holder stops at its next check. Four takers of a lapsed
    lock (its owner's process is gone): one wins, whatever order their steps interleave in."""
    name = f"t_lock_{time.time_ns() % 10**6}"
    with in_warehouse(spark, tmp_path / "wh"):
        won, busy = _race(spark, name, 4)
        assert len(won) == 1 and len(busy) == 3, (won, busy)
        assert all(f"is locked by `dataflow {LOOP}` (pid {os.getpid()} " in line for line in busy), busy
        won[0].check()  # still its own
        delete_file(spark, lock_path(spark, name))
        with pytest.raises(LockLost, match="lost its lock, deleted"):
            won[0].check()
        won[0].__exit__(None, None, None)

        dead = _dead_pid()
        gone = LockHolder("old", LOOP, Owner(socket.gethostname(), dead, "1", time.time()))
        assert create_exclusive(spark, lock_path(spark, name), gone.text())
        assert not create_exclusive(spark, lock_path(spark, name), gone.text())  # exclusive, as a commit
        assert lock_holder(spark, name) is None  # lapsed: its process is gone
        won, busy = _race(spark, name, 4)
        assert len(won) == 1 and len(busy) == 3, (won, busy)
        assert lock_holder(spark, name) == won[0].me
        won[0].__exit__(None, None, None)
        assert lock_holder(spark, name) is None


def _dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_heartbeat_read_while_its_run_rewrites_it_reads_a_whole_beat(spark, tmp_path):
    """A heartbeat is replaced in place every few seconds while other commands read it (is
    the locking run still there?). On a local folder Hadoop replaces the file and then its
    checksum, so a read in between used to fail with a ChecksumException, which failed the
    reading command (a micro-batch tried while a backfill had the pipeline locked). Here a
    thread rewrites a beat as fast as it can while this one reads it: every read is a whole
    beat of the owner."""
    from dataflow_core.spark.sinks.lock_holders import last_beat

    name = f"t_beat_{time.time_ns() % 10**6}"
    owner = Owner(host="h", pid=1, started="s", since=time.time())
    stop, writes = threading.Event(), [0]
    with in_warehouse(spark, tmp_path / "wh"):
        beat(spark, name, "backfill-x", owner)

        def rewrite() -> None:
            while not stop.is_set():
                write_text(spark, heartbeat_path(spark, name, "backfill-x"),
                           json.dumps({"owner": owner.as_dict(), "at": time.time(), "pad": "x" * (writes[0] % 500)}))
                writes[0] += 1

        writer = threading.Thread(target=rewrite, daemon=True)
        writer.start()
        try:
            beats = [last_beat(spark, name, "backfill-x") for _ in range(300)]
        finally:
            stop.set()
            writer.join()
    assert writes[0] > 50, "the writer kept rewriting while the reads ran"
    assert all(who == owner and at for who, at in beats), beats[:5]


def test_a_silent_holder_is_taken_over_and_stops_at_its_next_check(spark, tmp_path):
    """A holder alive but silent (no heartbeat: stopped, paused) for longer than the timeout
    lapses; the next taker takes the lock over and the holder's next check says so. (Its
    last heartbeat is written 2 timeouts back, so no clock of a loaded machine decides.)"""
    name = f"t_lock_{time.time_ns() % 10**6}"
    with in_warehouse(spark, tmp_path / "wh"):
        silent = LoopLock(spark, name, LOOP, "refused")
        silent._take()  # taken, and no heartbeat thread: silent from now on
        beat(spark, name, silent.me.beat_id, silent.me.owner)
        with pytest.raises(PipelineBusy, match="is locked by"):
            LoopLock(spark, name, "reset", "reset refused").__enter__()
        stale = {"owner": silent.me.owner.as_dict(), "at": time.time() - 2 * lock_timeout_s()}
        write_text(spark, heartbeat_path(spark, name, silent.me.beat_id), json.dumps(stale))
        said: list[str] = []
        with LoopLock(spark, name, "reset", "reset refused", said.append) as taker:
            assert said and "took over the lock" in said[0] and "sent no heartbeat for" in said[0], said
            with pytest.raises(LockLost, match=r"lost its lock, taken over by `dataflow reset` \(pid "):
                silent.check()
            taker.check()
        assert lock_holder(spark, name) is None


def test_a_loop_stopped_past_the_timeout_is_taken_over_and_stops_before_its_next_batch(spark, tmp_path):
    """Real `--loop` processes. While loop A runs, `dataflow reset` is refused with one line
    naming it. A is stopped (SIGSTOP of its process group) past the lock's timeout; loop B
    takes its lock over; new input is appended and B stopped in turn; A, let go (SIGCONT),
    exits non-zero with one line saying it lost its lock to B, having written no batch record."""
    pipeline = f"t_lock_loop_{time.time_ns() % 10**6}"
    spec = _billing(pipeline, AccumulationMode.RETRACTING)
    warehouse = tmp_path / "wh"
    env = {TIMEOUT_ENV: "8"}  # generous: a loaded machine may starve a live heartbeat for seconds
    loop = ["microbatch", "--pipeline", pipeline, "--loop", "1s"]
    with in_warehouse(spark, warehouse):
        write_input(spark, spec.input_table, to_rows(VIEWS))
        a = dataflow_process(warehouse, tmp_path, pipeline, *loop, master="local[1]", stderr=subprocess.PIPE, env=env)
        b = None
        try:
            _read_until(a, "ledger:")  # its first batch is done
            with pytest.raises(PipelineBusy, match=rf"is locked by `dataflow {LOOP}` \(pid {a.pid} ") as refused:
                reset_pipeline(spark, pipeline)
            assert "\n" not in str(refused.value) and "reset refused, nothing deleted" in str(refused.value)
            _stop(a)
            time.sleep(10)  # past the timeout: A's heartbeat is stale
            b = dataflow_process(warehouse, tmp_path, pipeline, *loop, master="local[1]", stderr=subprocess.PIPE,
                                 env=env)
            took = _read_until(b, "took over the lock")[-1]
            assert f"(pid {a.pid} on host " in took and "sent no heartbeat" in took, took
            later = [(f"late-{e}", u, ad, v, t + 20 * M, i + 20 * M) for e, u, ad, v, t, i in to_rows(VIEWS)]
            write_input(spark, spec.input_table, later, mode="append")
            _stop(b)  # new input waits: A, let go, would read it in its next batch
            before = _log_rows(spark, pipeline)
            os.killpg(a.pid, signal.SIGCONT)
            _, err = a.communicate(timeout=120)
            assert a.returncode == 2, err[-3000:]
            lines = [line for line in err.splitlines() if line.startswith("dataflow microbatch:")]
            assert len(lines) == 1 and "lost its lock, taken over by `dataflow microbatch --loop` " in lines[0], err
            assert f"(pid {b.pid} on host " in lines[0] and "stopped before its next batch" in lines[0], lines
            assert _log_rows(spark, pipeline) == before  # A wrote no batch record
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.communicate(timeout=60)
        assert lock_holder(spark, pipeline) is None  # B's process is gone: its lock lapsed at once


def _stop(proc: subprocess.Popen) -> None:
    """SIGSTOP of the process group, once its Python process is stopped."""
    os.killpg(proc.pid, signal.SIGSTOP)
    while open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.05)


def _log_rows(spark, pipeline: str) -> int:
    return read_table(spark, "dataflow_batches").where(f"pipeline = '{pipeline}'").count()
