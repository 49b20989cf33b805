"""`--wait [DURATION]`: a run that finds its pipeline held waits its turn instead of exiting
busy. Safe because a busy run stops before it reads or writes anything."""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable, TypeVar

from dataflow_core.errors import PipelineBusy

T = TypeVar("T")
POLL_S = 5.0


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", nargs="?", const="forever", default=None, metavar="DURATION",
        help="while another run holds the pipeline, wait for it (at most DURATION, e.g. 30m; without one, as long "
             "as it takes) instead of exiting busy",
    )


def wait_seconds(text: str | None) -> float | None:
    """The `--wait` option as seconds (None: do not wait; inf: no limit)."""
    from dataflow_core.options import parse_interval

    if text is None:
        return None
    if text == "forever":
        return math.inf
    return parse_interval(text, "--wait") / 1000


def until_free(attempt: Callable[[], T], wait_s: float | None, say: Callable[[str], None]) -> T:
    """`attempt()`, tried again every few seconds while it finds the pipeline busy, for up to
    `wait_s` seconds (None: once)."""
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
                limit = "" if math.isinf(left) else f" (at most {left:.0f} s)"
                say(f"{exc}; waiting for it{limit}")
                told = True
            time.sleep(min(POLL_S, left))
