"""`dataflow diagram` and the paper's figures (issue 9). Pure: no Spark, no JVM.

- every figure scenario in docs/figures/scenarios/ replays to the panes it lists (the paper's);
- a diagram holds exactly one mark per element, per pane and per retraction (SVG ids);
- the same history gives the same bytes, and the committed docs/figures/*.svg are current;
- a diagram from a run's tables (as pandas frames) equals the diagram of the same scenario;
- bad arguments get one line on stderr.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from dataflow_core.cli import main as cli
from dataflow_core.conformance import compare_panes
from dataflow_core.diagram import History, history_from_scenario, render
from dataflow_core.diagram.figures import FIGURES, SCENARIOS, figure_svg
from dataflow_core.diagram.history import monotone_steps
from dataflow_core.diagram.tables import history_from_frames, parse_key, to_ms
from dataflow_core.errors import DataflowError
from dataflow_core.model.time import END_OF_TIME, format_instant, parse_instant
from dataflow_core.model.windows import GlobalWindow
from dataflow_core.scenario import load_scenario, pane_to_json, parse_scenario, replay_local

FIGURE_SCENARIOS = sorted(SCENARIOS.glob("*.yaml"))
SVG = "{http://www.w3.org/2000/svg}"


def ids(svg: bytes) -> list[str]:
    return [el.get("id") for el in ET.fromstring(svg).iter() if el.get("id")]


def count(svg: bytes, prefix: str) -> int:
    pattern = re.compile(rf"^{prefix}-\d+$")
    return sum(bool(pattern.match(i)) for i in ids(svg))


def test_there_are_the_papers_figures() -> None:
    names = [p.stem for p in FIGURE_SCENARIOS]
    assert len(names) == 9, names
    assert names[0] == "fig06_classic_batch" and names[-1] == "fig14_sessions_retracting"


@pytest.mark.parametrize("path", FIGURE_SCENARIOS, ids=lambda p: p.stem)
def test_figure_replays_to_the_panes_it_lists(path: Path) -> None:
    scenario = load_scenario(path)
    values = [v for e in scenario.events for _, v, _ in e.add]
    assert len(values) == 10 and sum(values) == 51  # the paper's ten scores, total 51
    result = replay_local(scenario)
    comparison = compare_panes(scenario.expect, [pane_to_json(p) for p in result.panes])
    assert comparison.ok, comparison.report(scenario.name)
    assert result.dropped_pairs == scenario.dropped_pairs


def _final_values(path: Path) -> dict:
    """Each window's last standing value (what a sink of the stage ends with)."""
    standing: dict = {}
    for p in replay_local(load_scenario(path)).panes:
        w = "global" if isinstance(p.window, GlobalWindow) else (p.window.start, p.window.end)
        if p.retraction:
            standing.pop(w, None)
        else:
            standing[w] = p.value
    return standing


def test_the_papers_numbers() -> None:
    def at(path: str) -> Path:
        return SCENARIOS / f"{path}.yaml"

    assert _final_values(at("fig06_classic_batch")) == {"global": 51}
    assert sorted(_final_values(at("fig10_fixed_batch")).values()) == [4, 12, 14, 21]
    accumulating = [p.value for p in replay_local(load_scenario(at("fig07_global_period_accumulating"))).panes]
    assert accumulating[-3:] == [22, 33, 51]  # the paper's figure: 11, 22, 33, 51
    discarding = [p.value for p in replay_local(load_scenario(at("fig08_global_period_discarding"))).panes]
    assert sum(discarding) == 51
    sessions = _final_values(at("fig14_sessions_retracting"))
    assert sorted(sessions.values()) == [12, 39]  # the late 9 bridges 5 and 25 into 39
    retracted = [p.value for p in replay_local(load_scenario(at("fig14_sessions_retracting"))).panes
                 if p.retraction and format_instant(p.emitted_at).endswith("12:08:19.000Z")]
    assert sorted(retracted) == [5, 25]


