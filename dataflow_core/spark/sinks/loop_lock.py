"""The lock of a pipeline's long-running writers: a `dataflow microbatch --loop` holds it for
as long as it runs, and `dataflow reset` while it works.

Between two batches a loop holds no batch record, so `dataflow_batches` alone cannot tell that
it runs, yet it keeps the stream's offsets and the pipeline's state in memory: a reset under
it, or a second loop beside it, leaves it writing from a past that is no longer the tables'.
So the lock is one file in the warehouse (`_dataflow_locks/<pipeline>.json`):
- created exclusively, with the store's own conditional create (`files.create_exclusive`: of
  two takers at once exactly one makes it), naming its owner (`holders.Owner`), what it runs
  and a token of this taking;
- renewed by a heartbeat of its own (`holders.beat` under `lock-<token>`), never by
  rewriting the lock file, so a renewal can never overwrite another's lock;
- lapsed when its owner's process is gone (seen on its machine) or its heartbeat is older
  than `lock_timeout_s()` (a stopped or paused process too; `holders.lapsed`), and then
  taken over: a taker first creates `<lock>.<token>.taken` exclusively (of two takers of one
  lapsed lock exactly one does), checks the lock is still that token's, deletes it and
  creates its own exclusively;
- checked by a loop before each batch (`check`, and after each heartbeat): a loop whose lock
  is gone or another's stops with LockLost before it writes again, its offsets unused.
A live holder makes the next taker busy (one line naming it). Deleted when its holder ends.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from dataflow_core.errors import DataflowError, PipelineBusy
from dataflow_core.spark.sinks.files import create_exclusive, delete_file, read_text
from dataflow_core.spark.sinks.lock_holders import Heartbeat, Owner, forget_beat, lapsed, last_beat, this_owner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TIMEOUT_ENV = "DATAFLOW_LOOP_LOCK_TIMEOUT"
"""Seconds a lock's holder may send no heartbeat before another may take the lock over."""
DEFAULT_TIMEOUT_S = 30.0
"""Six missed beats: longer than a long JVM pause, short enough that a crashed loop's
successor does not wait long (a holder whose process is gone, seen on its own machine, is
taken over at once)."""


class LockLost(DataflowError):
    """A loop's lock was taken over or deleted: it stops before its next batch (not
    PipelineBusy, which a loop waits out: another writer now owns the pipeline)."""


def lock_timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        return float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise DataflowError(f"${TIMEOUT_ENV}: {text!r} is no number of seconds; give e.g. 30") from None


def lock_path(spark: "SparkSession", pipeline: str) -> str:
    from dataflow_core.spark.platform.session import warehouse_root

    return f"{warehouse_root(spark).rstrip('/')}/_dataflow_locks/{pipeline}.json"


@dataclass(frozen=True)
class LockHolder:
    """What a lock file says: who took it (`owner`), to run what (`command`), and the token
    of this taking (its heartbeat's name)."""

    token: str
    command: str
    owner: Owner

    def text(self) -> str:
        return json.dumps({"token": self.token, "command": self.command, "owner": self.owner.as_dict()})

    @staticmethod
    def of(text: str | None) -> "LockHolder | None":
        try:
            data = json.loads(text) if text else None
            owner = Owner.of(data.get("owner")) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None
        return LockHolder(str(data["token"]), str(data.get("command")), owner) if owner and "token" in data else None

    def describe(self, spark: "SparkSession", pipeline: str) -> str:
        _, beat_at = last_beat(spark, pipeline, self.beat_id)
        beat = f"last heartbeat {time.time() - beat_at:.0f} s ago" if beat_at else "no heartbeat yet"
        return f"`dataflow {self.command}` ({self.owner.describe()}, {beat})"

    @property
    def beat_id(self) -> str:
        return f"lock-{self.token}"


def lock_holder(spark: "SparkSession", pipeline: str) -> LockHolder | None:
    """Who holds the pipeline's lock now (None: nobody, or a holder whose lock lapsed)."""
    held = LockHolder.of(read_text(spark, lock_path(spark, pipeline)))
    return held if held is not None and _lapsed(spark, pipeline, held) is None else None


