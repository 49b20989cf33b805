"""The paper's pane diagram (Akidau et al., VLDB 2015, figures 6-14) drawn with matplotlib.

Event time runs along the x axis and processing time up the y axis. Each element is a dot
at (event time, arrival time) labelled with its value; the watermark is the step line of
where it stood as processing time went by; each pane is a shaded band over its window's
event-time span whose top edge is the moment it was emitted, labelled with its value.
EARLY, ON_TIME and LATE panes have their own colours; a retraction is a hatched band ending
at its emission, labelled with the retracted value negated. One panel per key.

Processing time runs on a `BrokenAxis` (`axis.py`): stretches with nothing in them (between a
backfill's 2024 ingest times and its 2026 run) are compressed into a marked break, and tick
labels carry the date. Value labels never overlap: where two would, the later one is dropped
(`axis.thin`) and every mark carries its value as a tooltip (`<title>`) instead. The watermark
is drawn per batch: its step line, and a marker at each batch's (watermark, processing time).

Output is deterministic: the same history gives the same SVG or PNG bytes (fixed rcParams,
SVG hash salt, no dates or software stamps). Every mark carries an SVG id (`element-<n>`,
`pane-<n>`, `retraction-<n>`, `watermark-<panel>`, `watermark-step-<panel>-<n>`,
`axis-break-<panel>-<n>`, `label-pane-<n>`, ...; n is the position in the history's lists) so
that tests can count marks and measure labels from the XML.

matplotlib is imported on first use, so `dataflow --help` stays quick.
"""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path
from typing import Any, Hashable

from dataflow_core.diagram.axis import BrokenAxis, duration_text, round_ticks, tick_label
from dataflow_core.diagram.history import History
from dataflow_core.errors import DataflowError
from dataflow_core.model.panes import Pane, PaneTiming
from dataflow_core.model.time import END_OF_TIME, Instant
from dataflow_core.model.windows import GlobalWindow

FORMATS = ("svg", "png")

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

