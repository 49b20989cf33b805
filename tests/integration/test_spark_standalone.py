"""Jobs against a real Spark standalone cluster (one master, two workers on 127.0.0.1).

This is the path users take when they outgrow `local[*]`: the same job, only `--master`
changes. The master and the workers are started from the venv's pyspark with `spark-class`,
exactly as docker-compose.yml starts them, and stopped whatever happens. Two workers of one
core each mean two executor JVMs, so every shuffle and every per-key Python task really
crosses processes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.jvm_archive import SPARK_DEFAULTS

pytestmark = pytest.mark.integration

SPARK_CLASS = Path(sys.executable).with_name("spark-class")
START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 900
OUTPUT_TAIL_LINES = 60
WORKERS = 2


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _master_state(web_url: str) -> dict:
    with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
        return json.load(response)


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-OUTPUT_TAIL_LINES:])


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        # Own process group: stopping it also stops the JVM that spark-class execs.
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


class Cluster:
    """A master and its workers, started; `ready()` waits until every worker has registered
    (the fixture does not, so that the sample is written while the JVMs start)."""

    def __init__(self, master_url: str, web_url: str, work_dir: Path, logs: Path,
                 processes: dict[str, subprocess.Popen]) -> None:
        self.master_url = master_url
        self.web_url = web_url
        self.work_dir = work_dir
        self.logs = logs
        self.processes = processes

    def ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    pytest.fail(f"Spark {name} exited {process.returncode}:\n{_tail(self.logs / f'{name}.log')}")
            try:
                if _master_state(self.web_url).get("aliveworkers", 0) >= WORKERS:
                    return
            except (OSError, ValueError):
                # The master's UI is not up yet, or is listening before its pages are: for a
                # moment it answers `/json/` with an HTML page (a JSONDecodeError).
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(_tail(self.logs / f"worker{n}.log") for n in range(WORKERS))
                pytest.fail(f"{WORKERS} workers did not register with {self.master_url} within {START_TIMEOUT_S}s:\n"
                            f"{_tail(self.logs / 'master.log')}\n{logs}")
            time.sleep(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    assert SPARK_CLASS.exists(), f"no spark-class next to {sys.executable}: run `make setup` first"
    base = tmp_path_factory.mktemp("spark_standalone")
    port, web_port = _free_port(), _free_port()
    master_url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}"
    work_dir = base / "worker-work"
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(base),
        "PYSPARK_PYTHON": sys.executable,  # executors run the venv's Python
    }
    master = _start(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)],
        env, base / "master.log",
    )  # fmt: skip
    workers: list[subprocess.Popen] = []
    try:
        for n in range(WORKERS):
            workers.append(_start(
                [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker",
                 "--host", "127.0.0.1", "--cores", "1", "--memory", "2g",
                 "--webui-port", str(_free_port()), "--work-dir", str(work_dir), master_url],
                env, base / f"worker{n}.log",
            ))  # fmt: skip
        yield Cluster(master_url, web_url, work_dir, base,
                      {"master": master, **{f"worker{n}": w for n, w in enumerate(workers)}})
    finally:
        for worker in workers:
            _stop(worker)
        _stop(master)


def _job_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a job submitted to the cluster: none of the suite's DATAFLOW_
    settings (the job's arguments say it all), and extra Spark settings through
    spark-defaults.conf, as docs/deployment.md describes: a tiny sample needs a few shuffle
    partitions, not a cluster's default 200; the rest is the suite's settings for tiny data
    (tests/spark-conf)."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(SPARK_DEFAULTS.read_text() + "spark.sql.shuffle.partitions  4\n")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_CONF_DIR": str(conf_dir)}
    # The suite hands its defaults to drivers with --properties-file, which would win over
    # the folder's spark-defaults.conf.
    for name in ("DATAFLOW_WAREHOUSE", "DATAFLOW_SPARK_MASTER", "DATAFLOW_PIPELINES", "PYSPARK_SUBMIT_ARGS"):
        env.pop(name, None)
    return env


# --- the jobs submitted to the cluster: the demo job, then two backfills ---------------------

SAMPLE_ROWS = 1500  # about 150 rows of ads a day: hundreds of panes and retractions, and half the per-key work of 3000
DEMO_ROWS = 500  # the demo job's own sample: on a cluster its cost is the executors' start and its steps, not rows
RANGE = ["--start", "2024-05-01", "--end", "2024-05-03"]  # the sample's 48 hours
NOW = "2024-05-04T00:00:00Z"  # a batch's processing time, so both modes write the same panes
BACKFILLS = [  # billing as a batch; ad_sessions (two stages, retractions) replayed in arrival order
    ["--pipeline", "billing", *RANGE, "--now", NOW],
    ["--pipeline", "ad_sessions", *RANGE, "--replay", "--batch-interval", "5m"],
]
# table -> columns that name the run rather than the data (a run id is a fresh uuid per run)
TABLES = {
    "billing": ("run_id",),
    "billing_panes": ("run_id",),
    "ad_sessions": ("run_id",),
    "ad_sessions_panes": ("run_id",),
    "ad_short_sessions": ("run_id",),
    "ad_short_sessions_panes": ("run_id",),
    "billing__quarantine": ("run_id", "quarantined_at"),
}
# `python -m dataflow_core.examples.jobs.demo_job ARGS` or `python -m dataflow_core ARGS` for each (job, ARGS) in
# turn, in one process: one Spark application (and one set of executors) for all of them,
# not one each. The first job starts Spark on the cluster and names the application; each
# later one finds that session running and only switches the warehouse, as it would in a
# user's own driver program.
JOB_SEQUENCE = """
import json, sys
from dataflow_core.cli import main as dataflow
from dataflow_core.examples.jobs.demo_job import main as demo_job
for job, args in json.loads(sys.argv[1]):
    print(f"$ {job} " + " ".join(args), flush=True)
    code = {"demo_job": demo_job, "dataflow": dataflow}[job](args)
    if code:
        sys.exit(code)
