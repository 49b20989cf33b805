"""How later panes of a window relate to earlier ones (the paper's section 2.4)."""

from __future__ import annotations

import enum


class AccumulationMode(enum.Enum):
    DISCARDING = "discarding"
    """A pane holds only what arrived since the window's previous pane."""
    ACCUMULATING = "accumulating"
    """A pane holds everything the window has seen."""
    RETRACTING = "retracting"
    """Accumulating, and each new pane is preceded by a retraction of the previous one."""

    @property
    def accumulates(self) -> bool:
        return self is not AccumulationMode.DISCARDING

    @classmethod
    def parse(cls, text: str) -> "AccumulationMode":
        aliases = {
            "accumulating_and_retracting": cls.RETRACTING,
            "accumulating-and-retracting": cls.RETRACTING,
        }
        key = str(text).strip().lower()
        if key in aliases:
            return aliases[key]
        try:
            return cls(key)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown accumulation mode {text!r} (expected one of: {names})") from None
