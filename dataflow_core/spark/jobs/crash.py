"""A test switch for crash safety: a run stops dead right after a named commit point.

`DATAFLOW_CRASH_AT=<point>` makes the process exit at once (as if killed); with
`DATAFLOW_CRASH_RAISE=1` as well, the run raises `SimulatedCrash` instead, so that a test in
the same process can interrupt a run between two commits without starting another process.
"""

from __future__ import annotations

import os

CRASH_ENV = "DATAFLOW_CRASH_AT"
RAISE_ENV = "DATAFLOW_CRASH_RAISE"


class SimulatedCrash(Exception):
    """A run stopped at a crash point (no handler of a run catches it: runs catch only what they expect)."""


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) != name:
        return
    if os.environ.get(RAISE_ENV):
        raise SimulatedCrash(name)
    print(f"[crash switch] exiting at {name}", flush=True)
    os._exit(137)
