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

Here are the figure and its output; a panel's frame (scale, ranges, ticks) is `frame.py`,
and the marks drawn in it (panes, watermark, elements, legend) are `marks.py`.

matplotlib is imported on first use, so `dataflow --help` stays quick.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Hashable

from dataflow_core.diagram.frame import Scale, event_span, frame_panel, processing_axis
from dataflow_core.diagram.history import History
from dataflow_core.diagram.marks import draw_elements, draw_panes, draw_watermark, legend
from dataflow_core.errors import DataflowError
from dataflow_core.model.time import Instant

FORMATS = ("svg", "png")

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
    "text.parse_math": False,  # a key or value is text: "ad-$\\frac$" is not mathtext (and no error)
}

PANEL_HEIGHT = 4.6  # inches per key
WIDTH = 9.0
MAX_PANELS = 24


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
    x_lo, x_hi = event_range if event_range else event_span(history)
    if x_hi <= x_lo:
        raise DataflowError("empty event-time range: its end must be after its start")
    y_axis = processing_axis(history)

    fig = Figure(figsize=(WIDTH, PANEL_HEIGHT * len(keys) + 1.1))
    fig.dataflow_titles = {}
    axes = fig.subplots(len(keys), 1, squeeze=False, sharex=True)[:, 0]
    scale = Scale(x_lo, x_hi, y_axis)
    for panel, (ax, key) in enumerate(zip(axes, keys)):
        _panel(ax, panel, key, history, scale, fig.dataflow_titles)
    title = history.title or "panes"
    if history.subtitle:
        import textwrap

        title += "\n" + "\n".join(textwrap.wrap(history.subtitle, 100))
    fig.suptitle(title, fontsize=10)
    legend(fig, sorted({e.kind for e in history.elements} - {"accepted"}))
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


def _panel(ax: Any, panel: int, key: Hashable, history: History, scale: Scale, titles: dict[str, str]) -> None:
    """One key's panel: the frame, then panes, the watermark and elements in that order (the
    order of the SVG, which the byte-identical output depends on)."""
    frame_panel(ax, panel, key, scale)
    draw_panes(ax, key, history, scale, titles)
    draw_watermark(ax, panel, history, scale, titles)
    draw_elements(ax, panel, key, history, scale, titles)
