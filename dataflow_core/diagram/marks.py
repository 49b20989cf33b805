"""The marks of one key's panel: panes (and retractions), the watermark and the elements, and
the legend that explains them. Each mark gets an SVG id and a tooltip (`titles`, by id), so
that tests can count marks and a value whose label is dropped stays readable on hover.

Where a mark goes is `frame.Scale`'s business; here is only what it looks like.
"""

from __future__ import annotations

from typing import Any, Hashable

from dataflow_core.diagram.axis import instant_text
from dataflow_core.diagram.frame import Scale
from dataflow_core.diagram.history import ElementRecord, History, WatermarkStep
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.time import Instant
from dataflow_core.model.windows import GlobalWindow

TIMING_COLOURS = {
    PaneTiming.EARLY: "#e69f00",  # orange: speculative
    PaneTiming.ON_TIME: "#009e73",  # green: the watermark passed the window's end
    PaneTiming.LATE: "#cc3311",  # red: after the on-time pane
}
RETRACTION_COLOUR = "#555555"
WATERMARK_COLOUR = "#0072b2"
LATE_ELEMENT_COLOUR = "#cc3311"
# Rows read that the runs did not aggregate, drawn apart from the elements.
OTHER_ELEMENT_STYLES = {
    "duplicate": {"marker": "o", "markersize": 5, "markerfacecolor": "#bbbbbb", "markeredgecolor": "#777777",
                  "markeredgewidth": 0.8},
    "quarantined": {"marker": "x", "markersize": 6, "markeredgecolor": "#7a4f9a", "markeredgewidth": 1.4},
}
LABEL_LIMIT = 150  # above this many elements in a panel, dots are drawn without their values
DENSITY_LIMIT = 400
"""Above this many elements in a panel, a dot each would bury the watermark and the panes'
edges: the elements are drawn as a density instead (`_draw_density`), every count exact."""
DENSITY_CELLS = (60, 36)  # columns (event time) and rows (processing time) of a panel's density grid

# Layers, bottom to top: pane bands (1), an element density (2), retractions (3), pane edges (4),
# the watermark (5), element dots (7) and their values (8), and the panes' and the watermark's
# value labels (9), which no dot covers.
_LABEL_BOX = {"boxstyle": "square,pad=0.08", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}

Titles = dict[str, str]  # SVG id -> tooltip


# --- panes -------------------------------------------------------------------------------


class _LabelHeights:
    """Successive labels of one window (panes apart from retractions) are pushed up to at
    least `gap` above the previous one, so that panes emitted close together stay legible."""

    gap = 1 / 32

    def __init__(self) -> None:
        self._last: dict[tuple[Any, bool], float] = {}

    def place(self, window: Any, retraction: bool, y: float) -> float:
        last = self._last.get((window, retraction))
        y = y if last is None else max(y, last + self.gap)
        self._last[(window, retraction)] = y
        return y


def draw_panes(ax: Any, key: Hashable, history: History, scale: Scale, titles: Titles) -> None:
    """Each pane as a band over its window from the previous pane of that window up to its
    emission; each retraction as a hatched strip ending at its emission."""
    heights = _LabelHeights()
    previous: dict[Any, Instant] = {}  # window -> emission of its last pane: the next band's bottom
    for i, pane in _panes_in_emission_order(history, key):
        if pane.retraction:
            _draw_retraction(ax, i, pane, scale, heights, titles)
            continue
        bottom = previous.get(pane.window, scale.y_axis.start)
        previous[pane.window] = pane.emitted_at
        _draw_pane(ax, i, pane, bottom, scale, heights, titles)


def _panes_in_emission_order(history: History, key: Hashable) -> list[tuple[int, Pane]]:
    """The key's panes with their index in the history (their SVG id), by emission; at one
    moment a retraction comes before the pane that replaces it."""
    return sorted(
        ((i, p) for i, p in enumerate(history.panes) if p.key == key),
        key=lambda ip: (ip[1].emitted_at, not ip[1].retraction, ip[0]),
    )


