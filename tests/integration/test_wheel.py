"""The built package works without its checkout: the wheel (built from the sdist, as an
index would build it) installed into a fresh venv that sees the shared venv's third-party
packages and nothing of the checkout, run from a folder outside it.

There the `dataflow` command finds a pipeline of the user's own (`$DATAFLOW_PIPELINES`),
checks it, generates a tiny table and backfills it (the expectation suite and the log stores'
Java sources come from the package; the log stores compile on first use into the user's
cache, `~/.cache/dataflow`), and Airflow lists the product's plugin once, found through the
`airflow.plugins` entry point, even with the plugins folder also configured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from dataflow_core.spark.platform.jars import MANIFEST_NAME, cache_dir

ROOT = Path(__file__).resolve().parents[2]
DIST = "dataflow_lakehouse"

USER_PIPELINE = '''
from dataflow_core.api import AfterWatermark, FixedWindows, SumFn, pipeline, stage

pipeline(
    "tiny_billing", input_table="tiny", partition_column="event_date", quality_suite="video_events",
    where="ad_id IS NOT NULL", key="ad_id", value="CAST(watch_seconds AS DECIMAL(18,3))",
    stages=[stage("tiny_billing", FixedWindows("1h"), SumFn(), trigger=AfterWatermark(), accumulation="discarding",
                  value_type="decimal(28,3)")],
)
'''

GENERATE_THEN_BACKFILL = """
import sys
from dataflow_core.cli import main
for argv in (["generate", "--rows", "300", "--seed", "5", "--table", "tiny", "--span-hours", "2"],
             ["backfill", "--pipeline", "tiny_billing", "--start", "2024-05-01", "--end", "2024-05-02"]):
    print("$ dataflow " + " ".join(argv), flush=True)
    if main(argv):
        sys.exit(1)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `uv build` makes from the sdist (offline: setuptools from uv's cache, as
    `make setup` installs the project), of a copy of the sources: setuptools writes
    `*.egg-info` into the tree it builds, and that metadata on a checkout's path would be a
    second distribution to Airflow, which then finds the plugin's entry point twice."""
    out, source = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "dataflow_core", source / "dataflow_core", ignore=shutil.ignore_patterns("__pycache__"))
    uv = Path(sys.executable).with_name("uv")
    built = subprocess.run([str(uv), "build", "--offline", "--quiet", "--out-dir", str(out), str(source)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob(f"{DIST}-*.whl")
    return found


def _shared_packages(folder: Path) -> Path:
    """The shared venv's site-packages as symlinks, minus this project's own install (its
    editable finder and metadata): third-party packages only."""
    folder.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith((DIST, f"__editable__.{DIST}", f"__editable___{DIST}")):
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with the wheel installed, Airflow and the rest from the shared venv."""
    base = tmp_path_factory.mktemp("installed")
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=60)
    site = Path(subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, env=_clean_env()).stdout.strip())
    (site / "shared.pth").write_text(f"{_shared_packages(base / 'shared')}\n")
    uv = Path(sys.executable).with_name("uv")
    done = subprocess.run([str(uv), "pip", "install", "--offline", "--quiet", "--no-deps",
                           "--python", str(env / "bin" / "python"), str(wheel)],
                          capture_output=True, text=True, timeout=120, env=_clean_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return env


def _clean_env(**more: str) -> dict[str, str]:
    """This process's environment without anything naming the checkout or a setting of the
    suite's: a user's shell on a machine where the package was just installed."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DATAFLOW_", "AIRFLOW", "PYSPARK_", "SPARK_", "VIRTUAL_ENV"))
           and key not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONUNBUFFERED="1", **more)
    return env