"""


@dataclass
class ClusterJobs:
    """What the jobs on the cluster left: each job's printed lines, in order, and the
    warehouses they wrote."""

    outputs: list[list[str]]
    demo: Path
    backfills: Path
    sample: Path


@pytest.fixture(scope="module")
def on_cluster(cluster, spark, tmp_path_factory) -> ClusterJobs:
    """The demo job and the backfills, submitted to the cluster in one driver process."""
    import shutil

    from dataflow_core.sample.config import SampleConfig
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    base = tmp_path_factory.mktemp("cluster_jobs")
    # The backfills' sample once (what `dataflow generate --rows 1500 --seed 3` writes),
    # through the shared session; the local-mode baseline copies it too.
    spark.conf.set(WAREHOUSE_CONF, str(base / "sample"))
    write_sample(spark, SampleConfig(rows=SAMPLE_ROWS, seed=3), progress=lambda _m: None)
    shutil.copytree(base / "sample" / "video_events", base / "cluster" / "video_events")
    cluster.ready()
    master = cluster.master_url
    jobs = [("demo_job", ["--rows", str(DEMO_ROWS), "--seed", "11", "--master", master, "--warehouse", str(base / "demo")])]
    jobs += [("dataflow", ["backfill", *args, "--master", master, "--warehouse", str(base / "cluster")])
             for args in BACKFILLS]
    log = base / "jobs.log"
    with open(log, "w") as out:
        try:
            result = subprocess.run([sys.executable, "-c", JOB_SEQUENCE, json.dumps(jobs)], env=_job_env(base),
                                    cwd=base, stdout=out, stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the jobs on the cluster did not finish in {JOB_TIMEOUT_S}s:\n{_tail(log)}")
    assert result.returncode == 0, f"the jobs on {master} exited {result.returncode}:\n{_tail(log)}"
    outputs: list[list[str]] = []
    for line in log.read_text().splitlines():
        if line.startswith("$ "):
            outputs.append([])
        elif outputs:
            outputs[-1].append(line)
    assert len(outputs) == len(jobs), _tail(log)
    return ClusterJobs(outputs, base / "demo", base / "cluster", base / "sample")


def test_demo_job_runs_on_a_standalone_master(cluster, on_cluster):
    from deltalake import DeltaTable

    from dataflow_core.examples.jobs.demo_job import INPUT_TABLE, OUTPUT_TABLE

    assert any("in = accepted + quarantined + dropped as late" in line for line in on_cluster.outputs[0])
    # It really ran on the cluster: the master knows the application (the demo job started
    # it) and the workers launched executors for it.
    apps = _master_state(cluster.web_url)
    names = {app["name"] for app in apps.get("completedapps", []) + apps.get("activeapps", [])}
    assert "dataflow-demo" in names, f"applications the master saw: {names}"
    assert any(cluster.work_dir.glob("app-*/*/stderr")), "the worker launched no executor"

    warehouse = on_cluster.demo
    assert DeltaTable(str(warehouse / INPUT_TABLE)).to_pyarrow_table().num_rows == DEMO_ROWS
    counts = DeltaTable(str(warehouse / OUTPUT_TABLE)).to_pyarrow_table()
    assert counts.num_rows > 0
    assert 0 < sum(counts.column("views").to_pylist()) <= DEMO_ROWS


def _ledgers(outputs: list[list[str]]) -> list[list[str]]:
    """Each backfill's printed ledger."""
    return [[line for line in lines if line.startswith("ledger") or line.startswith("  ")] for lines in outputs]


