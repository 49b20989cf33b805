"""One check for every scenario file, whichever folder it comes from and runner replays it."""

from __future__ import annotations

from pathlib import Path

from dataflow_core.conformance import compare_panes
from dataflow_core.scenario import load_scenario, pane_to_json, replay


def assert_replays_exactly(path: Path, runner: str = "local") -> None:
    scenario = load_scenario(path)
    result = replay(scenario, runner)
    comparison = compare_panes(scenario.expect, [pane_to_json(p) for p in result.panes])
    assert comparison.ok, comparison.report(scenario.name)
    if scenario.dropped_pairs is not None:
        assert result.dropped_pairs == scenario.dropped_pairs, f"{scenario.name}: dropped={result.dropped_pairs}, want {scenario.dropped_pairs}"
