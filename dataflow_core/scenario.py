"""Conformance scenarios (../shared/conformance/FORMAT.md): load, validate, replay, print.

A scenario scripts one stage's history of arrivals, watermark moves and clock moves; a
runner replays it and must emit exactly the listed panes. Every problem with a file is a
`ScenarioError` naming the file, the event and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from dataflow_core.errors import DataflowError
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import combiner_named
from dataflow_core.model.dsl import parse_trigger, parse_window_fn
from dataflow_core.model.panes import Pane
from dataflow_core.model.strategy import TimestampCombiner, WindowingStrategy
from dataflow_core.model.time import END_OF_TIME, Instant, format_instant, parse_duration, parse_instant
from dataflow_core.model.windows import GlobalWindow


class ScenarioError(DataflowError):
    """A scenario file that breaks FORMAT.md."""


@dataclass(frozen=True)
class Event:
    number: int  # 1-based position in `events`, for messages
    at: Instant
    add: tuple[tuple[Any, Any, Instant], ...] = ()  # (key, value, event time)
    watermark: Instant | None = None


@dataclass
class Scenario:
    name: str
    path: str
    strategy: WindowingStrategy
    start: Instant
    events: list[Event]
    expect: list[dict[str, Any]] = field(default_factory=list)
    dropped_pairs: int | None = None  # the scenario's `dropped`: element-window pairs


@dataclass
class ReplayResult:
    panes: list[Pane]
    dropped_pairs: int  # element-window pairs dropped (printed as `dropped=N`)
    elements: int


_PIPELINE_KEYS = {"window", "trigger", "accumulation", "allowed_lateness", "combiner", "timestamp_combiner"}
_EVENT_KEYS = {"at", "add", "watermark"}


def load_scenario(path: str | Path) -> Scenario:
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{path}: malformed YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    return parse_scenario(doc, path)


def parse_scenario(doc: Any, path: str = "<scenario>") -> Scenario:
    def fail(where: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{path}: {where}: {problem}")

    if not isinstance(doc, dict):
        raise ScenarioError(f"{path}: a scenario must be a YAML mapping with pipeline, start and events")
    pipeline = doc.get("pipeline")
    if not isinstance(pipeline, dict):
        raise fail("pipeline", "missing or not a mapping")
    unknown = set(pipeline) - _PIPELINE_KEYS
    if unknown:
        raise fail("pipeline", f"unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_PIPELINE_KEYS))})")
    strategy = _strategy(pipeline, fail)
    try:
        start = parse_instant(doc.get("start", "00:00:00"))
    except ValueError as exc:
        raise fail("start", str(exc)) from None
    events_doc = doc.get("events")
    if not isinstance(events_doc, list):
        raise fail("events", "missing or not a list")
    events: list[Event] = []
    clock = start
    for n, raw in enumerate(events_doc, 1):
        event = _event(n, raw, fail)
        if event.at < clock:
            raise fail(
                f"event {n}",
                f"time goes backwards: at {format_instant(event.at)} is before {format_instant(clock)}",
            )
        clock = event.at
        events.append(event)
    expect = doc.get("expect") or []
    if not isinstance(expect, list) or not all(isinstance(p, dict) for p in expect):
        raise fail("expect", "must be a list of panes (mappings)")
    dropped = doc.get("dropped")
    if dropped is not None and (not isinstance(dropped, int) or dropped < 0):
        raise fail("dropped", f"must be a non-negative whole number, got {dropped!r}")
    return Scenario(str(doc.get("name") or Path(path).stem), path, strategy, start, events, expect, dropped)


def _strategy(pipeline: dict, fail: Callable[[str, str], ScenarioError]) -> WindowingStrategy:
    def field_(name: str, parse: Callable[[Any], Any], default: Any) -> Any:
        if name not in pipeline:
            return default
        try:
            return parse(pipeline[name])
        except ValueError as exc:
            raise fail(f"pipeline.{name}", str(exc)) from None

    if "window" not in pipeline:
        raise fail("pipeline.window", "missing (e.g. FixedWindows(2m))")
    window_fn = field_("window", parse_window_fn, None)
    trigger = field_("trigger", parse_trigger, None)
    kwargs: dict[str, Any] = {"window_fn": window_fn}
    if trigger is not None:
        kwargs["trigger"] = trigger
    kwargs["accumulation"] = field_("accumulation", AccumulationMode.parse, AccumulationMode.DISCARDING)
    kwargs["allowed_lateness"] = field_("allowed_lateness", _scenario_duration, 0)
    kwargs["combiner"] = field_("combiner", combiner_named, combiner_named("sum"))
    kwargs["timestamp_combiner"] = field_("timestamp_combiner", TimestampCombiner.parse, TimestampCombiner.END_OF_WINDOW)
    try:
        return WindowingStrategy(**kwargs)
    except ValueError as exc:
        raise fail("pipeline", str(exc)) from None


def _scenario_duration(value: Any) -> int:
    """A scenario's duration as FORMAT.md writes it: an integer and a unit (`30s`). A bare
    number other than 0 is refused rather than read: FORMAT.md's bare numbers are seconds
    (for times), the model's are milliseconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
        raise ValueError(f"{value!r} has no unit (FORMAT.md: an integer and a unit, e.g. {value}s or {value}ms)")
    return parse_duration(value)


