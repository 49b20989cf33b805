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