@pytest.mark.parametrize("path", FIGURE_SCENARIOS, ids=lambda p: p.stem)
def test_one_mark_per_element_pane_and_retraction(path: Path) -> None:
    scenario = load_scenario(path)
    history = history_from_scenario(scenario)
    svg = render(history, "svg")
    panes = replay_local(scenario).panes
    assert count(svg, "element") == sum(len(e.add) for e in scenario.events) == 10
    assert count(svg, "pane") == sum(not p.retraction for p in panes)
    assert count(svg, "retraction") == sum(p.retraction for p in panes)
    assert count(svg, "watermark") == 1
    text = svg.decode()
    for p in panes:  # every value is written on the diagram (text stays text in the SVG)
        label = ("\u2212" if p.retraction else "") + str(p.value)
        assert f">{label}<" in text


@pytest.mark.parametrize("path", FIGURE_SCENARIOS, ids=lambda p: p.stem)
def test_committed_figure_is_current(path: Path) -> None:
    committed = FIGURES / f"{path.stem}.svg"
    assert committed.exists(), f"{committed} missing: run make docs"
    assert committed.read_bytes() == figure_svg(path), f"{committed} is stale: run make docs"


def test_same_history_same_bytes() -> None:
    path = SCENARIOS / "fig14_sessions_retracting.yaml"
    a, b = history_from_scenario(load_scenario(path)), history_from_scenario(load_scenario(path))
    assert render(a, "svg") == render(b, "svg")
    png = render(a, "png")
    assert png == render(b, "png") and png.startswith(b"\x89PNG")
    assert b"Software" not in png
    assert b"<dc:date>" not in render(a, "svg")


TWO_KEYS = """
name: two_keys
pipeline: {window: FixedWindows(1m), trigger: "AfterWatermark(early=AfterCount(1))", accumulation: retracting,
           allowed_lateness: 10m, combiner: sum}
start: "12:00:00"
events:
  - {at: "12:00:10", add: [{key: a, value: 5, time: "12:00:05"}, {key: b, value: 1, time: "12:00:30"}]}
  - {at: "12:00:20", add: [{key: a, value: 7, time: "12:00:40"}]}
  - {at: "12:01:30", watermark: "12:01:00"}
  - {at: "12:02:00", add: [{key: b, value: 2, time: "12:00:50"}]}
  - {at: "12:20:00", watermark: end}
"""


def test_one_panel_per_key_and_choosing_keys() -> None:
    scenario = parse_scenario(__import__("yaml").safe_load(TWO_KEYS), "two_keys.yaml")
    history = history_from_scenario(scenario)
    svg = render(history)
    assert count(svg, "watermark") == 2 and count(svg, "element") == 4
    only_b = history.for_keys(["b"])
    svg_b = render(only_b)
    assert count(svg_b, "watermark") == 1 and count(svg_b, "element") == 2
    assert count(svg_b, "retraction") == sum(p.retraction for p in only_b.panes) == 1
    with pytest.raises(DataflowError, match="unknown key 'c'"):
        history.for_keys(["c"])


def test_a_key_with_math_text_or_markup_is_drawn_as_text() -> None:
    """Issue 64, finding 9: a key `ad-$\\frac$` made matplotlib parse math text and fail (a 500
    in the explorer); the diagram's text is text, and markup in it stays escaped in the SVG."""
    hostile = "ad-$\\frac$<script>x</script>&"
    yaml_text = TWO_KEYS.replace("key: a,", "key: 'HOSTILE',").replace("HOSTILE", hostile.replace("'", "''"))
    history = history_from_scenario(parse_scenario(__import__("yaml").safe_load(yaml_text), "hostile.yaml"))
    history.title, history.subtitle = f"pipeline: {hostile}", f"key {hostile}"
    svg = render(history).decode()
    root = ET.fromstring(svg)  # well-formed: nothing the key holds became markup
    texts = " ".join(t for t in root.itertext())
    assert "ad-$\\frac$<script>x</script>&" in texts and "<script>" not in svg