def _backfills_here(warehouse: Path) -> list[list[str]]:
    """The same backfills through the CLI's entry point in this process: local mode
    on the shared session (the runs under test are the cluster's; this is the baseline)."""
    import contextlib
    import io

    from dataflow_core.cli import main

    outputs: list[list[str]] = []
    for args in BACKFILLS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["backfill", *args, "--master", "local[2]", "--warehouse", str(warehouse)])
        assert code == 0, out.getvalue()[-5000:]
        outputs.append(out.getvalue().splitlines())
    return _ledgers(outputs)


def _table(warehouse: Path, name: str, ignore: tuple[str, ...]):
    from deltalake import DeltaTable

    frame = DeltaTable(str(warehouse / name)).to_pandas()
    frame = frame.drop(columns=[c for c in ignore if c in frame.columns])
    columns = sorted(frame.columns)
    return frame[columns].astype(str).sort_values(columns).reset_index(drop=True)


def test_backfills_leave_the_same_tables_on_a_standalone_cluster_as_in_local_mode(cluster, on_cluster, tmp_path):
    """billing (batch) and ad_sessions (replayed in arrival order), through the CLI, against the two-worker cluster and in local mode: identical tables and ledgers."""
    import shutil

    import pandas as pd

    local, remote = tmp_path / "local", on_cluster.backfills
    shutil.copytree(on_cluster.sample / "video_events", local / "video_events")
    on_cluster_ledgers = _ledgers(on_cluster.outputs[1:])
    in_local_mode = _backfills_here(local)

    # It really ran on the cluster, on both workers.
    assert len({p.parent.name for p in cluster.work_dir.glob("app-*/*/stderr")}) >= 2, "an executor per worker"
    assert on_cluster_ledgers == in_local_mode, "the ledgers differ"
    assert "read 0 " not in on_cluster_ledgers[0][1] and "OK" in on_cluster_ledgers[0][2], on_cluster_ledgers[0]
    assert re.search(r"ad_sessions: [\d,]+ panes, [1-9][\d,]* retractions", on_cluster_ledgers[1][3]), on_cluster_ledgers[1]
    for name, ignore in TABLES.items():
        ours, theirs = _table(remote, name, ignore), _table(local, name, ignore)
        assert len(ours) > 0, f"{name} is empty"
        pd.testing.assert_frame_equal(ours, theirs, obj=name)
