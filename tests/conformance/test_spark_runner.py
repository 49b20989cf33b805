"""Every conformance scenario through the Spark runner (`dataflow replay --runner spark`).

The Spark runner groups each scenario's arrivals by key in executors (Arrow batches) and runs
the model there against the scenario's global schedule (`dataflow_core.spark.execute.keyed_stage`).
It must print exactly what the reference runner prints: the same JSON lines in the same order,
the scenario's expected panes, and the same dropped count. One Spark session serves all cases
(the `spark` fixture of tests/conftest.py), so each case costs about half a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataflow_core.conformance import compare_panes
from dataflow_core.scenario import load_scenario, panes_to_jsonl, pane_to_json, replay

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
SHARED_DIR = ROOT.parent / "shared" / "conformance" / "cases"
# The shared cases from ../shared when it is checked out beside the project, else our copy of
# them (test_cases.py checks the two are identical); then our extra cases.
CASES = sorted((SHARED_DIR if SHARED_DIR.is_dir() else HERE / "cases").glob("*.yaml"))
EXTRA = sorted((HERE / "extra").glob("*.yaml"))
ALL = CASES + EXTRA
IDS = [f"{p.parent.name}/{p.stem}" for p in ALL]


def test_spark_cases_are_present():
    assert len(CASES) >= 9 and len(EXTRA) >= 15


@pytest.mark.parametrize("path", ALL, ids=IDS)
def test_case_replays_on_spark_as_on_the_reference_runner(spark, path: Path):
    scenario = load_scenario(path)
    local = replay(scenario, "local")
    on_spark = replay(scenario, "spark")
    # Exactly the reference runner's output, line for line (order included).
    assert panes_to_jsonl(on_spark.panes).splitlines() == panes_to_jsonl(local.panes).splitlines()
    comparison = compare_panes(scenario.expect, [pane_to_json(p) for p in on_spark.panes])
    assert comparison.ok, comparison.report(f"{scenario.name} (spark)")
    assert on_spark.dropped_pairs == local.dropped_pairs, f"dropped: spark {on_spark.dropped_pairs}, local {local.dropped_pairs}"
    if scenario.dropped_pairs is not None:
        assert on_spark.dropped_pairs == scenario.dropped_pairs
    assert on_spark.elements == local.elements


def test_cli_replay_on_spark_prints_what_the_local_runner_prints(tmp_path: Path):
    path = HERE / "cases" / "sessions_retracting.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DATAFLOW_WAREHOUSE": str(tmp_path / "warehouse")}

    def run(runner: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "dataflow_core", "replay", str(path), "--runner", runner],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    local, on_spark = run("local"), run("spark")
    assert on_spark.stdout == local.stdout
    assert on_spark.stdout.strip(), "no panes printed"
    scenario = load_scenario(path)
    assert compare_panes(scenario.expect, [json.loads(x) for x in on_spark.stdout.splitlines()]).ok
    summary = on_spark.stderr.strip().splitlines()[-1]
    assert "runner=spark" in summary
    assert summary.replace("runner=spark", "runner=local") == local.stderr.strip().splitlines()[-1]
