"""Delta Lake's jars, resolved from Maven once and then reused from a local cache.

`delta-spark` on PyPI holds only the Python API; the engine is a set of JVM jars.
Resolving them through `spark.jars.packages` on every Spark start costs tens of
seconds and needs the network, so `make setup` (`python -m dataflow_core.spark.platform.jars`)
fetches them once into `.cache/` and writes a manifest of the jar files; `get_spark` then
passes those files as `spark.jars`.

What to fetch is pinned, as requirements.lock pins the Python packages: `delta-jars.lock`
(beside this module) lists the jars Delta needs beyond those pyspark ships, each with its
sha256, for one Delta coordinate. Those are downloaded straight from the repository, side by
side, and checked. Without a lock for the installed coordinate (pyspark or delta-spark
changed) Spark's own Ivy resolves the dependency tree, as `make lock` does to write the lock.

The Maven artifact follows the installed pyspark: delta-spark 4.x publishes one
artifact per Spark minor version, `io.delta:delta-spark_<spark major.minor>_2.13`.

Every step takes a `JarSet`, Delta's by default: the S3A connector's jars (`s3a.py`, for a
warehouse on S3) are a second set, locked, fetched and cached the same way.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Iterator

from dataflow_core.errors import DataflowError
from dataflow_core.paths import cache_dir, setup_step  # cache_dir re-exported: the one cache
from dataflow_core.spark.platform import ivy
from dataflow_core.spark.platform.java import check_java

SCALA_VERSION = "2.13"
DEFAULT_REPOSITORY = "https://repo1.maven.org/maven2/"
DEFAULT_TIMEOUT_S = 600.0
MANIFEST_NAME = "delta-jars.json"
LOCK_FILE = Path(__file__).with_name("delta-jars.lock")


@dataclass(frozen=True)
class JarManifest:
    """What `make setup` resolved: the coordinate, where from, and the jar files to load."""

    coordinate: str
    repository: str
    jars: list[str]  # absolute paths passed to spark.jars
    provided_by_spark: list[str]  # coordinates left out: pyspark already ships that artifact


@dataclass(frozen=True)
class JarSet:
    """One set of jars resolved, locked and cached together: Delta's (always), the S3A
    connector's (`s3a.py`, only for a warehouse on object storage)."""

    label: str  # names the set in messages
    coordinate: str  # what Ivy resolves: one or more Maven coordinates, comma-separated
    lock_file: Path
    manifest_name: str
    excludes: str = ""  # group:artifact pairs Ivy leaves out (spark.jars.excludes)


def delta_set() -> JarSet:
    """Delta's jars for the installed pyspark and delta-spark (LOCK_FILE read at call time)."""
    return JarSet("Delta jars", delta_coordinate(), LOCK_FILE, MANIFEST_NAME)