def _window_span(pane: Pane, scale: Scale) -> tuple[Instant, Instant]:
    if isinstance(pane.window, GlobalWindow):
        return scale.x_lo, scale.x_hi
    return max(pane.window.start, scale.x_lo), min(pane.window.end, scale.x_hi)


def _draw_pane(ax: Any, i: int, pane: Pane, bottom: Instant, scale: Scale, heights: _LabelHeights,
               titles: Titles) -> None:
    """A band in the colour of its timing, a solid top edge at the emission, the value bold
    at the top right."""
    from matplotlib.patches import Rectangle

    left, right = (scale.x(t) for t in _window_span(pane, scale))
    top, base = scale.y(pane.emitted_at), scale.y(bottom)
    colour = TIMING_COLOURS[pane.timing]
    rect = Rectangle((left, base), right - left, max(top - base, 0.0),
                     facecolor=colour, alpha=0.18, edgecolor="none", zorder=1)
    rect.set_gid(f"pane-{i}")
    titles[f"pane-{i}"] = value_text(pane.value)
    ax.add_patch(rect)
    edge = ax.plot([left, right], [top, top], color=colour, linewidth=2.2, zorder=4)[0]
    edge.set_gid(f"pane-edge-{i}")
    label = ax.text(
        right - 0.01 * (right - left), heights.place(pane.window, False, top), value_text(pane.value),
        ha="right", va="bottom", fontsize=9, fontweight="bold", color=colour, zorder=9, bbox=_LABEL_BOX,
    )
    label.set_gid(f"label-pane-{i}")


def _draw_retraction(ax: Any, i: int, pane: Pane, scale: Scale, heights: _LabelHeights, titles: Titles) -> None:
    """A thin hatched strip under the emission, the negated value in italics at the left, so
    that it reads apart from the pane that replaces it."""
    from matplotlib.patches import Rectangle

    left, right = (scale.x(t) for t in _window_span(pane, scale))
    top = scale.y(pane.emitted_at)
    band = 1 / 40
    rect = Rectangle(
        (left, top - band), right - left, band,
        facecolor="none", edgecolor=RETRACTION_COLOUR, hatch="////", linewidth=0.8, linestyle="--", zorder=3,
    )
    rect.set_gid(f"retraction-{i}")
    titles[f"retraction-{i}"] = "\u2212" + value_text(pane.value)
    ax.add_patch(rect)
    label = ax.text(
        left + 0.01 * (right - left), heights.place(pane.window, True, top), "\u2212" + value_text(pane.value),
        ha="left", va="bottom", fontsize=8, color=RETRACTION_COLOUR, fontstyle="italic", zorder=9,
        bbox=_LABEL_BOX,
    )
    label.set_gid(f"label-retraction-{i}")


# --- the watermark ----------------------------------------------------------------------


def draw_watermark(ax: Any, panel: int, history: History, scale: Scale, titles: Titles) -> None:
    """The watermark: vertical while processing time passes, a jump when it moves; a marker
    where each batch (or replay step) left it, its moments as a tooltip."""
    steps = history.watermarks
    if not steps:
        return
    px, py = [], []
    for n, step in enumerate(steps):
        until = steps[n + 1].processing_time if n + 1 < len(steps) else scale.y_axis.end
        px += [scale.x(step.watermark), scale.x(step.watermark)]
        py += [scale.y(step.processing_time), scale.y(until)]
    line = ax.plot(px, py, color=WATERMARK_COLOUR, linewidth=1.6, zorder=5)[0]
    line.set_gid(f"watermark-{panel}")
    for n, step in enumerate(steps):
        mark = ax.plot([scale.x(step.watermark)], [scale.y(step.processing_time)], marker="_", markersize=9,
                       markeredgewidth=2, color=WATERMARK_COLOUR, linestyle="none", zorder=5)[0]
        mark.set_gid(f"watermark-step-{panel}-{n}")
        titles[f"watermark-step-{panel}-{n}"] = (
            f"watermark {instant_text(step.watermark)} at processing time {instant_text(step.processing_time)}")
        if not scale.x_lo < step.watermark < scale.x_hi:
            _label_watermark_off_range(ax, panel, n, step, scale)


