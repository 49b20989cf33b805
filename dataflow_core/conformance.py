"""Comparing printed panes with a scenario's `expect` list (FORMAT.md, "Comparison").

Panes are compared as multisets; a field an expected pane leaves out is not compared,
except that stating `timing` also pins `on_time_index` (default null), `last` and
`retraction` (default false). Times may be short `HH:MM:SS` or ISO instants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dataflow_core.model.time import parse_instant

_IMPLIED_BY_TIMING = {"on_time_index": None, "last": False, "retraction": False}
_SYMBOLIC = {"global", "end_of_global_window"}


def _time(v: Any) -> Any:
    return v if v in _SYMBOLIC else parse_instant(v)


def _normalise(field: str, value: Any) -> Any:
    if field == "window":
        return value if value == "global" else tuple(_time(x) for x in value)
    if field in ("timestamp", "emitted_at"):
        return _time(value)
    if field == "value":
        if isinstance(value, list):
            return tuple(sorted(value))
        if isinstance(value, float) and value.is_integer():
            return int(value)
    return value


def _view(pane: dict[str, Any], fields: list[str]) -> tuple:
    return tuple(_normalise(f, pane.get(f, _IMPLIED_BY_TIMING.get(f))) for f in fields)


@dataclass
class Comparison:
    missing: list[dict[str, Any]]
    unexpected: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def report(self, name: str) -> str:
        lines = [f"{name}: {len(self.missing)} expected panes missing, {len(self.unexpected)} printed panes unexpected"]
        lines += [f"  missing:    {p}" for p in self.missing]
        lines += [f"  unexpected: {p}" for p in self.unexpected]
        return "\n".join(lines)


def compare_panes(expected: list[dict[str, Any]], printed: list[dict[str, Any]]) -> Comparison:
    remaining = list(printed)
    missing = []
    for exp in expected:
        fields = sorted(set(exp) | (set(_IMPLIED_BY_TIMING) if "timing" in exp else set()))
        want = _view(exp, fields)
        for i, got in enumerate(remaining):
            if _view(got, fields) == want:
                del remaining[i]
                break
        else:
            missing.append(exp)
    return Comparison(missing, remaining)
