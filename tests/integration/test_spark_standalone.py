"""The demo job against a real Spark standalone cluster (one master, one worker on 127.0.0.1).

This is the path users take when they outgrow `local[*]`: the same job, only `--master`
changes. The master and the worker are started from the venv's pyspark with `spark-class`,
exactly as docker-compose.yml starts them, and stopped whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Iterator

import pytest

pytestmark = pytest.mark.integration

SPARK_CLASS = Path(sys.executable).with_name("spark-class")
START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 900
OUTPUT_TAIL_LINES = 60


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
    def __init__(self, master_url: str, web_url: str, work_dir: Path, logs: Path) -> None:
        self.master_url = master_url
        self.web_url = web_url
        self.work_dir = work_dir
        self.logs = logs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    assert SPARK_CLASS.exists(), f"no spark-class next to {sys.executable}: run `make setup` first"
    base = tmp_path_factory.mktemp("spark_standalone")
    port, web_port, worker_web_port = _free_port(), _free_port(), _free_port()
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
    worker = None
    try:
        worker = _start(
            [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker",
             "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
             "--webui-port", str(worker_web_port), "--work-dir", str(work_dir), master_url],
            env, base / "worker.log",
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for name, process in (("master", master), ("worker", worker)):
                if process.poll() is not None:
                    pytest.fail(f"Spark {name} exited {process.returncode}:\n"
                                f"{_tail(base / f'{name}.log')}")
            try:
                if _master_state(web_url).get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass  # master UI not up yet
            if time.monotonic() > deadline:
                pytest.fail(f"no worker registered with {master_url} within {START_TIMEOUT_S}s:\n"
                            f"{_tail(base / 'master.log')}\n{_tail(base / 'worker.log')}")
            time.sleep(1)
        yield Cluster(master_url, web_url, work_dir, base)
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)


def test_demo_job_runs_on_a_standalone_master(cluster, tmp_path):
    from deltalake import DeltaTable

    from jobs.demo_job import INPUT_TABLE, OUTPUT_TABLE

    warehouse = tmp_path / "warehouse"
    log = tmp_path / "demo-job.log"
    # Extra Spark settings go through spark-defaults.conf, as docs/deployment.md describes:
    # this tiny sample needs a few shuffle partitions, not a cluster's default 200.
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions  4\n")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "SPARK_CONF_DIR": str(conf_dir)}
    env.pop("DATAFLOW_WAREHOUSE", None)
    command = [
        sys.executable, "-m", "jobs.demo_job", "--rows", "2000", "--seed", "11",
        "--master", cluster.master_url, "--warehouse", str(warehouse),
    ]  # fmt: skip
    # A process of its own: the test session's local Spark cannot switch masters.
    with open(log, "w") as out:
        try:
            result = subprocess.run(command, env=env, cwd=tmp_path, stdout=out,
                                    stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the demo job did not finish in {JOB_TIMEOUT_S}s:\n{_tail(log)}")
    assert result.returncode == 0, f"demo job exited {result.returncode}:\n{_tail(log)}"
    assert "in = accepted + quarantined + dropped as late" in log.read_text()

    # It really ran on the cluster: the master knows the application and the worker
    # launched executors for it.
    apps = _master_state(cluster.web_url)
    names = {app["name"] for app in apps.get("completedapps", []) + apps.get("activeapps", [])}
    assert "dataflow-demo" in names, f"applications the master saw: {names}"
    assert any(cluster.work_dir.glob("app-*/*/stderr")), "the worker launched no executor"

    assert DeltaTable(str(warehouse / INPUT_TABLE)).to_pyarrow_table().num_rows == 2000
    counts = DeltaTable(str(warehouse / OUTPUT_TABLE)).to_pyarrow_table()
    assert counts.num_rows > 0
    assert 0 < sum(counts.column("views").to_pylist()) <= 2000
