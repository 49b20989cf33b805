"""A panel's frame: where a moment is drawn (`Scale`), the ranges both axes cover and their
ticks. Kept apart from the marks (`marks.py`) so that what a pane or element looks like and
where the axes put it change independently.

matplotlib is imported on first use, like the rest of the diagram.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

from dataflow_core.diagram.axis import BrokenAxis, duration_text, finite, round_ticks, tick_label, utc
from dataflow_core.diagram.history import History
from dataflow_core.model.time import Instant
from dataflow_core.model.windows import GlobalWindow


@dataclass(frozen=True)
class Scale:
    """Plot coordinates of a panel. Event time is drawn as an offset from `x_lo` (small floats,
    exact ticks); both axes clamp to their range so that the global window's ends of time and
    a watermark off the range still land on an edge."""

    x_lo: Instant
    x_hi: Instant
    y_axis: BrokenAxis

    def x(self, t: Instant) -> float:
        return float(min(max(t, self.x_lo), self.x_hi) - self.x_lo)

    def y(self, t: Instant) -> float:
        return self.y_axis.position(min(max(t, self.y_axis.start), self.y_axis.end))


def event_span(history: History) -> tuple[Instant, Instant]:
    """The event-time range that shows every element, finite window and watermark, padded so
    that nothing sits on the frame."""
    points = [e.event_time for e in history.elements]
    for p in history.panes:
        if not isinstance(p.window, GlobalWindow):
            points += [p.window.start, p.window.end]
    points += [s.watermark for s in history.watermarks if finite(s.watermark)]
    points = [t for t in points if finite(t)]
    if not points:
        return 0, 60_000
    lo, hi = min(points), max(points)
    pad = max((hi - lo) // 25, 1_000)
    return lo - pad, hi + pad


def processing_axis(history: History) -> BrokenAxis:
    """The processing-time axis of every moment the history has (arrivals, emissions,
    watermark steps), with empty stretches compressed."""
    points = [e.arrival for e in history.elements] + [p.emitted_at for p in history.panes]
    points += [s.processing_time for s in history.watermarks]
    return BrokenAxis.of(points or [0])


def frame_panel(ax: Any, panel: int, key: Hashable, scale: Scale) -> None:
    """Limits, title, axis labels, ticks and grid of one key's panel, before any mark."""
    y_axis = scale.y_axis
    ax.set_xlim(0.0, float(scale.x_hi - scale.x_lo))
    ax.set_ylim(0.0, 1.0)
    ax.set_title(f"key: {key}", loc="left")
    ax.set_xlabel("event time (UTC)")
    ax.set_ylabel("processing time (UTC)" + ("; empty stretches compressed" if y_axis.breaks else ""))
    _event_axis(ax.xaxis, scale.x_lo, scale.x_hi)
    _processing_axis_ticks(ax, panel, y_axis)
    ax.grid(True, color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)


def _processing_axis_ticks(ax: Any, panel: int, y_axis: BrokenAxis) -> None:
    """Ticks of every segment, and each break as a grey band saying how long it stands for."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ticks = y_axis.ticks(max_ticks=9)
    ax.yaxis.set_major_locator(FixedLocator([p for p, _ in ticks]))
    ax.yaxis.set_ticklabels([label for _, label in ticks])
    ax.yaxis.set_minor_locator(NullLocator())
    for n, (low, high, length) in enumerate(y_axis.breaks):
        band = ax.axhspan(low, high, facecolor="#f2f2f2", edgecolor="#bbbbbb", linestyle=(0, (4, 3)),
                          linewidth=0.8, zorder=0.5)
        band.set_gid(f"axis-break-{panel}-{n}")
        text = ax.text(0.5, (low + high) / 2, f"\u2248 {duration_text(length)} with nothing to draw",
                       transform=ax.get_yaxis_transform(), ha="center", va="center", fontsize=7,
                       color="#777777", zorder=0.6)
        text.set_gid(f"axis-break-text-{panel}-{n}")


def _event_axis(axis: Any, lo: Instant, hi: Instant) -> None:
    """Ticks on round times labelled in UTC; the first and each new day's with the date."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ticks = [t for t in round_ticks(lo, hi, 9)]
    seconds = any(t % 60_000 for t in ticks)
    labels, previous = [], None
    for t in ticks:
        day = utc(t).date()
        labels.append(tick_label(t, with_date=previous is None or day != previous, with_seconds=seconds)
                      if utc(lo).date() != utc(hi).date() else tick_label(t, False, seconds))
        previous = day
    axis.set_major_locator(FixedLocator([float(t - lo) for t in ticks]))
    axis.set_ticklabels(labels)
    axis.set_minor_locator(NullLocator())
