"""Where the product's own files are, the same whether it runs from its checkout or from an
installed wheel: data shipped inside the package is read next to the modules (package data),
and what is built or fetched on first use goes to one cache.

The cache is `$DATAFLOW_CACHE_DIR`; else a checkout's `.cache/` (what `make setup` fills and
the tests expect); else, installed, the user's cache (`$XDG_CACHE_HOME/dataflow`, by default
`~/.cache/dataflow`), since site-packages may be read-only and is shared by every user."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "DATAFLOW_CACHE_DIR"
PACKAGE = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The source checkout the package runs from, or None when it is installed (a wheel in
    site-packages has no pyproject.toml beside it)."""
    root = PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() else None


def cache_dir() -> Path:
    """`$DATAFLOW_CACHE_DIR`, else `<checkout>/.cache`, else `~/.cache/dataflow` (XDG)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    root = checkout_root()
    if root is not None:
        return root / ".cache"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "dataflow"


def package_data(*parts: str) -> Path:
    """A file or folder shipped inside the package (pyproject's package-data)."""
    return PACKAGE.joinpath(*parts)


def setup_step(module: str) -> str:
    """How a message tells the user to run one setup step: `make setup` in a checkout (it runs
    every step), the step's own module when installed (there is no Makefile)."""
    return "`make setup`" if checkout_root() is not None else f"`python -m {module}`"