def test_watermark_steps_never_move_back() -> None:
    steps = monotone_steps([(10, 5), (20, 3), (20, 7), (30, 7), (40, END_OF_TIME)])
    assert [(s.processing_time, s.watermark) for s in steps] == [(10, 5), (20, 7), (40, END_OF_TIME)]
    h = History(watermarks=steps)
    assert h.watermark_at(9) is None and h.watermark_at(25) == 7 and h.watermark_at(40) == END_OF_TIME


# --- from the tables of a run ------------------------------------------------------------


def _ts(ms: int) -> pd.Timestamp:
    return pd.Timestamp(ms, unit="ms")  # naive, as Spark's toPandas gives them


def _frames(scenario, panes):
    """The tables a real run of `scenario` would write, as pandas frames (key column `team`)."""
    elements = pd.DataFrame(
        [{"team": k, "event_time": _ts(t), "ingest_time": _ts(e.at), "score": v}
         for e in scenario.events for k, v, t in e.add]
    )
    log = pd.DataFrame(
        [{
            "team": p.key,
            "window_start": None if isinstance(p.window, GlobalWindow) else _ts(p.window.start),
            "window_end": None if isinstance(p.window, GlobalWindow) else _ts(p.window.end),
            "value": p.value, "timestamp": _ts(p.timestamp), "timing": p.timing.value,
            "pane_index": p.index, "on_time_index": p.on_time_index, "is_first": p.first,
            "is_last": p.last, "is_retraction": p.retraction, "emitted_at": _ts(p.emitted_at),
            "run_id": "r1", "pane_id": f"p{i}",
        } for i, p in enumerate(panes)]
    )
    marks = [(scenario.start, scenario.start)] + [(e.at, e.watermark) for e in scenario.events if e.watermark is not None]
    watermarks = pd.DataFrame(
        [{"pipeline": "demo", "stage": "0", "run_id": "r1", "step": n, "processing_time": _ts(t),
          "watermark": _ts(min(w, parse_instant("2100-01-01T00:00:00Z")))} for n, (t, w) in enumerate(marks)]
    )
    return elements, log, watermarks


@pytest.mark.parametrize("name", ["fig13_fixed_streaming_partial", "fig14_sessions_retracting"])
def test_diagram_from_tables_equals_diagram_of_scenario(name: str) -> None:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    expected = history_from_scenario(scenario)
    elements, log, watermarks = _frames(scenario, expected.panes)
    # The end-of-time watermark cannot be a pandas timestamp; a run records a far-future one.
    expected.watermarks[-1] = type(expected.watermarks[-1])(
        expected.watermarks[-1].processing_time, parse_instant("2100-01-01T00:00:00Z")
    )
    got = history_from_frames(
        elements=elements, panes=log, watermarks=watermarks, key={"team": "TeamX"},
        event_from=parse_instant("11:00:00"), event_to=parse_instant("13:00:00"),
        element_value="score", title=expected.title, subtitle=expected.subtitle,
    )
    assert got.panes == expected.panes
    assert got.elements == expected.elements
    assert got.watermarks == expected.watermarks
    lo, hi = parse_instant("11:59:30"), parse_instant("12:09:30")
    assert render(got, "svg", event_range=(lo, hi)) == render(expected, "svg", event_range=(lo, hi))


