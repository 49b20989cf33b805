"""The pane explorer, a FastAPI app that Airflow's api-server mounts at `/dataflow-explorer`
(see `airflow_plugin.py`); the Airflow UI shows it under Browse -> "Pane explorer".

Pick a pipeline, a stage and a key (the search box lists matching keys, busiest first) and an
event-time range: the page shows the key's pane diagram (elements, watermark, every pane and
retraction, drawn as `dataflow diagram --pipeline --key` draws it), its results rows and its
pane log. Everything is read from the Delta tables through the fast reader (no Spark). The
counts split the rows read into accepted, duplicates and quarantined (`explorer.element_kinds`)
and the watermark comes from every kind of run (`explorer.watermark_steps`), so that neither
is a number a reader has to second-guess.

It also serves the Great Expectations Data Docs site of the warehouse at `data-docs/`
(Browse -> "Data Docs"; the gates' task logs link there), styled from local copies of its CSS
and scripts (`dataflow_core/quality/assets.py`), so it needs no internet and no file path.

Every route is behind one dependency (`access.guard`): a login Airflow's auth manager accepts,
and read access to the pipeline's DAGs; without Airflow's auth the app refuses every request.
"""

from __future__ import annotations

import datetime as dt
import html
import os
from typing import Any, Sequence
from pathlib import Path
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dataflow_core.airflow.plugin.access import DATA_DOCS_CSP, SIGNED_PREFIX, Access, data_docs_token, guard
from dataflow_core.errors import DataflowError
from dataflow_core.pipelines import layout

URL_PREFIX = "/dataflow-explorer"

app = FastAPI(title="Dataflow pane explorer", docs_url=None, redoc_url=None, openapi_url=None,
              dependencies=[Depends(guard)])


@app.exception_handler(StarletteHTTPException)
async def _refused(request: Request, exc: StarletteHTTPException) -> Response:
    """A refusal in one line: JSON for the key search, a page for the rest (with the way to log
    in when that is what is missing)."""
    detail = str(exc.detail)
    if request.url.path.endswith("/keys"):
        return JSONResponse({"error": detail}, status_code=exc.status_code)
    login = ' <a href="/" target="_top">Log in to Airflow</a>' if exc.status_code == 401 else ""
    return HTMLResponse(_document("Dataflow", f'<p class="error" id="error">{html.escape(detail)}{login}</p>'),
                        status_code=exc.status_code)


def _access(request: Request) -> Access:
    return request.state.dataflow_access


def _warehouse() -> str | None:
    return os.environ.get("DATAFLOW_WAREHOUSE") or None


@app.get("/keys")
async def keys(request: Request, pipeline: str, stage: str | None = None, q: str = "") -> Response:
    import starlette.concurrency

    from dataflow_core.airflow.plugin.explorer import search_keys
    from dataflow_core.pipelines import get

    try:
        found = await starlette.concurrency.run_in_threadpool(search_keys, get(pipeline), stage or None, q, _warehouse())
        return JSONResponse({"keys": found})
    except DataflowError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)


@app.get("/data-docs")
async def data_docs_root_page() -> Response:
    return RedirectResponse(URL_PREFIX + "/data-docs/index.html")


@app.get(f"/data-docs/{SIGNED_PREFIX}/{{token}}/{{path:path}}")
async def data_docs_file(request: Request, token: str, path: str) -> Response:
    """A file of the Data Docs site (pages, their local CSS, scripts and fonts), never one
    outside the site, in the CSP sandbox (`access.DATA_DOCS_CSP`)."""
    file, message = _site_file(path)
    if file is None:
        response: Response = HTMLResponse(_document("Data Docs", f'<p class="error" id="error">{message}</p>'),
                                          status_code=404)
    else:
        response = FileResponse(file)
        if path.startswith("static/"):
            # A sandboxed page (an opaque origin) fetches its fonts in CORS mode: the site's
            # static files (the libraries' CSS, scripts and fonts, no data) say anyone may read them.
            response.headers["Access-Control-Allow-Origin"] = "*"
    response.headers["Content-Security-Policy"] = DATA_DOCS_CSP
    response.headers["Referrer-Policy"] = "no-referrer"  # the path holds the token
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


@app.get("/data-docs/{path:path}")
async def data_docs(request: Request, path: str) -> Response:
    """A logged-in reader of every pipeline: the same file under a signed path (the sandboxed
    pages' own requests carry no cookie; their relative links keep the path's token)."""
    access = _access(request)
    token = "anonymous" if access.anonymous else data_docs_token(access.user)
    return RedirectResponse(f"{URL_PREFIX}/data-docs/{SIGNED_PREFIX}/{token}/{quote(path or 'index.html')}",
                            status_code=307)