def _event(n: int, raw: Any, fail: Callable[[str, str], ScenarioError]) -> Event:
    where = f"event {n}"
    if not isinstance(raw, dict):
        raise fail(where, f"must be a mapping with `at`, got {raw!r}")
    unknown = set(raw) - _EVENT_KEYS
    if unknown:
        raise fail(where, f"unknown field(s) {', '.join(sorted(unknown))} (known: at, add, watermark)")
    if "at" not in raw:
        raise fail(where, "missing `at`")
    try:
        at = parse_instant(raw["at"])
    except ValueError as exc:
        raise fail(f"{where}.at", str(exc)) from None
    watermark = None
    if "watermark" in raw:
        wm = raw["watermark"]
        if wm == "end":
            watermark = END_OF_TIME
        else:
            try:
                watermark = parse_instant(wm)
            except ValueError as exc:
                raise fail(f"{where}.watermark", f"{exc} (or `end`)") from None
    adds = []
    if "add" in raw:
        if not isinstance(raw["add"], list):
            raise fail(f"{where}.add", "must be a list of elements {key, value, time}")
        for i, el in enumerate(raw["add"], 1):
            el_where = f"{where}, element {i}"
            if not isinstance(el, dict) or "key" not in el or "time" not in el:
                raise fail(el_where, f"must be a mapping with key, value and time, got {el!r}")
            extra = set(el) - {"key", "value", "time"}
            if extra:
                raise fail(el_where, f"unknown field(s) {', '.join(sorted(extra))}")
            try:
                ts = parse_instant(el["time"])
            except ValueError as exc:
                raise fail(f"{el_where}.time", str(exc)) from None
            key = el["key"]
            if isinstance(key, (list, dict)):
                raise fail(f"{el_where}.key", f"must be a scalar, got {key!r}")
            adds.append((key, el.get("value"), ts))
    return Event(n, at, tuple(adds), watermark)


# --- replay --------------------------------------------------------------------------


def replay_local(scenario: Scenario) -> ReplayResult:
    """Replays a scenario on the reference runner (FORMAT.md, "Processing rules")."""
    from dataflow_core.runners.reference import ReferenceRunner

    runner = ReferenceRunner(scenario.strategy, scenario.start)
    panes: list[Pane] = []
    for event in scenario.events:
        panes += runner.advance_processing_time(event.at)
        if event.add:
            try:
                panes += runner.add(event.add)
            except (TypeError, ValueError) as exc:
                raise ScenarioError(
                    f"{scenario.path}: event {event.number}: combiner "
                    f"{scenario.strategy.combiner.name!r} cannot take these values: {exc}"
                ) from None
        if event.watermark is not None:
            panes += runner.advance_watermark(event.watermark)
    return ReplayResult(panes, runner.dropped_pairs, runner.elements_in)


RUNNERS: dict[str, str] = {
    "local": "dataflow_core.scenario:replay_local",
    "spark": "dataflow_core.spark.jobs.scenario:replay_spark",
}
"""Runner name -> "module:function" taking a Scenario and returning a ReplayResult."""


def replay(scenario: Scenario, runner: str = "local") -> ReplayResult:
    import importlib

    if runner not in RUNNERS:
        raise DataflowError(f"unknown runner {runner!r} (available: {', '.join(sorted(RUNNERS))})")
    module, func = RUNNERS[runner].split(":")
    return getattr(importlib.import_module(module), func)(scenario)


# --- output --------------------------------------------------------------------------


def _time(t: Instant) -> str:
    return "end_of_global_window" if t >= END_OF_TIME - 1 else format_instant(t)


def pane_to_json(pane: Pane) -> dict[str, Any]:
    window: Any = (
        "global" if isinstance(pane.window, GlobalWindow) else [format_instant(pane.window.start), format_instant(pane.window.end)]
    )
    return {
        "key": pane.key,
        "window": window,
        "value": pane.value,
        "timestamp": _time(pane.timestamp),
        "timing": pane.timing.value,
        "index": pane.index,
        "on_time_index": pane.on_time_index,
        "first": pane.first,
        "last": pane.last,
        "retraction": pane.retraction,
        "emitted_at": format_instant(pane.emitted_at),
    }


def panes_to_jsonl(panes: list[Pane]) -> str:
    return "".join(json.dumps(pane_to_json(p), default=str) + "\n" for p in panes)
