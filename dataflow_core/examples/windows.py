"""A custom WindowFn: fixed windows phase-shifted per key (the paper's unaligned windows).

Aligned fixed windows make every key's windows close at the same instant, so output
arrives in bursts; shifting each key's phase by a hash of the key spreads the load.
"""

from __future__ import annotations

import zlib
from typing import Hashable, Sequence

from dataflow_core.model.time import Duration, format_duration
from dataflow_core.model.windows import AssignContext, FixedWindows, Window, WindowFn


class PerKeyPhasedFixedWindows(WindowFn):
    def __init__(self, size: Duration):
        self._fixed = FixedWindows(size)
        self.size = size

    def phase(self, key: Hashable) -> Duration:
        """A stable offset in [0, size) for the key (the same in every process)."""
        return zlib.crc32(repr(key).encode()) % self.size

    def assign(self, ctx: AssignContext) -> Sequence[Window]:
        return (self._fixed.window_for(ctx.timestamp, offset=self.phase(ctx.key)),)

    def describe(self) -> str:
        return f"PerKeyPhasedFixedWindows({format_duration(self.size)})"
