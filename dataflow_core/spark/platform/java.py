"""Check that a Java runtime Spark 4 can use (17 or newer) is installed.

Spark starts a JVM; without this check a missing or old Java shows up as a long,
confusing Py4J traceback instead of one line saying what to install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from dataflow_core.errors import DataflowError

MIN_JAVA = 17
_INSTALL_HINT = (
    "install OpenJDK 17 or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) "
    "and put it on PATH or set JAVA_HOME"
)


def java_executable() -> str:
    """The `java` Spark will run: `$JAVA_HOME/bin/java` if JAVA_HOME is set, else PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if not candidate.is_file():
            raise DataflowError(
                f"JAVA_HOME={java_home} has no bin/java: point JAVA_HOME at a Java "
                f"{MIN_JAVA}+ installation or unset it ({_INSTALL_HINT})"
            )
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise DataflowError(f"Java not found (Spark needs Java {MIN_JAVA}+): {_INSTALL_HINT}")
    return found


def parse_java_major(version_output: str) -> int:
    """Major version from `java -version` output ('1.8.0_392' -> 8, '17.0.15' -> 17)."""
    match = re.search(r'version "([^"]+)"', version_output)
    if not match:
        raise ValueError(f"no version in java -version output: {version_output[:200]!r}")
    parts = match.group(1).split(".")
    major = int(re.match(r"\d+", parts[0]).group())  # type: ignore[union-attr]
    if major == 1 and len(parts) > 1:  # Java 8 and older: 1.8.0_xxx
        major = int(re.match(r"\d+", parts[1]).group())  # type: ignore[union-attr]
    return major


def check_java() -> int:
    """Return the Java major version, or raise DataflowError if Java is missing or < 17."""
    java = java_executable()
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataflowError(f"could not run `{java} -version` ({exc}): {_INSTALL_HINT}") from exc
    output = result.stderr + result.stdout
    try:
        major = parse_java_major(output)
    except ValueError as exc:
        raise DataflowError(f"could not read the Java version from `{java} -version`: {exc}") from exc
    if major < MIN_JAVA:
        raise DataflowError(
            f"{java} is Java {major}, but Spark 4 needs Java {MIN_JAVA}+: {_INSTALL_HINT}"
        )
    return major