def _site_file(path: str) -> tuple[Path | None, str]:
    """The site's file at `path` (relative), or None and why not: outside the site, missing,
    or not a path at all (a NUL byte)."""
    from dataflow_core.quality.docs import data_docs_root, site_index

    site = site_index(data_docs_root(_warehouse())).parent.resolve()
    if "\0" in path:
        return None, f"No such Data Docs page: {html.escape(repr(path))}"
    file = (site / (path or "index.html")).resolve()
    if not file.is_relative_to(site) or not file.is_file():
        return None, ("No Data Docs yet: a gate builds them (run a backfill or a micro-batch first)."
                      if not site.is_dir() else f"No such Data Docs page: {html.escape(path)}")
    return file, ""


@app.get("/plan", response_class=HTMLResponse)
async def plan_page(request: Request, pipeline: str | None = None, run_id: str = "") -> Response:
    """The plan view: a pipeline's backfill plans, and one plan's windows, old against new."""
    import starlette.concurrency

    body = await starlette.concurrency.run_in_threadpool(render_plan_page, pipeline, run_id, _warehouse(),
                                                         _access(request).pipelines)
    return HTMLResponse(body)


def render_plan_page(pipeline: str | None, run_id: str, warehouse: str | None,
                     readable: Sequence[str] | None = None) -> str:
    """The plan view of `pipeline` (else the first one), among the pipelines in `readable`
    (the caller's, from `access.guard`; None: all)."""
    from dataflow_core.query.plans import plan_stages, plans_of

    specs = _readable_specs(readable)
    pipeline = pipeline if pipeline in specs else next(iter(specs), None)
    if pipeline is None:
        return _document("Backfill plans", '<p class="error" id="error">No pipelines are registered.</p>')
    plans = plans_of(pipeline, warehouse)
    links = "".join(
        f'<li><a href="?{html.escape(urlencode({"pipeline": pipeline, "run_id": p["run_id"]}))}">'
        f'{html.escape(p["run_id"])}</a> [{html.escape(p["start"][:10])}, {html.escape(p["end"][:10])}) '
        f'<span class="status-{p["status"]}">{p["status"]}</span></li>' for p in plans)
    names = "".join(f'<option{" selected" if n == pipeline else ""}>{html.escape(n)}</option>' for n in specs)
    parts = [f'<form method="get" action=""><label>Pipeline <select name="pipeline" onchange="this.form.submit()">'
             f'{names}</select></label></form>',
             f'<ul id="plans">{links}</ul>' if plans else '<p id="no-plans">No backfill was planned for approval '
             '(dataflow backfill ... --plan-only, or "Require approval" on the backfill form).</p>']
    chosen = next((p for p in plans if p["run_id"] == run_id), None)
    if run_id and chosen is None:
        parts.append(f'<p class="error" id="error">No plan {html.escape(run_id)} of pipeline '
                     f'{html.escape(pipeline)}.</p>')
    elif chosen is not None:
        parts.append(_plan_section(chosen, plan_stages(specs[pipeline], run_id, warehouse)))
    return _document("Backfill plans", "\n".join(parts))


def _plan_section(plan: dict[str, Any], stages: list[Any]) -> str:
    """One plan: its status, then per stage each window's old and new value side by side."""
    from dataflow_core.diagram.plan_table import bar_widths, key_rows, stage_rows

    head = (f'<h2 id="plan-head">Plan {html.escape(plan["run_id"])} <small>[{html.escape(plan["start"])}, '
            f'{html.escape(plan["end"])})</small> <span class="status-{plan["status"]}">{plan["status"]}</span></h2>')
    if plan["status"] != "planned":
        return head + (f'<p id="decided">{plan["status"]} by {html.escape(str(plan["decided_by"] or "?"))} at '
                       f'{_cell(plan["decided_at"])}{": " + html.escape(plan["reason"]) if plan["reason"] else ""}; '
                       "its plan is no longer stored (the tables and dataflow_runs hold what happened).</p>")
    out = [head]
    for diff in stages:
        columns, rows = stage_rows(diff)
        table = [dict(zip(columns, row), bars=_bars(*widths)) for widths, row in zip(bar_widths(diff), rows)]
        out.append(f'<h3>{html.escape(diff.stage)}: {len(diff.changes):,} window(s) change</h3>')
        out.append(_table(f"plan-{diff.stage}", table, raw={"bars"}))
        columns, rows = key_rows(diff)
        if rows:
            out.append(f'<h4>Sum of changes per key</h4>{_table(f"plan-keys-{diff.stage}", [dict(zip(columns, r)) for r in rows])}')
    return "\n".join(out)