def _label_watermark_off_range(ax: Any, panel: int, n: int, step: WatermarkStep, scale: Scale) -> None:
    """A watermark off the event range runs along an edge of the panel; the note says where it
    really is."""
    beyond = step.watermark >= scale.x_hi
    moment = instant_text(step.watermark)[:16]
    note = ax.text(scale.x(step.watermark), scale.y(step.processing_time),
                   f"watermark {moment} \u2192 " if beyond else f" \u2190 watermark {moment}",
                   ha="right" if beyond else "left", va="bottom", fontsize=7, color=WATERMARK_COLOUR,
                   zorder=9, bbox=_LABEL_BOX)
    note.set_gid(f"label-watermark-{panel}-{n}")


# --- elements ---------------------------------------------------------------------------


def draw_elements(ax: Any, panel: int, key: Hashable, history: History, scale: Scale, titles: Titles) -> None:
    """Dots at (event time, arrival) with their values; a dot behind the watermark when it
    arrived is late. Past `LABEL_LIMIT` dots the values would be unreadable, so only tooltips
    carry them; past `DENSITY_LIMIT` the panel shows their density."""
    mine = [(i, e) for i, e in enumerate(history.elements) if e.key == key]
    if len(mine) > DENSITY_LIMIT:
        _draw_density(ax, panel, [e for _, e in mine], history, scale, titles)
        return
    labelled = len(mine) <= LABEL_LIMIT and any(e.value is not None for _, e in mine)
    for i, e in mine:
        late = _behind_watermark(history, e)
        x, y = scale.x(e.event_time), scale.y(e.arrival)
        dot = ax.plot([x], [y], linestyle="none", zorder=7, **_element_style(e, labelled, late))[0]
        dot.set_gid(f"element-{i}")
        titles[f"element-{i}"] = _element_title(e, late)
        if labelled and e.value is not None:
            text = ax.text(x, y, value_text(e.value, 4), ha="center", va="center", fontsize=7, zorder=8)
            text.set_gid(f"label-element-{i}")


def _behind_watermark(history: History, e: ElementRecord) -> bool:
    """Whether an aggregated element arrived behind the watermark (a late one)."""
    wm = history.watermark_at(e.arrival)
    return e.kind == "accepted" and wm is not None and e.event_time < wm


def _draw_density(ax: Any, panel: int, elements: list[ElementRecord], history: History, scale: Scale,
                  titles: Titles) -> None:
    """The panel's elements counted in a grid of cells (`DENSITY_CELLS`, in plot coordinates,
    so a compressed stretch of processing time is compressed here too), each cell shaded by
    its count, red-rimmed when some of its elements arrived behind the watermark, and below
    the panes' edges and the watermark, which stay readable over it. A cell's tooltip holds
    its exact counts, kind by kind; a note in the panel says how many elements it shows."""
    from matplotlib.patches import Rectangle

    columns, rows = DENSITY_CELLS
    x_lo, x_hi = ax.get_xlim()
    y_lo, y_hi = ax.get_ylim()
    width, height = (x_hi - x_lo) / columns, (y_hi - y_lo) / rows
    cells: dict[tuple[int, int], list[ElementRecord]] = {}
    for e in elements:
        col = min(max(int((scale.x(e.event_time) - x_lo) / width), 0), columns - 1)
        row = min(max(int((scale.y(e.arrival) - y_lo) / height), 0), rows - 1)
        cells.setdefault((col, row), []).append(e)
    most = max(len(members) for members in cells.values())
    for n, ((col, row), members) in enumerate(sorted(cells.items())):
        late = sum(_behind_watermark(history, e) for e in members)
        shade = 0.15 + 0.7 * len(members) / most
        cell = ax.add_patch(Rectangle(
            (x_lo + col * width, y_lo + row * height), width, height, facecolor="#222222", alpha=shade,
            edgecolor=LATE_ELEMENT_COLOUR if late else "none", linewidth=1.0, zorder=2))
        cell.set_gid(f"elements-{panel}-{n}")
        titles[f"elements-{panel}-{n}"] = _cell_title(members, late)
    note = ax.text(0.01, 0.99, f"{len(elements):,} elements, drawn as their density (darker: more; "
                   "red rim: some behind the watermark; hover a cell for its counts)",
                   transform=ax.transAxes, ha="left", va="top", fontsize=7, color="#444444", zorder=9,
                   bbox=_LABEL_BOX)
    note.set_gid(f"density-note-{panel}")


