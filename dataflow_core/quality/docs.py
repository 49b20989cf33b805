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
import re
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


OFFLINE_MARK = "<!-- dataflow: local assets -->"
# GE's logo, loaded from its web-assets bucket with the data context's id in the query (a
# request to the internet from every page view): the site's own copy instead.
_GE_IMAGE = re.compile(r'"https://great-expectations-web-assets\.s3\.[^"/]*/([A-Za-z0-9_.-]+)(?:\?[^"]*)?"')
VENDOR = "static/vendor"


_INTEGRITY = re.compile(r'\s+integrity="[^"]*"')


def make_offline(site: Path | str, assets: Path | None = None) -> int:
    """Make the Data Docs site fully styled without internet: GE's pages load Bootstrap,
    jQuery, bootstrap-table, Font Awesome and Vega from CDNs, so offline they are unstyled
    and their tables blank. Copies the local copies of those files (`assets.py`, fetched by
    `make setup`) into the site's `static/vendor/` and points every page's links at them, so
    the site works from disk, through the Airflow plugin and on a closed network alike.
    Without the local copies (setup not run) the pages keep their CDN links. Returns how
    many pages were changed (pages already done are skipped)."""
    import shutil

    from dataflow_core.quality.assets import ASSETS, assets_dir, missing, package_dir

    site = Path(site)
    assets = assets or assets_dir()
    if not site.is_dir() or missing(assets):
        return 0
    target = site / VENDOR
    for folder in assets.iterdir():
        if folder.is_dir() and not (target / folder.name).is_dir():
            shutil.copytree(folder, target / folder.name, dirs_exist_ok=True)
    changed = 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        if OFFLINE_MARK in text:
            continue
        up = "../" * (len(page.relative_to(site).parts) - 1)
        for url, (spec, file) in ASSETS.items():
            text = text.replace(f'"{url}"', f'"{up}{VENDOR}/{package_dir(spec)}/{file}"')
        # Same-origin copies: no CORS mode (which file:// pages cannot use for their scripts).
        text = text.replace(' crossorigin="anonymous"', "")
        # No integrity checks either: the plugin serves the site in a CSP sandbox (an opaque
        # origin), where a check of a script from the server itself fails; the copies were
        # checked against their packages' sha512 when fetched (`assets.fetch`).
        text = _INTEGRITY.sub("", text)
        text = _GE_IMAGE.sub(lambda m: f'"{up}static/images/{m.group(1)}"'
                             if (site / "static" / "images" / m.group(1)).is_file() else m.group(0), text)
        at = text.find("</head>")
        page.write_text((text[:at] + OFFLINE_MARK + text[at:]) if at >= 0 else text + OFFLINE_MARK, encoding="utf-8")
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