def test_tables_narrow_to_key_range_and_run() -> None:
    scenario = parse_scenario(__import__("yaml").safe_load(TWO_KEYS), "two_keys.yaml")
    panes = replay_local(scenario).panes
    elements, log, watermarks = _frames(scenario, panes)
    args = dict(elements=elements, panes=log, watermarks=watermarks)
    h = history_from_frames(**args, key={"team": "a"}, event_from=parse_instant("12:00:00"),
                            event_to=parse_instant("12:00:30"))
    assert [e.value for e in h.elements] == [None]  # no value column named: dots without values
    assert {p.key for p in h.panes} == {"a"}
    assert all(p.window.start < parse_instant("12:00:30") for p in h.panes)
    none = history_from_frames(**args, key={"team": "b"}, event_from=parse_instant("12:00:00"),
                               event_to=parse_instant("12:01:00"), run_id="r1")
    assert len(none.panes) == sum(p.key == "b" for p in panes)
    with pytest.raises(DataflowError, match="unknown key 'zz'"):
        history_from_frames(**args, key={"team": "zz"}, event_from=0, event_to=parse_instant("13:00:00"))
    with pytest.raises(DataflowError, match="empty event-time range"):
        history_from_frames(**args, key={"team": "a"}, event_from=5, event_to=5)
    with pytest.raises(DataflowError, match="has no column"):
        history_from_frames(**args, key={"ad_id": "a"}, event_from=0, event_to=parse_instant("13:00:00"))


def test_parse_key_and_timestamps() -> None:
    assert parse_key("ad_7", ["ad_id"]) == {"ad_id": "ad_7"}
    assert parse_key("ad_id=ad_7", ["ad_id"]) == {"ad_id": "ad_7"}
    assert parse_key("u1,a3", ["user_id", "ad_id"]) == {"user_id": "u1", "ad_id": "a3"}
    assert parse_key("ad_id=a3,user_id=u1", ["user_id", "ad_id"]) == {"user_id": "u1", "ad_id": "a3"}
    with pytest.raises(DataflowError, match="2 columns"):
        parse_key("u1", ["user_id", "ad_id"])
    t = parse_instant("12:00:26")
    assert to_ms(_ts(t)) == t == to_ms(pd.Timestamp(t, unit="ms", tz="UTC")) == to_ms(t)
    assert to_ms(None) is None and to_ms(pd.NaT) is None and to_ms(float("nan")) is None


# --- the command line -------------------------------------------------------------------------


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    rc = cli(["diagram", *argv])
    return rc, capsys.readouterr().err


def one_error_line(rc: int, err: str) -> str:
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dataflow diagram: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_cli_writes_svg_and_png(tmp_path: Path, capsys) -> None:
    scenario = str(SCENARIOS / "fig12_fixed_streaming.yaml")
    rc, err = run_cli(capsys, scenario, "-o", str(tmp_path / "f.svg"))
    assert rc == 0, err
    assert count((tmp_path / "f.svg").read_bytes(), "pane") == 5
    rc, err = run_cli(capsys, scenario, "--key", "TeamX", "-o", str(tmp_path / "f.PNG"))
    assert rc == 0, err
    assert (tmp_path / "f.PNG").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{s}", "-o", "{tmp}/out.pdf"], "unknown output format .pdf"),
        (["{s}", "-o", "{tmp}/out"], "unknown output format (no suffix)"),
        (["{s}"], "missing -o"),
        (["{tmp}/missing.yaml", "-o", "{tmp}/out.svg"], "missing.yaml: no such file"),
        (["{s}", "--key", "TeamY", "-o", "{tmp}/out.svg"], "unknown key 'TeamY'"),
        (["-o", "{tmp}/out.svg"], "give a scenario file"),
        (["{s}", "--pipeline", "p", "-o", "{tmp}/out.svg"], "either a scenario file or --pipeline"),
        (["{s}", "--from", "12:00:00", "-o", "{tmp}/out.svg"], "--from goes with --pipeline"),
        (["--pipeline", "p", "--from", "12:00:00", "--to", "13:00:00", "-o", "{tmp}/o.svg"], "exactly one --key"),
        (["--pipeline", "p", "--key", "k", "-o", "{tmp}/o.svg"], "--from T --to T"),
        (["--pipeline", "p", "--key", "k", "--from", "12:00:00", "--to", "12:00:00", "-o", "{tmp}/o.svg"],
         "empty event-time range"),
        (["--pipeline", "p", "--key", "k", "--from", "noon", "--to", "12:00:00", "-o", "{tmp}/o.svg"], "not a time"),
        (["{s}", "-o", "{tmp}/no/such/dir/out.svg"], "cannot write the diagram"),
    ],
)
def test_cli_bad_arguments_one_line(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    s = str(SCENARIOS / "fig06_classic_batch.yaml")
    argv = [a.format(s=s, tmp=tmp_path) for a in argv]
    line = one_error_line(*run_cli(capsys, *argv))
    assert message in line


def test_cli_pipeline_without_registry_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "dataflow_core.pipelines", None)  # as before the registry existed
    monkeypatch.delitem(sys.modules, "dataflow_core.pipelines.registry", raising=False)
    argv = ["--pipeline", "ad_sessions", "--key", "ad_1", "--from", "12:00:00", "--to", "13:00:00",
            "-o", str(tmp_path / "o.svg")]
    assert "pipeline registry" in one_error_line(*run_cli(capsys, *argv))