def _bars(old: float, new: float) -> str:
    """Old (grey) against new (blue), widths in pixels (`plan_table.bar_widths`)."""
    def bar(width: float, kind: str) -> str:
        return f'<span class="bar {kind}" style="width:{width:.0f}px"></span>'

    return f'<span class="bars">{bar(old, "old")}{bar(new, "new")}</span>'


@app.get("/", response_class=HTMLResponse)
async def page(request: Request, pipeline: str | None = None, stage: str | None = None, key: str = "",
               event_from: str = "", event_to: str = "") -> Response:
    import starlette.concurrency

    # Reading and drawing are blocking work: keep them off the api-server's event loop.
    body = await starlette.concurrency.run_in_threadpool(
        render_page, pipeline, stage, key, event_from, event_to, _warehouse(), _access(request).pipelines)
    return HTMLResponse(body)


def _readable_specs(readable: Sequence[str] | None) -> dict[str, Any]:
    from dataflow_core.airflow.plugin.explorer import pipelines

    specs = pipelines()
    return specs if readable is None else {n: s for n, s in specs.items() if n in set(readable)}


def render_page(pipeline: str | None, stage: str | None, key: str, event_from: str, event_to: str,
                warehouse: str | None, readable: Sequence[str] | None = None) -> str:
    """The explorer's page over the pipelines in `readable` (the caller's; None: all)."""
    from dataflow_core.airflow.plugin.explorer import key_view, search_keys, stage_names

    specs = _readable_specs(readable)
    if not specs:
        return _document("Pane explorer", '<p class="error" id="error">No pipelines are registered.</p>')
    pipeline = pipeline if pipeline in specs else next(iter(specs))
    spec = specs[pipeline]
    stages = stage_names(spec)
    stage = stage if stage in stages else stages[0]
    error = ""
    view = None
    suggestions: list[dict[str, Any]] = []
    try:
        suggestions = search_keys(spec, stage, "", warehouse)
        if key:
            view = key_view(pipeline, stage, key, event_from or None, event_to or None, warehouse)
    except DataflowError as exc:
        error = str(exc)
    form = _form(list(specs), pipeline, stages, stage, key, view, event_from, event_to, suggestions)
    parts = [form]
    if error:
        parts.append(f'<p class="error" id="error">{html.escape(error)}</p>')
    if view is None and not error:
        parts.append(_key_list(pipeline, stage, suggestions))
    if view is not None:
        c = view.counts
        parts.append(
            f'<h2>Key {html.escape(view.key)} <small>{view.range_text[0]} to {view.range_text[1]}</small></h2>'
            + _counts(c)
            + (f'<p class="hint" id="elements-note">{html.escape(view.note)}</p>' if view.note else "")
            + f'<div id="diagram" data-panes="{c["panes"]}" data-retractions="{c["retractions"]}" '
            f'data-elements="{c["elements"]}" data-watermark-steps="{c["watermark_steps"]}">{view.svg}</div>'
            '<p class="hint">Hover over a pane, an element or a watermark mark for its value and times '
            '(labels that would overlap another are left out).</p>'
            f'<h3>Results ({len(view.results)} rows, table {html.escape(layout.results(view.stage))})</h3>'
            + _table("results", view.results)
            + f'<h3>Pane log ({len(view.panes)} rows, table {html.escape(layout.panes(view.stage))})</h3>'
            + _table("pane-log", view.panes, row_class=lambda r: "retraction" if r.get("is_retraction") else "pane")
        )
    return _document("Pane explorer", "\n".join(parts))


def _counts(c: dict[str, int]) -> str:
    """Rows read split as the runs' ledgers split them, so a count never mixes what was
    aggregated with duplicates and quarantined rows."""
    rows = (f'<span id="count-read">{c["read"]:,}</span> rows read: '
            f'<span id="count-accepted">{c["accepted"]:,}</span> accepted, '
            f'<span id="count-duplicates">{c["duplicates"]:,}</span> duplicates, '
            f'<span id="count-quarantined">{c["quarantined"]:,}</span> quarantined')
    return (f'<p id="counts">{rows}; {c["panes"]:,} panes, {c["retractions"]:,} retractions; '
            f'{c["watermark_steps"]:,} watermark steps</p>')


