"""Spark's own Ivy resolving a Maven coordinate's jars: the way to a jar set without a lock
(`jars.resolve_jars`), and how `make lock` learns what to pin.

`spark-submit --packages` on an empty script resolves the dependency tree into one folder
with exactly one Maven repository configured; the jars pyspark already ships are left out
of what it retrieved.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.sax.saxutils import quoteattr


class IvyFailed(Exception):
    """Ivy could not resolve the coordinate; the message is the most telling reason."""


def resolve(coordinate: str, excludes: str, ivy_dir: Path, repository: str, spark_home: Path,
            timeout: float) -> tuple[list[str], list[str]]:
    """The jars Ivy retrieves for `coordinate` into `ivy_dir`, and the coordinates it left
    out because pyspark ships them (jar paths, coordinates)."""
    output = _run(coordinate, excludes, ivy_dir, repository, spark_home, timeout)
    return _retrieved(ivy_dir, output, spark_home)


def _run(coordinate: str, excludes: str, ivy_dir: Path, repository: str, home: Path, timeout: float) -> str:
    """Run `spark-submit --packages` on an empty script: Spark's Ivy resolves and copies jars."""
    cache = ivy_dir.parent
    shutil.rmtree(ivy_dir / "jars", ignore_errors=True)  # only this resolution's jars stay
    settings = cache / "ivysettings.xml"
    settings.write_text(_settings(ivy_dir / "cache", repository))
    noop = cache / "resolve_noop.py"
    noop.write_text("# Spark resolves --packages before running this empty script.\n")
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    command = [
        str(home / "bin" / "spark-submit"),
        "--conf", f"spark.jars.ivySettings={settings}",
        "--conf", f"spark.jars.ivy={ivy_dir}",
        *(["--conf", f"spark.jars.excludes={excludes}"] if excludes else []),
        "--packages", coordinate,
        str(noop),
    ]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # so a timeout can stop the JVM and its children together
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise IvyFailed(f"no answer within {timeout:.0f}s") from None
    if process.returncode != 0:
        raise IvyFailed(_reason(output, process.returncode))
    print(
        f"resolved {coordinate} from {repository} in {time.monotonic() - started:.0f}s",
        file=sys.stderr,
    )
    return output


def _settings(ivy_cache: Path, repository: str) -> str:
    """Ivy settings with exactly one Maven repository, so nothing else is consulted."""
    return (
        "<ivysettings>\n"
        '  <settings defaultResolver="main"/>\n'
        f"  <caches defaultCacheDir={quoteattr(str(ivy_cache))}/>\n"
        "  <resolvers>\n"
        '    <chain name="main">\n'
        f'      <ibiblio name="maven" m2compatible="true" root={quoteattr(repository)}/>\n'
        "    </chain>\n"
        "  </resolvers>\n"
        "</ivysettings>\n"
    )


def _reason(output: str, returncode: int) -> str:
    """The most telling line of a failed Ivy run."""
    lines = [line.strip(" :\t") for line in output.splitlines() if line.strip(" :\t")]
    for marker in ("not found", "UNRESOLVED", "Connection refused", "UnknownHost", "timed out"):
        for line in lines:
            if marker.lower() in line.lower() and "::::" not in line:
                return line[:200]
    return lines[-1][:200] if lines else f"spark-submit exited with code {returncode}"


def _retrieved(ivy_dir: Path, output: str, home: Path) -> tuple[list[str], list[str]]:
    """List the retrieved jars, leaving out artifacts pyspark already ships.

    Spark's own jars come first on the driver classpath anyway, so a second, older
    copy (jackson, hadoop, parquet, log4j...) would only be dead weight and a source
    of confusion.
    """
    retrieved = sorted((ivy_dir / "jars").glob("*.jar"))
    if not retrieved:
        raise IvyFailed("Ivy retrieved no jar files")
    found = {f"{org}_{artifact}-{rev}": (org, artifact, rev)
             for org, artifact, rev in re.findall(r"found (\S+)#(\S+);(\S+) in", output)}
    shipped = {jar.name for jar in (home / "jars").glob("*.jar")}
    jars: list[str] = []
    provided: list[str] = []
    for jar in retrieved:
        org, artifact, rev = next((coord for stem, coord in found.items() if jar.name.startswith(stem)),
                                  (None, None, None))
        if artifact is not None and any(re.match(rf"{re.escape(artifact)}-\d", name) for name in shipped):
            provided.append(f"{org}:{artifact}:{rev}")
        else:
            jars.append(str(jar))
    return jars, provided
