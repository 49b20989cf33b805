"""The pane diagram's pure geometry (issue 51, faults 2 to 5): the processing-time axis
compresses what lies between a backfill's ingest times and its run, its labels carry the date,
value labels never overlap, and the explorer tells read, accepted, duplicate and quarantined
rows apart. Pure: no Spark, no JVM, no browser."""

from __future__ import annotations

import re

from dataflow_core.airflow.plugin.explorer import element_kinds
from dataflow_core.diagram.axis import BrokenAxis, duration_text, overlaps, thin
from dataflow_core.diagram.draw import render
from dataflow_core.diagram.history import ElementRecord, History, WatermarkStep
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.time import parse_instant
from dataflow_core.model.windows import IntervalWindow

DAY = parse_instant("2024-05-01T00:00:00Z")
RUN = parse_instant("2026-11-28T16:00:00Z")
H = 3_600_000


def test_a_backfill_axis_is_two_readable_segments_with_a_break():
    arrivals = [DAY + n * H // 2 for n in range(24)]  # May 1 2024, 00:00 to 11:30
    axis = BrokenAxis.of(arrivals + [RUN, RUN + 60_000])
    assert len(axis.segments) == 2 and len(axis.breaks) == 1
    low, high, length = axis.breaks[0]
    assert 0 < low < high < 1 and length > 900 * 24 * H
    # The ingest times spread over most of the axis (not squeezed into one row at the bottom).
    spread = axis.position(arrivals[-1]) - axis.position(arrivals[0])
    assert spread > 0.5
    # The run's moments are apart from each other too, above the break.
    assert axis.position(RUN) > high and axis.position(RUN + 60_000) > axis.position(RUN)
    # Moments in order stay in order, also across the break.
    moments = sorted(arrivals + [RUN - 400 * 24 * H, RUN])
    positions = [axis.position(t) for t in moments]
    assert positions == sorted(positions) and all(0 <= p <= 1 for p in positions)


def test_tick_labels_carry_the_date_with_the_year():
    axis = BrokenAxis.of([DAY, DAY + 11 * H, RUN])
    labels = [label for _, label in axis.ticks()]
    dated = [label for label in labels if re.match(r"\d{4}-\d\d-\d\d ", label)]
    assert any(label.startswith("2024-05-01") for label in dated), labels
    assert any(label.startswith("2026-11-28") for label in dated), labels
    assert all(re.fullmatch(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d(:\d\d)?", label) for label in labels), labels
    positions = [p for p, _ in axis.ticks()]
    assert positions == sorted(positions)


def test_a_live_run_keeps_one_linear_axis():
    moments = [DAY + n * 300_000 for n in range(12)]  # a batch every 5 minutes
    axis = BrokenAxis.of(moments)
    assert len(axis.segments) == 1 and axis.breaks == []
    steps = [axis.position(b) - axis.position(a) for a, b in zip(moments, moments[1:])]
    assert max(steps) - min(steps) < 1e-9


def test_thinning_keeps_the_first_of_overlapping_labels():
    boxes = [(0, 0, 10, 5), (8, 0, 18, 5), (20, 0, 30, 5), (29, 4, 40, 9), (0, 10, 10, 15)]
    kept = thin(boxes, margin=0)
    assert kept == [0, 2, 4]
    assert not any(overlaps(boxes[a], boxes[b]) for a in kept for b in kept if a < b)
    # A margin keeps labels that merely touch apart too.
    assert thin([(0, 0, 10, 5), (11, 0, 20, 5)], margin=2) == [0]


def test_duration_text():
    assert duration_text(941 * 24 * H) == "2 y 211 d"
    assert duration_text(2 * 24 * H + 5 * H) == "2 d 5 h"
    assert duration_text(5 * H) == "5 h"


def test_element_kinds_tell_duplicates_and_quarantined_apart():
    rows = [("e1", "t1", "i1"), ("e1", "t1", "i2"), ("e2", "t2", "i1"), ("e3", "t3", "i3"), ("e3", "t3", "i4")]
    ingest = ["i1", "i2", "i1", "i3", "i4"]
    kinds = element_kinds(rows, ingest, [r[1] for r in rows], refused={("e3", "t3", "i3")})
    # e1's second delivery is a duplicate; e3's first delivery was quarantined, so its second is accepted.
    assert kinds == ["accepted", "duplicate", "accepted", "quarantined", "accepted"]


def _fifteen_minute_backfill() -> History:
    """One key's 15-minute windows of a day computed by a backfill two years later: every pane
    emitted at one moment, labels side by side (the explorer's '2840287134663...')."""
    elements = [ElementRecord("ad_1", None, DAY + n * 600_000, DAY + n * 600_000 + 30_000) for n in range(70)]
    elements.append(ElementRecord("ad_1", None, DAY + 5 * 600_000, DAY + 5 * 600_000 + 90_000, "duplicate"))
    elements.append(ElementRecord("ad_1", None, DAY + 7 * 600_000, DAY + 7 * 600_000 + 90_000, "quarantined"))
    panes = [Pane(key="ad_1", window=IntervalWindow(DAY + w * 900_000, DAY + (w + 1) * 900_000), value=2840 + 31 * w,
                  timestamp=DAY + (w + 1) * 900_000 - 1, timing=PaneTiming.ON_TIME, index=0, on_time_index=0,
                  first=True, last=True, emitted_at=RUN) for w in range(48)]
    return History(elements, [WatermarkStep(RUN, DAY + 12 * H)], panes, "billing: billing_panes", "key ad_1")


def test_the_diagram_of_a_backfill_breaks_its_axis_thins_its_labels_and_keeps_every_value_on_hover():
    svg = render(_fifteen_minute_backfill(), "svg", event_range=(DAY, DAY + 12 * H)).decode()
    assert 'id="axis-break-0-0"' in svg and "with nothing to draw" in svg
    assert ">2024-05-01 00:00<" in svg or "2024-05-01 0" in svg
    shown = re.findall(r'<g id="label-pane-(\d+)">', svg)
    assert 0 < len(shown) < 48  # some labels left out: they would overlap
    for w in range(48):  # every pane's value is still there, as its tooltip
        assert f'<g id="pane-{w}"><title>{2840 + 31 * w}</title>' in svg
    assert 'id="watermark-0"' in svg and 'id="watermark-step-0-0"' in svg
    assert "duplicate delivery (not counted)" in svg and "quarantined row" in svg