def _lapsed(spark: "SparkSession", pipeline: str, held: LockHolder) -> str | None:
    _, beat_at = last_beat(spark, pipeline, held.beat_id)
    return lapsed(held.owner, beat_at, time.time(), lock_timeout_s())


class LoopLock(Heartbeat):
    """The pipeline's lock, taken in `__enter__` (PipelineBusy while a live holder has it; a
    lapsed one is taken over), renewed by a heartbeat thread, let go in `__exit__`. `refused`
    ends the busy line (what did not happen); `on_lost` runs in the heartbeat thread once it
    finds the lock gone (a loop halts its stream there)."""

    def __init__(self, spark: "SparkSession", pipeline: str, command: str, refused: str,
                 say: Callable[[str], None] = lambda _m: None):
        self.me = LockHolder(uuid.uuid4().hex, command, this_owner())
        timeout = lock_timeout_s()
        super().__init__(spark, pipeline, self.me.beat_id, self.me.owner, every_s=max(timeout / 6, 0.1))
        self.path, self.refused, self.say = lock_path(spark, pipeline), refused, say
        self.lost = threading.Event()
        self.on_lost: Callable[[], None] = lambda: None

    def __enter__(self) -> "LoopLock":
        self._take()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if LockHolder.of(read_text(self.spark, self.path)) == self.me:
            delete_file(self.spark, self.path)
        forget_beat(self.spark, self.pipeline, self.me.beat_id)

    def check(self) -> None:
        """LockLost unless this process still holds the lock (see the module docstring)."""
        held = LockHolder.of(read_text(self.spark, self.path))
        if held == self.me:
            return
        self.lost.set()
        how = ("deleted (a `dataflow reset` took it over, or its file was removed)" if held is None
               else f"taken over by {held.describe(self.spark, self.pipeline)}")
        raise LockLost(
            f"pipeline {self.pipeline!r}: this `dataflow {self.me.command}` ({self.me.owner.describe()}) lost its lock, "
            f"{how}, while it sent no heartbeat for more than {lock_timeout_s():g} s; it stopped before its next batch "
            "and wrote nothing more; start it again once the other writer is done")

    def after_beat(self) -> None:
        if self.lost.is_set():
            return
        try:
            self.check()
        except LockLost:
            self.on_lost()
        except Exception:  # noqa: BLE001 - an unreadable moment; the next beat or batch checks again
            pass

    def _take(self) -> None:
        for _ in range(5):
            if create_exclusive(self.spark, self.path, self.me.text()):
                return
            held = LockHolder.of(read_text(self.spark, self.path))
            if held is None:
                continue  # let go meanwhile (or unreadable: an old lease's format): try again
            what = _lapsed(self.spark, self.pipeline, held)
            if what is None:
                raise PipelineBusy(f"pipeline {self.pipeline!r} is locked by {held.describe(self.spark, self.pipeline)};"
                                   f" {self.refused}")
            if self._take_over(held, what):
                return
        raise PipelineBusy(f"pipeline {self.pipeline!r}: its lock keeps changing hands; {self.refused}")

    def _take_over(self, held: LockHolder, what: str) -> bool:
        """The lapsed lock of `held` made this process's; False when another taker won."""
        marker = f"{self.path}.{held.token}.taken"
        if not create_exclusive(self.spark, marker, self.me.text()):
            return False  # another taker of this lapsed lock is at it
        try:
            if LockHolder.of(read_text(self.spark, self.path)) != held:
                return False  # taken over and let go since: start again
            delete_file(self.spark, self.path)
            if not create_exclusive(self.spark, self.path, self.me.text()):
                return False
        finally:
            delete_file(self.spark, marker)
        forget_beat(self.spark, self.pipeline, held.beat_id)
        self.say(f"took over the lock of pipeline {self.pipeline} from `dataflow {held.command}` "
                 f"({held.owner.describe()}), which {what}")
        return True
