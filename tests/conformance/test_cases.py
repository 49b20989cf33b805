"""Every conformance scenario replays to exactly its panes on the reference runner."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataflow_core.conformance import compare_panes
from dataflow_core.scenario import load_scenario
from tests.conformance.replaying import assert_replays_exactly

CASES_DIR = Path(__file__).parent / "cases"
SHARED_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "cases"
CASES = sorted(CASES_DIR.glob("*.yaml"))


def test_cases_are_present():
    assert len(CASES) >= 9


@pytest.mark.skipif(not SHARED_DIR.is_dir(), reason="../shared/conformance is not checked out beside the project")
def test_cases_in_step_with_shared():
    shared = sorted(p.name for p in SHARED_DIR.glob("*.yaml"))
    ours = sorted(p.name for p in CASES)
    assert ours == shared, "copy ../shared/conformance/cases/*.yaml into tests/conformance/cases/"
    mismatch = [n for n in shared if not filecmp.cmp(SHARED_DIR / n, CASES_DIR / n, shallow=False)]
    assert not mismatch, f"cases differ from ../shared: {mismatch}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case_replays_exactly(path: Path):
    assert_replays_exactly(path)


def test_cli_replay_prints_json_lines_and_dropped(tmp_path: Path):
    path = CASES_DIR / "watermark_default_heuristic.yaml"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow_core", "replay", str(path)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    scenario = load_scenario(path)
    assert compare_panes(scenario.expect, printed).ok
    assert "dropped=1" in proc.stderr.strip().splitlines()[-1]