def test_the_wheel_ships_the_package_and_its_data_only(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"dataflow_core", f"{DIST}-0.1.0.dist-info"}
    for data in ("dataflow_core/py.typed", "dataflow_core/expectations/video_events.json",
                 "dataflow_core/expectations/dataflow_results.json",
                 "dataflow_core/spark/platform/logstore_java/io/dataflow/local/HardLinkLogStore.java",
                 "dataflow_core/spark/platform/localfs_java/NioLocalFs.java",
                 "dataflow_core/spark/platform/delta-jars.lock", "dataflow_core/examples/pipelines/billing.py",
                 "dataflow_core/airflow/plugin/folder/dataflow_plugin.py"):
        assert data in names, data
    entry_points = zipfile.ZipFile(wheel).read(f"{DIST}-0.1.0.dist-info/entry_points.txt").decode()
    assert "[airflow.plugins]" in entry_points and "dataflow_core.airflow.plugin.airflow_plugin:DataflowPlugin" in entry_points
    metadata = zipfile.ZipFile(wheel).read(f"{DIST}-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Python: <3.12,>=3.11" in metadata


def test_the_installed_package_runs_a_users_pipeline_and_airflow_finds_its_plugin(venv: Path, tmp_path: Path):
    work = tmp_path / "work"  # the user's folder: their pipeline module, their warehouse
    work.mkdir()
    (work / "tiny_pipelines.py").write_text(USER_PIPELINE)
    home = tmp_path / "home"
    user_cache = home / ".cache" / "dataflow"
    user_cache.mkdir(parents=True)
    # The Delta jars as resolved before (their manifest names jar files by absolute path), as
    # a mirror or an earlier run would give them; not the local file system's jar nor the log
    # stores', which this run compiles.
    shutil.copy(cache_dir() / MANIFEST_NAME, user_cache / MANIFEST_NAME)
    env = _clean_env(HOME=str(home), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
                     PYTHONPATH=str(work), DATAFLOW_PIPELINES="tiny_pipelines",
                     DATAFLOW_WAREHOUSE=str(work / "warehouse"), DATAFLOW_SPARK_MASTER="local[1]",
                     AIRFLOW_HOME=str(tmp_path / "airflow"))
    env.pop("XDG_CACHE_HOME", None)

    def run(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
        done = subprocess.run(list(argv), cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        return done

    where = run(str(venv / "bin" / "python"), "-c",
                "import sys, dataflow_core; print(dataflow_core.__file__); print('\\n'.join(sys.path))").stdout.splitlines()
    assert where[0].startswith(str(venv)), where[0]
    assert not [p for p in where[1:] if p and (Path(p) / "dataflow_core").exists() and not p.startswith(str(venv))], where

    dataflow = str(venv / "bin" / "dataflow")
    assert "tiny_billing" in run(dataflow, "pipelines").stdout
    # `dataflow generate`, then `dataflow backfill` in the same process: one JVM for both.
    generated = run(str(venv / "bin" / "python"), "-c", GENERATE_THEN_BACKFILL, timeout=600)
    assert "wrote 300 rows to table tiny" in generated.stdout
    assert "compiling the product's dataflow-logstores.jar" in generated.stderr, generated.stderr[-2000:]
    for jar in ("logstores/*/dataflow-logstores.jar", "localfs/*/*.jar"):
        assert list(user_cache.glob(jar)), sorted(user_cache.rglob("*"))
    assert "tiny_billing" in run(dataflow, "check", "--pipeline", "tiny_billing").stdout
    counted = run(dataflow, "sql", "SELECT count(*) AS n FROM tiny_billing")
    words = counted.stdout.split()
    assert int(words[words.index("--") + 1]) > 0, counted.stdout  # the results rows of the backfill

    # The plugin through the entry point, once, with the plugins folder named as well.
    folder = next(venv.glob("lib/python*/site-packages/dataflow_core/airflow/plugin/folder"))
    env["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(folder)
    listed = run(str(venv / "bin" / "python"), "-m", "airflow", "plugins", "--output", "json", timeout=180)
    plugins = json.loads(listed.stdout[listed.stdout.index("["):])
    ours = [plugin for plugin in plugins if plugin["name"] == "dataflow"]
    assert len(ours) == 1, plugins
    assert "dataflow-lakehouse" in str(ours[0].get("source")), ours
    assert "already registered" not in listed.stdout + listed.stderr