def test_thousands_of_elements_are_drawn_as_a_density_under_the_watermark_with_every_count_exact() -> None:
    """A busy key (issue 66): past `DENSITY_LIMIT` elements a panel shows their density, not a
    dot each; the cells' tooltips add up to exactly the elements, late ones and rows not
    aggregated included, and the watermark and the panes are drawn over the cells."""
    import random

    from dataflow_core.diagram.history import ElementRecord, WatermarkStep
    from dataflow_core.diagram.marks import DENSITY_LIMIT
    from dataflow_core.model.panes import Pane, PaneTiming
    from dataflow_core.model.windows import IntervalWindow

    rng = random.Random(7)
    minute = 60_000
    elements = [ElementRecord("busy", rng.randint(1, 9), t := rng.randrange(0, 60 * minute),
                              t + rng.randrange(0, 5 * minute)) for _ in range(3_000)]
    elements += [ElementRecord("busy", 1, 10 * minute, 70 * minute)] * 7  # behind the watermark when they came
    elements += [ElementRecord("busy", 1, 20 * minute, 25 * minute, kind="duplicate")] * 3
    watermarks = [WatermarkStep(m * minute, (m - 5) * minute) for m in range(5, 80, 5)]
    panes = [Pane(key="busy", window=IntervalWindow(h * 30 * minute, (h + 1) * 30 * minute), value=h, timestamp=0,
                  timing=PaneTiming.ON_TIME, index=0, on_time_index=0, first=True, last=True, emitted_at=(h + 1) * 30 * minute + 5 * minute)
             for h in range(2)]
    assert len(elements) > DENSITY_LIMIT
    svg = render(History(elements=elements, watermarks=watermarks, panes=panes), "svg")
    assert count(svg, "element") == 0
    tree = ET.fromstring(svg)
    order = [el.get("id") for el in tree.iter() if el.get("id")]
    cells = [i for i in order if re.fullmatch(r"elements-0-\d+", i)]
    assert cells
    titles = {el.get("id"): el.find(f"{SVG}title").text for el in tree.iter() if el.get("id") in cells}
    counted = {"element": 0, "behind": 0, "duplicate": 0}
    for text in titles.values():
        counted["element"] += int(re.match(r"([\d,]+) element\(s\)", text).group(1).replace(",", ""))
        counted["behind"] += sum(int(n) for n in re.findall(r"(\d+) behind the watermark", text))
        counted["duplicate"] += sum(int(n) for n in re.findall(r"(\d+) duplicate row", text))
    assert counted == {"element": 3_007, "behind": 7, "duplicate": 3}
    last_cell = max(order.index(c) for c in cells)
    over = ("watermark-0", "pane-edge-0", "pane-edge-1", "label-pane-0", "label-pane-1")
    assert all(order.index(mark) > last_cell for mark in over), [(m, order.index(m), last_cell) for m in over]
    assert "3,010 elements, drawn as their density" in svg.decode()
