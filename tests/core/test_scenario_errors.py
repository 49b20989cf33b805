"""`dataflow replay` on broken scenarios: one line on stderr naming file, event and problem.

Runs the real CLI in a subprocess, as a user would (`python -m dataflow_core replay FILE`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name: good
pipeline:
  window: FixedWindows(2m)
  trigger: AfterWatermark(early=AfterCount(1))
  accumulation: accumulating
  allowed_lateness: 0s
  combiner: sum
start: "12:00:00"
events:
  - {at: "12:00:10", add: [{key: a, value: 5, time: "12:00:05"}]}
  - {at: "12:00:20", add: [{key: a, value: 7, time: "12:01:00"}, {key: b, value: 1, time: "12:00:30"}]}
  - {at: "12:03:00", watermark: "12:02:00"}
  - {at: "12:03:10", add: [{key: a, value: 9, time: "12:00:40"}]}
"""


def replay(tmp_path: Path, text: str, name: str = "scenario.yaml") -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "dataflow_core", "replay", str(path)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )


def error_line(proc: subprocess.CompletedProcess, path: Path) -> str:
    """The single stderr line of a failed run, after checking it has the basic shape."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0]
    assert proc.stdout == ""
    return lines[0]


def with_events(*events: str, pipeline: str = "{window: FixedWindows(1m)}") -> str:
    body = "\n".join(f"  - {e}" for e in events)
    return f'name: bad\npipeline: {pipeline}\nstart: "12:00:00"\nevents:\n{body}\n'


def test_good_scenario_prints_panes_and_a_summary(tmp_path: Path):
    proc = replay(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stderr
    panes = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted((p["key"], p["value"], p["timing"], p["emitted_at"][11:19]) for p in panes) == [
        ("a", 5, "EARLY", "12:00:10"),
        ("a", 12, "EARLY", "12:00:20"),
        ("a", 12, "ON_TIME", "12:03:00"),
        ("b", 1, "EARLY", "12:00:20"),
        ("b", 1, "ON_TIME", "12:03:00"),
    ]
    summary = proc.stderr.strip().splitlines()[-1]
    assert "dropped=1" in summary and "elements=4" in summary


# (scenario text, words the one error line must contain)
CASES: dict[str, tuple[str, list[str]]] = {
    "malformed_yaml": (
        'name: bad\npipeline: {window: FixedWindows(1m)\nevents:\n  - {at: "12:00:00"}\n',
        ["malformed YAML", "line"],
    ),
    "not_a_mapping": ("- just\n- a list\n", ["must be a YAML mapping"]),
    "unknown_window": (
        'pipeline: {window: "Hourly(1h)"}\nevents: []\n',
        ["pipeline.window", "unknown window 'Hourly'"],
    ),
    "unknown_trigger": (
        'pipeline: {window: FixedWindows(1m), trigger: "AfterBanana(2)"}\nevents: []\n',
        ["pipeline.trigger", "unknown trigger 'AfterBanana'"],
    ),
    "bad_trigger_argument": (
        'pipeline: {window: FixedWindows(1m), trigger: "AfterCount(2m)"}\nevents: []\n',
        ["pipeline.trigger", "AfterCount", "whole number"],
    ),
    "unknown_combiner": (
        "pipeline: {window: FixedWindows(1m), combiner: median}\nevents: []\n",
        ["pipeline.combiner", "median"],
    ),
    "unknown_accumulation": (
        "pipeline: {window: FixedWindows(1m), accumulation: hoarding}\nevents: []\n",
        ["pipeline.accumulation", "hoarding"],
    ),
    "bad_lateness": (
        "pipeline: {window: FixedWindows(1m), allowed_lateness: soon}\nevents: []\n",
        ["pipeline.allowed_lateness", "soon"],
    ),
    "unknown_pipeline_field": (
        "pipeline: {window: FixedWindows(1m), trigers: Default()}\nevents: []\n",
        ["pipeline", "trigers"],
    ),
    "missing_pipeline": ('start: "12:00:00"\nevents: []\n', ["pipeline", "missing"]),
    "missing_window": ("pipeline: {trigger: Default()}\nevents: []\n", ["pipeline.window", "missing"]),
    "missing_events": ("pipeline: {window: FixedWindows(1m)}\n", ["events", "missing"]),
    "bad_start": ('pipeline: {window: FixedWindows(1m)}\nstart: "noon"\nevents: []\n', ["start", "'noon'"]),
    "at_goes_backwards": (
        with_events('{at: "12:00:10"}', '{at: "12:00:20"}', '{at: "12:00:15"}'),
        ["event 3", "backwards", "12:00:15", "12:00:20"],
    ),
    "at_before_start": (with_events('{at: "11:59:59"}'), ["event 1", "backwards"]),
    "unparseable_at": (with_events('{at: "12:00:10"}', '{at: "noon"}'), ["event 2", "'noon'"]),
    "unparseable_watermark": (
        with_events('{at: "12:00:10"}', '{at: "12:00:20", watermark: "later"}'),
        ["event 2", "watermark", "'later'"],
    ),
    "unparseable_element_time": (
        with_events('{at: "12:00:10", add: [{key: a, value: 1, time: "12:00:01"}, {key: a, value: 2, time: "25:00:00"}]}'),
        ["event 1", "element 2", "time", "'25:00:00'"],
    ),
    "missing_at": (with_events('{at: "12:00:10"}', "{watermark: \"12:00:00\"}"), ["event 2", "missing `at`"]),
    "unknown_event_field": (with_events('{at: "12:00:10", wm: "12:00:00"}'), ["event 1", "unknown field", "wm"]),
    "event_not_a_mapping": (with_events('{at: "12:00:10"}', '"12:00:20"'), ["event 2", "must be a mapping"]),
    "add_not_a_list": (with_events('{at: "12:00:10", add: {key: a, value: 1, time: "12:00:00"}}'), ["event 1", "add", "list"]),
    "element_without_key": (
        with_events('{at: "12:00:10"}', '{at: "12:00:20", add: [{key: a, value: 1, time: "12:00:01"}, {value: 2, time: "12:00:02"}]}'),
        ["event 2", "element 2", "key"],
    ),
    "element_without_time": (with_events('{at: "12:00:10", add: [{key: a, value: 1}]}'), ["event 1", "element 1", "time"]),
    "element_unknown_field": (
        with_events('{at: "12:00:10", add: [{key: a, value: 1, time: "12:00:00", colour: red}]}'),
        ["event 1", "element 1", "colour"],
    ),
    "values_the_combiner_cannot_take": (
        with_events('{at: "12:00:10"}', '{at: "12:00:20", add: [{key: a, value: 1, time: "12:00:00"}, {key: a, value: x, time: "12:00:01"}]}'),
        ["event 2", "combiner 'sum'"],
    ),
    "negative_dropped": ('pipeline: {window: FixedWindows(1m)}\nevents: []\ndropped: -1\n', ["dropped", "-1"]),
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every bad case replayed once, a few at a time: each CLI start costs about a second."""

    def one(case: str) -> tuple[Path, subprocess.CompletedProcess]:
        folder = tmp_path_factory.mktemp(case)
        return folder / "scenario.yaml", replay(folder, CASES[case][0])

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(sorted(CASES), pool.map(one, sorted(CASES))))


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_scenario_exits_non_zero_with_one_line_naming_file_event_and_problem(bad_runs, case: str):
    path, proc = bad_runs[case]
    line = error_line(proc, path)
    for word in CASES[case][1]:
        assert word in line, f"{word!r} not in {line!r}"


def test_missing_file_is_one_line(tmp_path: Path):
    path = tmp_path / "nowhere.yaml"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "dataflow_core", "replay", str(path)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert "no such file" in error_line(proc, path)


def test_infinite_time_names_the_event(tmp_path: Path):
    line = error_line(replay(tmp_path, with_events('{at: "12:00:10"}', "{at: .inf}")), tmp_path / "scenario.yaml")
    assert "event 2" in line