# Fixed settings so that the same history always gives the same bytes.
RC = {
    "svg.hashsalt": "dataflow-diagram",
    "svg.fonttype": "none",  # text stays text: readable and searchable in the SVG
    "svg.image_inline": True,
    "font.family": ["DejaVu Sans"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "figure.dpi": 100.0,
    "savefig.dpi": 100.0,
    "hatch.linewidth": 0.8,
    "path.simplify": False,
    "axes.unicode_minus": True,
}

PANEL_HEIGHT = 4.6  # inches per key
WIDTH = 9.0
MAX_PANELS = 24
LABEL_LIMIT = 150  # above this many elements in a panel, dots are drawn without their values

_LABEL_BOX = {"boxstyle": "square,pad=0.08", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}



def render(history: History, fmt: str = "svg", *, event_range: tuple[Instant, Instant] | None = None) -> bytes:
    """The diagram of `history` as SVG or PNG bytes."""
    if fmt not in FORMATS:
        raise DataflowError(f"unknown diagram format {fmt!r} (known: {', '.join(FORMATS)})")
    import matplotlib

    with matplotlib.rc_context(RC):
        fig = draw(history, event_range=event_range)
        buf = io.BytesIO()
        metadata: dict[str, Any] = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(buf, format=fmt, metadata=metadata)
    data = buf.getvalue()
    return with_tooltips(data, getattr(fig, "dataflow_titles", {})) if fmt == "svg" else data


def with_tooltips(svg: bytes, titles: dict[str, str]) -> bytes:
    """Each mark's `<g id=...>` gets a `<title>` (the browser's tooltip on hover): the value of
    a pane whose label was dropped so as not to overlap another stays readable."""
    from xml.sax.saxutils import escape

    text = svg.decode()
    for gid, title in titles.items():
        opening = f'<g id="{gid}">'
        text = text.replace(opening, f"{opening}<title>{escape(title)}</title>", 1)
    return text.encode()


def save(history: History, path: str | Path, *, event_range: tuple[Instant, Instant] | None = None) -> Path:
    """Writes the diagram to `path`; the format is the suffix (.svg or .png)."""
    path = Path(path)
    fmt = output_format(path)
    data = render(history, fmt, event_range=event_range)
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise DataflowError(f"{path}: cannot write the diagram: {exc.strerror or exc}") from None
    return path


def output_format(path: str | Path) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise DataflowError(
            f"{path}: unknown output format {('.' + suffix) if suffix else '(no suffix)'} "
            f"(use a file name ending in {' or '.join('.' + f for f in FORMATS)})"
        )
    return suffix


def draw(history: History, *, event_range: tuple[Instant, Instant] | None = None) -> Any:
    """A matplotlib Figure (not attached to pyplot) with one panel per key."""
    from matplotlib.figure import Figure

    keys = history.keys()
    if not keys:
        raise DataflowError("nothing to draw: the history has no elements and no panes")
    if len(keys) > MAX_PANELS:
        raise DataflowError(
            f"{len(keys)} keys is too many panels for one diagram (at most {MAX_PANELS}); choose keys with --key"
        )
    x_lo, x_hi = event_range if event_range else _event_span(history)
    if x_hi <= x_lo:
        raise DataflowError("empty event-time range: its end must be after its start")
    y_axis = processing_axis(history)

    fig = Figure(figsize=(WIDTH, PANEL_HEIGHT * len(keys) + 1.1))
    fig.dataflow_titles = {}
    axes = fig.subplots(len(keys), 1, squeeze=False, sharex=True)[:, 0]
    for panel, (ax, key) in enumerate(zip(axes, keys)):
        _panel(ax, panel, key, history, (x_lo, x_hi), y_axis, fig.dataflow_titles)
    title = history.title or "panes"
    if history.subtitle:
        import textwrap

        title += "\n" + "\n".join(textwrap.wrap(history.subtitle, 100))
    fig.suptitle(title, fontsize=10)
    _legend(fig, sorted({e.kind for e in history.elements} - {"accepted"}))
    top = 1 - (0.8 + 0.15 * title.count("\n")) / fig.get_figheight()
    bottom = 0.85 / fig.get_figheight()
    fig.subplots_adjust(left=0.17, right=0.97, top=top, bottom=bottom, hspace=0.25)
    _thin_labels(fig, axes)
    return fig


def _thin_labels(fig: Any, axes: Any) -> None:
    """Hides every value label that would overlap one drawn before it (panes first, in the
    order they were emitted, then retractions, then elements), measured as rendered."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dataflow_core.diagram.axis import thin

    renderer = FigureCanvasAgg(fig).get_renderer()
    rank = {"label-pane": 0, "label-retraction": 1, "label-watermark": 2, "label-element": 3}
    for ax in axes:
        labels = [t for t in ax.texts if (t.get_gid() or "").startswith("label-")]
        labels.sort(key=lambda t: rank["-".join(t.get_gid().split("-")[:2])])
        boxes = []
        for t in labels:
            extent = t.get_window_extent(renderer)
            boxes.append((extent.x0, extent.y0, extent.x1, extent.y1))
        kept = set(thin(boxes))
        for i, t in enumerate(labels):
            t.set_visible(i in kept)


# --- one panel ------------------------------------------------------------------------


def _panel(ax: Any, panel: int, key: Hashable, history: History, xs: tuple[int, int], y_axis: BrokenAxis,
           titles: dict[str, str]) -> None:
    from matplotlib.patches import Rectangle

    x_lo, x_hi = xs
    origin_x = x_lo  # plot offsets from here: small floats, exact ticks

    def X(t: Instant) -> float:
        return float(min(max(t, x_lo), x_hi) - origin_x)

    def Y(t: Instant) -> float:
        return y_axis.position(min(max(t, y_axis.start), y_axis.end))

    ax.set_xlim(0.0, float(x_hi - x_lo))
    ax.set_ylim(0.0, 1.0)
    ax.set_title(f"key: {key}", loc="left")
    ax.set_xlabel("event time (UTC)")
    ax.set_ylabel("processing time (UTC)" + ("; empty stretches compressed" if y_axis.breaks else ""))
    _event_axis(ax.xaxis, x_lo, x_hi)
    _processing_axis_ticks(ax, panel, y_axis)
    ax.grid(True, color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    y_lo = y_axis.start

    # Panes: a band over the window from the previous pane of that window up to this one.
    gap = 1 / 32  # labels of one window closer than this in y are pushed up
    previous: dict[Any, Instant] = {}
    label_at: dict[tuple[Any, bool], float] = {}  # (window, retraction) -> y of its last label

    def label_y(window: Any, retraction: bool, y: float) -> float:
        last = label_at.get((window, retraction))
        y = y if last is None else max(y, last + gap)
        label_at[(window, retraction)] = y
        return y

    order = sorted(
        ((i, p) for i, p in enumerate(history.panes) if p.key == key),
        key=lambda ip: (ip[1].emitted_at, not ip[1].retraction, ip[0]),
    )
    for i, pane in order:
        left, right = _window_span(pane, x_lo, x_hi)
        top = pane.emitted_at
        if pane.retraction:
            band = 1 / 40
            rect = Rectangle(
                (X(left), Y(top) - band), X(right) - X(left), band,
                facecolor="none", edgecolor=RETRACTION_COLOUR, hatch="////", linewidth=0.8,
                linestyle="--", zorder=3,
            )
            rect.set_gid(f"retraction-{i}")
            titles[f"retraction-{i}"] = "\u2212" + _value_text(pane.value)
            ax.add_patch(rect)
            label = ax.text(
                X(left) + 0.01 * (X(right) - X(left)), label_y(pane.window, True, Y(top)),
                "\u2212" + _value_text(pane.value),
                ha="left", va="bottom", fontsize=8, color=RETRACTION_COLOUR, fontstyle="italic", zorder=6,
                bbox=_LABEL_BOX,
            )
            label.set_gid(f"label-retraction-{i}")
            continue
        bottom = previous.get(pane.window, y_lo)
        previous[pane.window] = top
        colour = TIMING_COLOURS[pane.timing]
        rect = Rectangle(
            (X(left), Y(bottom)), X(right) - X(left), max(Y(top) - Y(bottom), 0.0),
            facecolor=colour, alpha=0.18, edgecolor="none", zorder=1,
        )
        rect.set_gid(f"pane-{i}")
        titles[f"pane-{i}"] = _value_text(pane.value)
        ax.add_patch(rect)
        edge = ax.plot([X(left), X(right)], [Y(top), Y(top)], color=colour, linewidth=2.2, zorder=4)[0]
        edge.set_gid(f"pane-edge-{i}")
        label = ax.text(
            X(right) - 0.01 * (X(right) - X(left)), label_y(pane.window, False, Y(top)), _value_text(pane.value),
            ha="right", va="bottom", fontsize=9, fontweight="bold", color=colour, zorder=6, bbox=_LABEL_BOX,
        )
        label.set_gid(f"label-pane-{i}")

    # The watermark: vertical while processing time passes, a jump when it moves; a marker
    # where each batch (or replay step) left it, its moments as a tooltip.
    steps = history.watermarks
    if steps:
        px, py = [], []
        for n, step in enumerate(steps):
            until = steps[n + 1].processing_time if n + 1 < len(steps) else y_axis.end
            px += [X(step.watermark), X(step.watermark)]
            py += [Y(max(step.processing_time, y_lo)), Y(min(until, y_axis.end))]
        line = ax.plot(px, py, color=WATERMARK_COLOUR, linewidth=1.6, zorder=5)[0]
        line.set_gid(f"watermark-{panel}")
        for n, step in enumerate(steps):
            mark = ax.plot([X(step.watermark)], [Y(max(step.processing_time, y_lo))], marker="_", markersize=9,
                           markeredgewidth=2, color=WATERMARK_COLOUR, linestyle="none", zorder=5)[0]
            mark.set_gid(f"watermark-step-{panel}-{n}")
            titles[f"watermark-step-{panel}-{n}"] = (
                f"watermark {_instant_text(step.watermark)} at processing time {_instant_text(step.processing_time)}")
            if not x_lo < step.watermark < x_hi:  # off the event range: the line runs along an edge, say where it is
                beyond = step.watermark >= x_hi
                note = ax.text(X(step.watermark), Y(max(step.processing_time, y_lo)),
                               (f"watermark {_instant_text(step.watermark)[:16]} \u2192 " if beyond
                                else f" \u2190 watermark {_instant_text(step.watermark)[:16]}"),
                               ha="right" if beyond else "left", va="bottom", fontsize=7, color=WATERMARK_COLOUR,
                               zorder=6, bbox=_LABEL_BOX)
                note.set_gid(f"label-watermark-{panel}-{n}")

    # Elements: dots with their values; a dot behind the watermark when it arrived is late.
    mine = [(i, e) for i, e in enumerate(history.elements) if e.key == key]
    labelled = len(mine) <= LABEL_LIMIT and any(e.value is not None for _, e in mine)
    for i, e in mine:
        wm = history.watermark_at(e.arrival)
        late = e.kind == "accepted" and wm is not None and e.event_time < wm
        if e.kind == "accepted":
            style = dict(marker="o", markersize=13 if labelled else 5, markerfacecolor="white",
                         markeredgecolor=LATE_ELEMENT_COLOUR if late else "#222222",
                         markeredgewidth=1.8 if late else 1.0)
        else:
            style = OTHER_ELEMENT_STYLES[e.kind]
        dot = ax.plot([X(e.event_time)], [Y(e.arrival)], linestyle="none", zorder=7, **style)[0]
        dot.set_gid(f"element-{i}")
        titles[f"element-{i}"] = (f"{'' if e.kind == 'accepted' else e.kind + ' row: '}"
                                  f"{'' if e.value is None else _value_text(e.value) + ': '}event time "
                                  f"{_instant_text(e.event_time)}, arrived {_instant_text(e.arrival)}"
                                  + (" (behind the watermark)" if late else ""))
        if labelled and e.value is not None:
            text = ax.text(
                X(e.event_time), Y(e.arrival), _value_text(e.value, 4), ha="center", va="center",
                fontsize=7, zorder=8,
            )
            text.set_gid(f"label-element-{i}")


def _legend(fig: Any, other_kinds: list[str]) -> None:
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


# --- ranges, ticks, labels ---------------------------------------------------------------


def _finite(t: Instant) -> bool:
    return -END_OF_TIME < t < END_OF_TIME - 1


def _window_span(pane: Pane, x_lo: Instant, x_hi: Instant) -> tuple[Instant, Instant]:
    if isinstance(pane.window, GlobalWindow):
        return x_lo, x_hi
    return max(pane.window.start, x_lo), min(pane.window.end, x_hi)


def _event_span(history: History) -> tuple[Instant, Instant]:
    points = [e.event_time for e in history.elements]
    for p in history.panes:
        if not isinstance(p.window, GlobalWindow):
            points += [p.window.start, p.window.end]
    points += [s.watermark for s in history.watermarks if _finite(s.watermark)]
    points = [t for t in points if _finite(t)]
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
        day = _utc(t).date()
        labels.append(tick_label(t, with_date=previous is None or day != previous, with_seconds=seconds)
                      if _utc(lo).date() != _utc(hi).date() else tick_label(t, False, seconds))
        previous = day
    axis.set_major_locator(FixedLocator([float(t - lo) for t in ticks]))
    axis.set_ticklabels(labels)
    axis.set_minor_locator(NullLocator())


def _utc(t: Instant) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=t)


def _instant_text(t: Instant) -> str:
    if not _finite(t):
        return "end of time" if t > 0 else "beginning of time"
    return _utc(t).strftime("%Y-%m-%d %H:%M:%S")


def _value_text(value: Any, limit: int = 18) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() else f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = "[" + ", ".join(_value_text(v, limit) for v in value) + "]"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
