"""`make stack-check` (a CI step): one Airflow DAG run end to end on `make stack`.

`make stack` (PostgreSQL, Airflow's four services with the LocalExecutor, a Spark standalone
master and two workers, the S3 server, the warehouse on `s3a://`), then the
`dataflow_backfill` DAG triggered through the REST API for one day of the sample input, its
tasks run by the scheduler as Spark drivers on the cluster; the billing table it wrote read
back from S3 with `dataflow sql`; then `make stack-stop`, and no process of the stack may be
left. The ports are free ones picked here (stack.env's are the defaults of a developer's
machine, where something may hold them), and the stack lives in its own state folder.

    .venv/bin/python -m tests.stack_check
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.s3_server import _free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import stack  # noqa: E402  (scripts/stack.py)

DAY, NEXT_DAY = "2024-05-01", "2024-05-02"  # one day: the range [start, end)
RUN_TIMEOUT_S = 1200  # a bound only: 833 s on 2 cores shared with other Spark jobs (load 11-15)
PORTS = ("POSTGRES_PORT", "AIRFLOW_PORT", "AIRFLOW_LOG_SERVER_PORT", "AIRFLOW_TRIGGER_LOG_SERVER_PORT",
         "SPARK_MASTER_PORT", "SPARK_MASTER_WEBUI_PORT", "S3_PORT")


def _api(settings: dict[str, str], method: str, path: str, body: dict | None = None, token: str | None = None):
    request = urllib.request.Request(f"http://127.0.0.1:{settings['AIRFLOW_PORT']}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def _token(settings: dict[str, str]) -> str:
    answer = _api(settings, "POST", "/auth/token",
                  {"username": settings["AIRFLOW_ADMIN_USER"], "password": settings["AIRFLOW_ADMIN_PASSWORD"]})
    return answer["access_token"]


def _run_dag(settings: dict[str, str]) -> tuple[str, dict]:
    """Trigger dataflow_backfill for DAY once the dag-processor has parsed it; wait for its end."""
    token = _token(settings)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        try:
            _api(settings, "GET", "/api/v2/dags/dataflow_backfill", token=token)
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(2)
    conf = {"pipeline": "billing", "start": DAY, "end": NEXT_DAY}
    run = _api(settings, "POST", "/api/v2/dags/dataflow_backfill/dagRuns", {"logical_date": None, "conf": conf}, token)
    path = f"/api/v2/dags/dataflow_backfill/dagRuns/{run['dag_run_id']}"
    while (state := _api(settings, "GET", path, token=token)["state"]) not in ("success", "failed"):
        if time.monotonic() > deadline:
            break
        time.sleep(3)
    tasks = _api(settings, "GET", f"{path}/taskInstances", token=token)["task_instances"]
    return state, {f"{t['task_id']}[{t['map_index']}]": (t["state"], t.get("duration")) for t in tasks}


def main() -> int:
    state_dir = Path(tempfile.mkdtemp(prefix="stack-", dir=ROOT / ".cache"))
    overrides = {name: str(_free_port()) for name in PORTS}
    env = {**os.environ, **overrides, "DATAFLOW_STACK_DIR": str(state_dir)}
    settings = stack.read_settings(env)
    started = time.monotonic()
    failure = None
    try:
        up = subprocess.run(["make", "--no-print-directory", "stack"], env=env, cwd=ROOT, text=True,
                            capture_output=True, timeout=stack.START_TIMEOUT_S + 120)
        print(up.stdout[-3000:], up.stderr[-3000:], sep="\n")
        if up.returncode != 0:
            failure = "make stack failed"
        else:
            print(f"stack-check: make stack took {time.monotonic() - started:.0f} s", flush=True)
            settings = stack.with_secrets(settings, state_dir)  # the ones it generated
            exposed = _listening_beyond_loopback(stack.marked_processes(state_dir))
            if exposed:
                failure = f"the stack listens beyond the loopback address: {exposed}"
            ran = time.monotonic()
            state, tasks = _run_dag(settings)
            print(f"stack-check: dataflow_backfill for {DAY}: {state} in {time.monotonic() - ran:.0f} s; tasks: {tasks}")
            if state != "success":
                failure = failure or f"the DAG run ended {state}"
            else:
                sql_env = stack.stack_env(settings, state_dir)
                sql = subprocess.run([str(stack.VENV_BIN / "dataflow"), "sql", "SELECT count(*) AS n FROM billing"],
                                     env=sql_env, cwd=ROOT, capture_output=True, text=True, timeout=120)
                print(sql.stdout.strip())
                counts = [int(w) for w in sql.stdout.split() if w.isdigit()]
                if sql.returncode != 0 or not counts or max(counts) == 0:
                    failure = f"no billing rows on S3: {sql.stdout[-500:]} {sql.stderr[-500:]}"
    finally:
        down = subprocess.run(["make", "--no-print-directory", "stack-stop"], env=env, cwd=ROOT, text=True,
                              capture_output=True, timeout=180)
        print(down.stdout.strip(), down.stderr.strip())
        left = stack.marked_processes(state_dir)
        listening = [name for name in PORTS if _listening(int(overrides[name]))]
        if down.returncode != 0 or left or listening:
            failure = failure or f"make stack-stop left processes {left}, ports {listening}"
        if failure is None:
            shutil.rmtree(state_dir, ignore_errors=True)
    total = time.monotonic() - started
    if failure:
        print(f"stack-check: FAILED - {failure} (state and logs kept in {state_dir}; {total:.0f} s)", file=sys.stderr)
        return 1
    print(f"stack-check: passed in {total:.0f} s; no process of the stack is left")
    return 0


def _listening_beyond_loopback(pids: list[int]) -> list[str]:
    """`pid: address:port` of every TCP socket these processes listen on at an address other
    than the loopback one (from /proc/net/tcp and tcp6, matched to their file descriptors)."""
    inodes: dict[str, int] = {}
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[target[8:-1]] = pid
    exposed = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes and not _loopback(address):  # 0A: LISTEN
                exposed.append(f"{inodes[fields[9]]}: {address}:{int(port, 16)}")
    return exposed


def _loopback(address: str) -> bool:
    """Whether a /proc/net/tcp(6) address (32-bit words in the host's byte order, here little
    endian) is 127.0.0.0/8, ::1 or ::ffff:127.x.x.x."""
    if len(address) == 8:
        return address.endswith("7F")
    return address == "00000000000000000000000001000000" or (
        address.startswith("0000000000000000FFFF0000") and address.endswith("7F"))


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    sys.exit(main())
