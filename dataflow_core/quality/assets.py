"""The stylesheets, scripts and fonts Great Expectations' Data Docs load from CDNs, kept locally
so that the pages are fully styled without internet.

GE's page templates link Bootstrap, jQuery, bootstrap-table, Font Awesome, Vega and a few
more from CDNs (`ASSETS`: each URL with the npm package and file it comes from, exactly the
versions the URLs name). `make setup` (`python -m dataflow_core.quality.assets`) fetches those
packages once with `npm pack` (the registry's own client; each tarball's sha512 is checked
against `PACKAGES`, as delta-jars.lock pins the jars) and keeps only the files the pages use
in the cache's `data-docs-assets/` (`dataflow_core.paths.cache_dir`; or `$DATAFLOW_DOCS_ASSETS`). `make_offline` then copies them
into each site and points the pages at the copies.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from dataflow_core.paths import cache_dir

# npm package spec -> sha512 integrity of its tarball (as the registry gives it).
PACKAGES = {
    "bootstrap@4.3.1": "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
    "jquery@3.7.1": "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
    "popper.js@1.12.9": "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
    "bootstrap-datepicker@1.9.0":
        "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
    "@fortawesome/fontawesome-free@6.6.0":
        "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
    "bootstrap-table@1.19.1":
        "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
    "@forevolve/bootstrap-dark@1.1.0":
        "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
    "vega@5.33.1": "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw==",
    "vega-lite@5.23.0":
        "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==",
    "vega-embed@6.29.0":
        "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==",
}

# CDN URL in GE's templates -> (package, file in it).
ASSETS = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap@4.3.1", "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap@4.3.1", "dist/js/bootstrap.min.js"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery@3.7.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js@1.12.9", "dist/umd/popper.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("bootstrap-datepicker@1.9.0", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("bootstrap-datepicker@1.9.0", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        ("@fortawesome/fontawesome-free@6.6.0", "css/all.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        ("bootstrap-table@1.19.1", "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        ("bootstrap-table@1.19.1", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        ("bootstrap-table@1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    # 1.19.0 in GE's templates: the same stylesheet as 1.19.1's
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        ("bootstrap-table@1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        ("bootstrap-table@1.19.1", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark@1.1.0", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega@5.33.1", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite@5.23.0", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed@6.29.0", "build/vega-embed.min.js"),
}
# Folders a kept file refers to by relative path (Font Awesome's CSS loads ../webfonts/*).
EXTRA_FOLDERS = {"@fortawesome/fontawesome-free@6.6.0": ("webfonts/",)}
ENV = "DATAFLOW_DOCS_ASSETS"


def assets_dir() -> Path:
    configured = os.environ.get(ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return cache_dir() / "data-docs-assets"


def package_dir(spec: str) -> str:
    """A package spec as one folder name: `@fortawesome/fontawesome-free@6.6.0` ->
    `fortawesome-fontawesome-free@6.6.0`."""
    return spec.lstrip("@").replace("/", "-")


def missing(root: Path | None = None) -> list[str]:
    """The asset files not in the cache (empty: every page can be served offline)."""
    root = root or assets_dir()
    return [f"{package_dir(p)}/{f}" for p, f in ASSETS.values() if not (root / package_dir(p) / f).is_file()]


def _wanted(spec: str, member: str) -> bool:
    files = {f for p, f in ASSETS.values() if p == spec}
    return member in files or member.startswith(EXTRA_FOLDERS.get(spec, ()))


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(root: Path | None = None, say=print) -> int:
    """Fetches the packages whose files are missing with `npm pack`, checks their sha512 and
    keeps the files the pages use. Returns how many packages were fetched."""
    root = root or assets_dir()
    needed = sorted({p for p, f in ASSETS.values() if not (root / package_dir(p) / f).is_file()})
    if not needed:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("Data Docs assets: npm is missing (apt-get install npm); without them the "
                         "Data Docs pages load their styles from CDNs")
    with tempfile.TemporaryDirectory() as tmp:
        packed = subprocess.run([npm, "pack", "--json", "--pack-destination", tmp, *needed],
                                capture_output=True, text=True, cwd=tmp)
        if packed.returncode != 0:
            raise SystemExit(f"Data Docs assets: npm pack failed: {packed.stderr.strip().splitlines()[-1:]}")
        for entry, spec in zip(json.loads(packed.stdout), needed):
            tarball = Path(tmp) / entry["filename"]
            if _integrity(tarball) != PACKAGES[spec]:
                raise SystemExit(f"Data Docs assets: {spec}'s tarball does not match its pinned sha512")
            target = root / package_dir(spec)
            with tarfile.open(tarball) as archive:
                for member in archive.getmembers():
                    name = member.name.removeprefix("package/")
                    if member.isfile() and _wanted(spec, name) and ".." not in Path(name).parts:
                        out = target / name
                        out.parent.mkdir(parents=True, exist_ok=True)
                        out.write_bytes(archive.extractfile(member).read())
    say(f"Data Docs assets: {len(needed)} npm package(s) fetched into {root}")
    return len(needed)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    root = assets_dir()
    fetch(root)
    gone = missing(root)
    if gone:
        print(f"Data Docs assets: still missing {', '.join(gone)}", file=sys.stderr)
        return 1
    print(f"Data Docs assets: {len(ASSETS)} files for offline pages in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
