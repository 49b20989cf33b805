"""Small helpers shared by property tests."""

from __future__ import annotations


def pickle_free(text: str) -> bool:
    """Stored state is JSON text, never a pickle (which would run code when read)."""
    return not text.startswith(("\x80", "b'")) and text.lstrip()[:1] in ("{", "n")