def _form(names: Sequence[str], pipeline: str, stages: Sequence[str], stage: str, key: str, view: Any,
          event_from: str, event_to: str, suggestions: list[dict[str, Any]]) -> str:
    def options(values: Sequence[str], chosen: str) -> str:
        return "".join(f'<option value="{html.escape(v)}"{" selected" if v == chosen else ""}>{html.escape(v)}</option>'
                       for v in values)

    shown_from = event_from or (view.range_text[0] if view else "")
    shown_to = event_to or (view.range_text[1] if view else "")
    datalist = "".join(f'<option value="{html.escape(str(s["key"]))}">' for s in suggestions)
    return f"""
<form id="explorer" method="get" action="">
  <label>Pipeline <select name="pipeline" id="pipeline" onchange="this.form.key.value='';this.form.submit()">{options(names, pipeline)}</select></label>
  <label>Stage <select name="stage" id="stage" onchange="this.form.key.value='';this.form.submit()">{options(stages, stage)}</select></label>
  <label>Key <input name="key" id="key" list="keys" value="{html.escape(key)}" placeholder="search keys" autocomplete="off"></label>
  <datalist id="keys">{datalist}</datalist>
  <label>From <input name="event_from" id="event_from" value="{html.escape(shown_from)}" placeholder="2024-05-01T00:00:00Z" size="24"></label>
  <label>To <input name="event_to" id="event_to" value="{html.escape(shown_to)}" placeholder="empty: up to 12 h of the key's windows" size="24"></label>
  <button type="submit" id="show">Show</button>
  <span class="hint">event time, UTC, ISO-8601; empty: the key's windows</span>
</form>
<script>
const input = document.getElementById('key');
let timer = null;
input.addEventListener('input', () => {{
  clearTimeout(timer);
  timer = setTimeout(async () => {{
    const params = new URLSearchParams({{pipeline: document.getElementById('pipeline').value,
                                        stage: document.getElementById('stage').value, q: input.value}});
    const response = await fetch('keys?' + params);
    if (!response.ok) return;
    const data = await response.json();
    const list = document.getElementById('keys');
    list.innerHTML = '';
    for (const k of data.keys) {{ const o = document.createElement('option'); o.value = k.key;
      o.label = k.panes + ' panes'; list.appendChild(o); }}
  }}, 200);
}});
</script>"""


def _key_list(pipeline: str, stage: str, suggestions: list[dict[str, Any]]) -> str:
    if not suggestions:
        return '<p id="no-keys">No panes yet for this stage: run a backfill or a micro-batch first.</p>'
    items = "".join(
        f'<li><a href="?{html.escape(urlencode({"pipeline": pipeline, "stage": stage, "key": s["key"]}))}">'
        f'{html.escape(str(s["key"]))}</a> <small>{s["panes"]} panes, {s["retractions"]} retractions</small></li>'
        for s in suggestions)
    return f'<h3>Busiest keys</h3><ul id="key-list">{items}</ul>'


def _cell(value: Any) -> str:
    if value is None:
        return '<span class="null">NULL</span>'
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return html.escape(value.isoformat(sep=" "))
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp
        return _cell(value.to_pydatetime())
    if isinstance(value, float) and value != value:
        return '<span class="null">NULL</span>'
    return html.escape(str(value))


def _table(table_id: str, rows: list[dict[str, Any]], row_class=None, raw: set[str] = frozenset()) -> str:
    """Rows as an HTML table; the columns in `raw` hold HTML of ours, not escaped."""
    if not rows:
        return f'<table id="{table_id}"><tr><td>no rows</td></tr></table>'
    columns = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        f'<tr class="{row_class(r) if row_class else "row"}">'
        + "".join(f"<td>{r[c] if c in raw else _cell(r[c])}</td>" for c in columns) + "</tr>" for r in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _document(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 16px; color: #222; }}
form label {{ margin-right: 12px; }}
input, select, button {{ font-size: 14px; padding: 3px 6px; }}
.hint {{ color: #666; font-size: 12px; }}
.error {{ color: #b00020; font-weight: 600; }}
#diagram svg {{ max-width: 100%; height: auto; border: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 13px; margin-bottom: 16px; }}
th, td {{ border: 1px solid #ddd; padding: 2px 6px; text-align: left; white-space: nowrap; }}
tr.retraction td {{ color: #555; font-style: italic; }}
.null {{ color: #999; }}
.bars {{ display: inline-flex; flex-direction: column; gap: 1px; }}
.bar {{ display: inline-block; height: 5px; min-width: 1px; }}
.bar.old {{ background: #9e9e9e; }} .bar.new {{ background: #1565c0; }}
.status-planned {{ color: #b26a00; }} .status-applied {{ color: #2e7d32; }} .status-rejected {{ color: #b00020; }}
</style></head>
<body><h1>{html.escape(title)} <small class="hint"><a href="./" id="explorer-link">Pane explorer</a> ·
<a href="plan" id="plans-link">Backfill plans</a> ·
<a href="data-docs/index.html" id="data-docs-link">Data Docs</a></small></h1>
{body}
</body></html>"""