@dataclass(frozen=True)
class LockedJar:
    """One jar of the lock: where it is in a Maven repository, and its content's hash."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.group}_{self.artifact}-{self.version}.jar"  # Ivy's retrieve pattern

    def url(self, repository: str) -> str:
        path = f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"
        return repository.rstrip("/") + "/" + path


def repository_url() -> str:
    """`$DATAFLOW_MAVEN_REPO` (a Maven mirror), else Maven Central."""
    return os.environ.get("DATAFLOW_MAVEN_REPO") or DEFAULT_REPOSITORY


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark  # local import: keeps `dataflow --help` fast

    return Path(pyspark.__file__).resolve().parent


def delta_coordinate() -> str:
    """Maven coordinate of the Delta jar matching the installed pyspark and delta-spark."""
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_{SCALA_VERSION}:{installed_version('delta-spark')}"


def read_manifest(cache: Path | None = None, jar_set: JarSet | None = None) -> JarManifest | None:
    """The cached manifest if it matches the installed versions and its jars exist."""
    jar_set = jar_set or delta_set()
    path = (cache or cache_dir()) / jar_set.manifest_name
    try:
        manifest = JarManifest(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if manifest.coordinate != jar_set.coordinate:
        return None
    if not manifest.jars or not all(Path(jar).is_file() for jar in manifest.jars):
        return None
    return manifest


def delta_jars(
    cache: Path | None = None, repository: str | None = None, timeout: float | None = None,
    jar_set: JarSet | None = None,
) -> list[str]:
    """Jar files for `spark.jars`: from the cache, resolving them first if it is missing."""
    cache = cache or cache_dir()
    manifest = read_manifest(cache, jar_set)
    if manifest is None:
        if timeout is None:
            timeout = float(os.environ.get("DATAFLOW_JAR_RESOLVE_TIMEOUT", "300"))
        manifest = resolve_jars(cache, repository, timeout, jar_set=jar_set)
    return manifest.jars


def resolve_jars(
    cache: Path | None = None,
    repository: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    force: bool = False,
    use_lock: bool = True,
    jar_set: JarSet | None = None,
) -> JarManifest:
    """Fetch the Delta jars into `cache` and write the manifest: the locked jars when the
    lock is for the installed coordinate (and `use_lock`), else whatever Spark's Ivy resolves.

    Raises DataflowError (one line, says to run `make setup`) when the repository is
    unreachable, the artifact is unknown, a jar is not what the lock says or `timeout`
    seconds pass.
    """
    cache = (cache or cache_dir()).resolve()
    repository = repository or repository_url()
    jar_set = jar_set or delta_set()
    coordinate = jar_set.coordinate
    cache.mkdir(parents=True, exist_ok=True)
    with _exclusive(cache / "delta-jars.flock"):  # one lock for every set: they share Ivy's cache
        manifest = None if force else read_manifest(cache, jar_set)
        if manifest is not None:
            return manifest  # another process resolved them while we waited
        locked = read_lock(jar_set.lock_file) if use_lock else None
        if locked is not None and locked[0] == coordinate:
            manifest = _download(cache, repository, jar_set, locked[1], locked[2], timeout)
        else:
            try:
                found, provided = ivy.resolve(coordinate, jar_set.excludes, _ivy_dir(cache, jar_set), repository,
                                              spark_home(), timeout)
            except ivy.IvyFailed as exc:
                raise _failure(jar_set, cache, repository, str(exc)) from None
            manifest = JarManifest(coordinate, repository, found, provided)
        (cache / jar_set.manifest_name).write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    return manifest


def read_lock(path: Path | None = None) -> tuple[str, list[LockedJar], list[str]] | None:
    """The lock's coordinate, its jars and the coordinates it leaves to pyspark; None when
    there is no lock."""
    path = path or LOCK_FILE
    try:
        lock = json.loads(path.read_text())
    except OSError:
        return None
    except ValueError as exc:
        raise DataflowError(f"{path} is not valid JSON ({exc}): write it again with `make lock`") from None
    return lock["coordinate"], [LockedJar(**jar) for jar in lock["jars"]], lock["provided_by_spark"]


def _download(cache: Path, repository: str, jar_set: JarSet, locked: list[LockedJar], provided: list[str],
              timeout: float) -> JarManifest:
    """The locked jars, straight from the repository, side by side, each checked against
    its sha256 before it takes its place."""
    coordinate = jar_set.coordinate
    folder = cache / "jars"
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    started = time.monotonic()

    def fetch(jar: LockedJar) -> str:
        target = folder / jar.file_name
        if target.is_file() and _sha256(target) == jar.sha256:
            return str(target)
        url = jar.url(repository)
        partial = target.with_suffix(f".{os.getpid()}.part")
        try:
            with urllib.request.urlopen(url, timeout=max(deadline - time.monotonic(), 0.001)) as response, \
                    open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:  # URLError and HTTPError are OSErrors, socket timeouts too
            partial.unlink(missing_ok=True)
            if isinstance(exc, urllib.error.HTTPError):
                reason = f"{url}: HTTP {exc.code}"
            else:
                reason = str(getattr(exc, "reason", exc))
                if isinstance(exc, TimeoutError) or "timed out" in reason:
                    reason = f"no answer within {timeout:.0f}s"
            raise _failure(jar_set, cache, repository, reason[:200]) from None
        got = _sha256(partial)
        if got != jar.sha256:
            partial.unlink(missing_ok=True)
            raise _failure(jar_set, cache, repository,
                           f"{url} has sha256 {got}, but {jar_set.lock_file.name} says {jar.sha256}")
        partial.replace(target)
        return str(target)

    with ThreadPoolExecutor(max_workers=8) as pool:
        jars = sorted(pool.map(fetch, locked))
    print(f"fetched {len(jars)} locked jars of {jar_set.label} ({coordinate}) from {repository} in "
          f"{time.monotonic() - started:.0f}s", file=sys.stderr)
    return JarManifest(coordinate, repository, jars, list(provided))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_lock(manifest: JarManifest, path: Path | None = None) -> None:
    """The lock for an Ivy resolution's manifest: each jar's coordinate and sha256."""
    path = path or LOCK_FILE
    jars = []
    for jar in map(Path, manifest.jars):
        group, artifact, version = _coordinate_of(jar.name)
        jars.append({"group": group, "artifact": artifact, "version": version, "sha256": _sha256(jar)})
    lock = {"coordinate": manifest.coordinate, "jars": jars, "provided_by_spark": manifest.provided_by_spark}
    path.write_text(json.dumps(lock, indent=2) + "\n")


def _coordinate_of(file_name: str) -> tuple[str, str, str]:
    """(group, artifact, version) of a jar named by Ivy's retrieve pattern, whose group has
    no '_' and whose version starts with a digit."""
    match = re.fullmatch(r"([^_]+)_(.+?)-(\d[^-]*(?:-[^-]+)*)\.jar", file_name)
    if match is None:
        raise DataflowError(f"cannot tell the Maven coordinate of jar {file_name}")
    return match.group(1), match.group(2), match.group(3)


def _failure(jar_set: JarSet, cache: Path, repository: str, reason: str) -> DataflowError:
    return DataflowError(
        f"{jar_set.label} {jar_set.coordinate} are not cached in {cache} and could not be resolved "
        f"from {repository} ({reason}): run {setup_step(__name__)} on a machine that reaches Maven Central "
        "(or set DATAFLOW_MAVEN_REPO to a "
        "reachable Maven mirror)"
    )


def _ivy_dir(cache: Path, jar_set: JarSet) -> Path:
    """Ivy's folder for one set: each retrieves into its own `jars/`, which the next
    resolution of that set empties, so one set's resolution never takes another's jars."""
    return cache / ("ivy" if jar_set.manifest_name == MANIFEST_NAME else f"ivy-{Path(jar_set.manifest_name).stem}")


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Serialise resolutions (two test runs starting at once share one Ivy cache)."""
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    """`make setup` step: check Java, then resolve and cache the Delta jars once."""
    parser = argparse.ArgumentParser(
        prog="python -m dataflow_core.spark.platform.jars",
        description="Check Java and cache Delta Lake's jars for the installed pyspark.",
    )
    parser.add_argument("--force", action="store_true", help="resolve again even if cached")
    parser.add_argument("--lock", action="store_true",
                        help=f"resolve with Spark's Ivy and write {LOCK_FILE.name} from what it found (`make lock`)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")
    args = parser.parse_args(argv)
    try:
        java = check_java()
        cache = cache_dir()
        if args.lock:  # Ivy's resolution is the manifest too: nothing to fetch again
            print(f"resolving {delta_coordinate()} with Ivy into {cache} ...", file=sys.stderr)
            manifest = resolve_jars(cache, timeout=args.timeout, force=True, use_lock=False)
            write_lock(manifest)
            print(f"wrote {LOCK_FILE}", file=sys.stderr)
        else:
            manifest = None if args.force else read_manifest(cache)
            if manifest is None:
                print(f"fetching {delta_coordinate()} into {cache} ...", file=sys.stderr)
                manifest = resolve_jars(cache, timeout=args.timeout, force=args.force)
    except DataflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"Java {java} OK; {manifest.coordinate}: {len(manifest.jars)} jars cached in "
        f"{cache} ({len(manifest.provided_by_spark)} more already ship with pyspark)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
