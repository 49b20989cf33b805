"""The liveness rule of a pipeline's holder (`sinks.lock_holders.gone`, issue 63.1), with real
processes of this machine: a live process is alive only under its own start time (a reused
pid is another process), a killed one is gone, and an owner on another machine is judged by
its heartbeat alone; a failure recorded after the owner took the run makes it failed, one
before (a resumed run's earlier attempt) does not. No Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from dataflow_core.spark.sinks.lock_holders import HEARTBEAT_TIMEOUT_S, Owner, gone, process_start, this_owner


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_process_of_this_machine_is_alive_under_its_own_start_and_gone_once_killed():
    proc = _sleeper()
    try:
        started = process_start(proc.pid)
        assert started is not None
        here = this_owner()
        owner = Owner(here.host, proc.pid, started, time.time(), here.boot)
        assert gone(owner, None, None, time.time()) is None  # alive, heartbeat or not
        os.kill(proc.pid, signal.SIGSTOP)  # stopped is not gone
        assert gone(owner, None, None, time.time() + 10 * HEARTBEAT_TIMEOUT_S) is None
        os.kill(proc.pid, signal.SIGCONT)
        reused = Owner(here.host, proc.pid, str(int(started) - 1), time.time(), here.boot)
        assert "is gone" in gone(reused, None, None, time.time())  # the same pid, another process
        rebooted = Owner(here.host, proc.pid, started, time.time(), "another-boot")
        assert gone(rebooted, time.time(), None, time.time()) is None  # another boot: judged by heartbeat alone
        assert gone(rebooted, time.time() - 2 * HEARTBEAT_TIMEOUT_S, None, time.time()) is not None
    finally:
        proc.kill()
        proc.wait()
    what = gone(owner, time.time() - 5, None, time.time())
    assert what is not None and f"pid {proc.pid}" in what and "is gone" in what and "last heartbeat" in what


def test_an_owner_on_another_machine_is_judged_by_its_heartbeat():
    now = time.time()
    elsewhere = Owner("another-host", os.getpid(), process_start(os.getpid()), now - 1000)
    assert gone(elsewhere, now - HEARTBEAT_TIMEOUT_S / 2, None, now) is None
    stale = gone(elsewhere, now - 2 * HEARTBEAT_TIMEOUT_S, None, now)
    assert stale is not None and "another-host" in stale and f"{2 * HEARTBEAT_TIMEOUT_S:.0f} s" in stale
    assert gone(elsewhere, None, None, now) is not None  # never beat since it took the run long ago
    assert gone(elsewhere, now - 30, None, now, timeout_s=10) is not None  # the timeout is the caller's to state


def test_a_failure_after_the_owner_took_the_run_is_failed_one_before_is_not():
    me = this_owner()  # alive
    assert gone(me, time.time(), (me.since - 60, "an earlier attempt"), time.time()) is None
    failed = gone(me, time.time(), (me.since + 1, "DataflowError: bad row"), time.time())
    assert failed is not None and failed.startswith("failed at ") and "bad row" in failed
    assert gone(None, None, (0.0, "x"), time.time()).startswith("failed at ")  # a lock from before owners
    assert gone(None, None, None, time.time()) is None  # nothing to tell by