def _cell_title(members: list[ElementRecord], late: int) -> str:
    kinds = {kind: sum(e.kind == kind for e in members) for kind in ("accepted", "duplicate", "quarantined")}
    counts = [f"{kinds['accepted']:,} element(s)" + (f", {late:,} behind the watermark" if late else "")]
    counts += [f"{n:,} {kind} row(s)" for kind, n in kinds.items() if kind != "accepted" and n]
    first, last = min(e.event_time for e in members), max(e.event_time for e in members)
    came, went = min(e.arrival for e in members), max(e.arrival for e in members)
    return (f"{'; '.join(counts)}: event time {instant_text(first)} to {instant_text(last)}, "
            f"arrived {instant_text(came)} to {instant_text(went)}")


def _element_style(e: ElementRecord, labelled: bool, late: bool) -> dict[str, Any]:
    """A white dot big enough for its value (red rim when late); rows not aggregated
    (duplicates, quarantined) in their own style."""
    if e.kind != "accepted":
        return OTHER_ELEMENT_STYLES[e.kind]
    return dict(marker="o", markersize=13 if labelled else 5, markerfacecolor="white",
                markeredgecolor=LATE_ELEMENT_COLOUR if late else "#222222",
                markeredgewidth=1.8 if late else 1.0)


def _element_title(e: ElementRecord, late: bool) -> str:
    return (f"{'' if e.kind == 'accepted' else e.kind + ' row: '}"
            f"{'' if e.value is None else value_text(e.value) + ': '}event time "
            f"{instant_text(e.event_time)}, arrived {instant_text(e.arrival)}"
            + (" (behind the watermark)" if late else ""))


def legend(fig: Any, other_kinds: list[str]) -> None:
    """One legend under all panels: every kind of mark above, and the rows not aggregated
    only when the history has them."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Line2D([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor="#222222", markersize=9),
        Line2D([], [], marker="o", linestyle="none", markerfacecolor="white", markeredgecolor=LATE_ELEMENT_COLOUR,
               markeredgewidth=1.8, markersize=9),
        Line2D([], [], color=WATERMARK_COLOUR, linewidth=1.6),
        Patch(facecolor=TIMING_COLOURS[PaneTiming.EARLY], alpha=0.5),
        Patch(facecolor=TIMING_COLOURS[PaneTiming.ON_TIME], alpha=0.5),
        Patch(facecolor=TIMING_COLOURS[PaneTiming.LATE], alpha=0.5),
        Patch(facecolor="none", edgecolor=RETRACTION_COLOUR, hatch="////", linestyle="--"),
    ]
    handles += [Line2D([], [], linestyle="none", **OTHER_ELEMENT_STYLES[kind]) for kind in other_kinds]
    labels = [
        "element (value)", "element behind the watermark", "watermark",
        "EARLY pane", "ON_TIME pane", "LATE pane", "retraction (\u2212value)",
    ]
    labels += [{"duplicate": "duplicate delivery (not counted)", "quarantined": "quarantined row"}[k]
               for k in other_kinds]
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, fontsize=8)


def value_text(value: Any, limit: int = 18) -> str:
    """A value as short as a label can be: integers without `.0`, lists inline, cut at
    `limit` characters with an ellipsis (the tooltip has the rest)."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() else f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(value_text(v, limit) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
