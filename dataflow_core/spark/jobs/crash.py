"""A test switch for crash safety: a run stops dead right after a named commit point.

`DATAFLOW_CRASH_AT=<point>` makes the process exit at once (as if killed); with
`DATAFLOW_CRASH_RAISE=1` as well, the run raises `SimulatedCrash` instead, so that a test in
the same process can interrupt a run between two commits without starting another process;
with `DATAFLOW_CRASH_STOP=1` instead, the process group stops itself there (SIGSTOP, as if
paused by the system: its JVM and workers too), for a test to act on the paused run and
then let it go on (SIGCONT).
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "DATAFLOW_CRASH_AT"
RAISE_ENV = "DATAFLOW_CRASH_RAISE"
STOP_ENV = "DATAFLOW_CRASH_STOP"


class SimulatedCrash(Exception):
    """A run stopped at a crash point (no handler of a run catches it: runs catch only what they expect)."""


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) != name:
        return
    if os.environ.get(RAISE_ENV):
        raise SimulatedCrash(name)
    if os.environ.get(STOP_ENV):
        print(f"[crash switch] stopping at {name}", flush=True)
        os.killpg(os.getpgrp(), signal.SIGSTOP)
        return
    print(f"[crash switch] exiting at {name}", flush=True)
    os._exit(137)
