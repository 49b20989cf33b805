"""Where Great Expectations' Data Docs (HTML) are built, and one writer at a time.

Every quality gate validates through one file-backed GE project, so its Data Docs site
lists every gate run: `$DATAFLOW_DATA_DOCS` if set, else `<warehouse>/_data_docs` for a
local warehouse (a folder with no `_delta_log`, so it is not taken for a table), else
`./data_docs`. The site's front page is `<root>/gx/uncommitted/data_docs/local_site/index.html`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

DATA_DOCS_ENV = "DATAFLOW_DATA_DOCS"


def data_docs_root(warehouse: str | None = None) -> Path:
    configured = os.environ.get(DATA_DOCS_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    if warehouse and "://" not in warehouse:
        return Path(warehouse.removeprefix("file:")).expanduser().resolve() / "_data_docs"
    return Path("data_docs").resolve()


def site_index(root: Path | str) -> Path:
    return Path(root) / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"


OFFLINE_MARK = "<!-- dataflow: offline assets -->"
_OFFLINE_DIR = Path(__file__).with_name("offline")


def make_offline(site: Path | str) -> int:
    """Make the Data Docs site readable without internet: GE's pages load jQuery, Bootstrap
    and bootstrap-table from CDNs and draw their tables with them, so offline the index is
    blank. Copies a small stand-in (`offline/offline.js`, `offline.css`, shipped with this
    package) into the site's `static/dataflow/` and links it from every page right after the
    CDN scripts; online the CDN scripts win and the stand-in does nothing. Returns how many
    pages were changed (pages already done are skipped)."""
    import shutil

    site = Path(site)
    if not site.is_dir():
        return 0
    target = site / "static" / "dataflow"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("offline.js", "offline.css"):
        shutil.copyfile(_OFFLINE_DIR / name, target / name)
    changed = 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        if OFFLINE_MARK in text:
            continue
        up = "../" * (len(page.relative_to(site).parts) - 1)
        tags = (f'{OFFLINE_MARK}<link rel="stylesheet" href="{up}static/dataflow/offline.css">'
                f'<script src="{up}static/dataflow/offline.js"></script>')
        anchor = text.rfind('bootstrap-datepicker.min.js"></script>')
        if anchor >= 0:
            at = anchor + len('bootstrap-datepicker.min.js"></script>')
        else:
            at = text.find("</head>")
            if at < 0:
                continue
        page.write_text(text[:at] + tags + text[at:], encoding="utf-8")
        changed += 1
    return changed


@contextlib.contextmanager
def docs_lock(root: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive lock on the GE project at `root` (tasks of parallel runs share it)."""
    path = Path(root) / ".dataflow-docs.lock"
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
