"""Who has a pipeline locked, and whether it still runs: a lock's owner (host, process id and the
process's start, so that a reused process id is not taken for it) and its heartbeat.

A run that dies keeps its lock, since the same command resumes it; every other command must
then tell a lock whose run is working (it waits, or is busy) from one whose run is gone or
failed (it stops at once and says how to resume or abandon that run). The rule (`gone`):
- on the owner's own machine (same host name and boot), its process answers: gone when no
  live process has its id, or the one that has it started at another moment;
- from another machine, only its heartbeat can: a file in the warehouse
  (`_dataflow_holds/<pipeline>/<run id>.json`) that the run rewrites every `HEARTBEAT_S`;
  older than `HEARTBEAT_TIMEOUT_S`, its run is taken for gone;
- anywhere, a run recorded `failed` after its owner took it (a resumed run's owner takes it
  again) failed: a process alive but done with it (an Airflow worker, a test) still holds it.
The heartbeat file is rewritten by whichever process takes or resumes the run, so it names
the current owner; the lock's own record names the one that claimed it, for the moments
before the first beat.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from dataflow_core.spark.sinks.files import delete_file, read_text, write_text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HEARTBEAT_S = 10.0
"""How often a locking run rewrites its heartbeat."""
HEARTBEAT_TIMEOUT_S = 120.0
"""A holder on another machine whose heartbeat is older than this is taken for gone (twelve
missed beats: more than a long JVM pause, less than a scheduler's patience)."""


@dataclass(frozen=True)
class Owner:
    """The process running a lock's run: its machine (`host` and, where known, `boot`, so a
    restarted machine is another), process id, the process's start (`started`, as the
    kernel counts it; None where unknown) and when it took the run (`since`, epoch seconds)."""

    host: str
    pid: int
    started: str | None
    since: float
    boot: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def of(data: dict | None) -> "Owner | None":
        if not data or "pid" not in data:
            return None
        return Owner(str(data.get("host")), int(data["pid"]), data.get("started"), float(data.get("since") or 0),
                     data.get("boot"))

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}"


def this_owner() -> Owner:
    """This process, taking a run now."""
    return Owner(socket.gethostname(), os.getpid(), process_start(os.getpid()), time.time(), _boot())


def _boot() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def process_start(pid: int) -> str | None:
    """When process `pid` started, in the kernel's clock ticks since boot (Linux); None when
    no live process has that id (a zombie is none) or the system does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # state, then starttime (field 22 of stat)


def _process_alive(pid: int, started: str | None) -> bool:
    """Whether the process `pid` that started at `started` still runs on this machine."""
    if os.path.isdir("/proc"):
        return started is not None and process_start(pid) == started
    try:
        os.kill(pid, 0)  # no /proc: the id alone (a stopped process is alive)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def on_this_machine(owner: Owner) -> bool:
    return owner.host == socket.gethostname() and (owner.boot is None or owner.boot == _boot())


def gone(owner: Owner | None, beat_at: float | None, failed: tuple[float, str] | None, now: float,
         timeout_s: float = HEARTBEAT_TIMEOUT_S) -> str | None:
    """What happened to a locking run, in words (None: as far as can be told it is working):
    its `owner` (None: a lock from before owners were recorded), its last heartbeat
    (`beat_at`, epoch seconds), its latest `failed` record (when, reason) and the time `now`.
    See the module docstring for the rule."""
    if failed is not None and (owner is None or failed[0] >= owner.since):
        return f"failed at {_when(failed[0])} ({failed[1][:300]})"
    if owner is None:
        return None
    beat = f"last heartbeat {_when(beat_at)}" if beat_at is not None else "no heartbeat"
    if on_this_machine(owner):
        if _process_alive(owner.pid, owner.started):
            return None
        return f"is no longer running: its process ({owner.describe()}) is gone, {beat}"
    last = beat_at if beat_at is not None else owner.since
    if now - last > timeout_s:
        return (f"is taken for gone: its process ({owner.describe()}) has sent no heartbeat for {now - last:.0f} s "
                f"(more than {timeout_s:.0f} s; {beat})")
    return None


def lapsed(owner: Owner, beat_at: float | None, now: float, timeout_s: float) -> str | None:
    """Why a lease-like claim of `owner` (the loop's lock, `sinks.loop_lock`) has ended, in
    words (None: it stands): its process is gone (seen on its own machine), or it sent no
    heartbeat (`beat_at`; none: since it took the claim) for more than `timeout_s`. Unlike
    `gone`, a silent process on this machine lapses too: a loop stopped or paused that long
    lets another take over, and finds on waking that it lost the claim (it stops)."""
    if on_this_machine(owner) and not _process_alive(owner.pid, owner.started):
        return f"is gone (its process, {owner.describe()}, no longer runs)"
    last = beat_at if beat_at is not None else owner.since
    if now - last > timeout_s:
        return f"sent no heartbeat for {now - last:.0f} s (more than {timeout_s:g} s: stopped, paused or cut off)"
    return None


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def heartbeat_path(spark: "SparkSession", pipeline: str, run_id: str) -> str:
    from dataflow_core.spark.platform.session import warehouse_root

    return f"{warehouse_root(spark).rstrip('/')}/_dataflow_holds/{pipeline}/{run_id}.json"


def beat(spark: "SparkSession", pipeline: str, run_id: str, owner: Owner) -> None:
    """The run's heartbeat, now, naming its owner. Best effort: a missed beat is made up by
    the next, and a holder's liveness never rests on one beat."""
    try:
        write_text(spark, heartbeat_path(spark, pipeline, run_id),
                   json.dumps({"owner": owner.as_dict(), "at": time.time()}))
    except Exception:  # noqa: BLE001 - see above
        pass


def last_beat(spark: "SparkSession", pipeline: str, run_id: str) -> tuple[Owner | None, float | None]:
    """The owner the run's heartbeat names and when it last beat ((None, None): no beat)."""
    try:
        text = read_text(spark, heartbeat_path(spark, pipeline, run_id))
        data = json.loads(text) if text else None
    except ValueError:  # half-written: its run is writing it now
        return None, time.time()
    if not data:
        return None, None
    return Owner.of(data.get("owner")), float(data.get("at") or 0)


def forget_beat(spark: "SparkSession", pipeline: str, run_id: str) -> None:
    """The run's heartbeat deleted (it no longer has the pipeline locked); best effort."""
    try:
        delete_file(spark, heartbeat_path(spark, pipeline, run_id))
    except Exception:  # noqa: BLE001 - a leftover file of a released run is never read
        pass


class Heartbeat:
    """While a run works (`with`): its heartbeat rewritten every HEARTBEAT_S by a thread."""

    def __init__(self, spark: "SparkSession", pipeline: str, run_id: str, owner: Owner, every_s: float = HEARTBEAT_S):
        self.spark, self.pipeline, self.run_id, self.owner, self.every_s = spark, pipeline, run_id, owner, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"hold-{run_id}", daemon=True)

    def __enter__(self) -> "Heartbeat":
        beat(self.spark, self.pipeline, self.run_id, self.owner)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s * 2)

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            beat(self.spark, self.pipeline, self.run_id, self.owner)
            self.after_beat()

    def after_beat(self) -> None:
        """What a subclass checks after each beat (the loop's lock: whether it still holds it)."""
