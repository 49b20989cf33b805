"""`--wait [DURATION]`: a run that finds its pipeline locked waits its turn instead of exiting
busy. Safe because a busy run stops before it reads or writes anything. Never for ever: at
most DEFAULT_WAIT unless told, and not at all once the holder is gone or failed (its
PipelineStuck is raised at once: that run frees the pipeline only when resumed or abandoned)."""

from __future__ import annotations

import argparse
import time
from typing import Callable, TypeVar

from dataflow_core.errors import PipelineBusy

T = TypeVar("T")
POLL_S = 5.0
DEFAULT_WAIT = "1h"
"""How long `--wait` without a duration waits for a working holder."""


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", nargs="?", const=DEFAULT_WAIT, default=None, metavar="DURATION",
        help=f"while another run has the pipeline locked and is working, wait for it (at most DURATION, e.g. 30m; "
             f"without one, {DEFAULT_WAIT}) instead of exiting busy; a holder that is gone or failed ends the wait "
             "at once (exit 76)",
    )


def wait_seconds(text: str | None) -> float | None:
    """The `--wait` option as seconds (None: do not wait)."""
    from dataflow_core.options import parse_interval

    if text is None:
        return None
    return parse_interval(text, "--wait") / 1000


def until_free(attempt: Callable[[], T], wait_s: float | None, say: Callable[[str], None]) -> T:
    """`attempt()`, tried again every few seconds while it finds the pipeline busy, for up to
    `wait_s` seconds (None: once). A PipelineStuck is no busy pipeline: it ends the wait."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    told = False
    while True:
        try:
            return attempt()
        except PipelineBusy as exc:
            left = 0.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise
            if not told:
                say(f"{exc}; waiting for it (at most {left:.0f} s)")
                told = True
            time.sleep(min(POLL_S, left))
