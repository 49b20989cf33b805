"""`make stack` / `make stack-stop`: docker-compose.yml's topology as processes on this machine.

No Docker engine runs here, so each service of the compose file is a process instead:
PostgreSQL (Airflow's metadata, a cluster under `.cache/stack/postgres`), Airflow's api-server,
scheduler (LocalExecutor: it runs the tasks, hence the Spark drivers), dag-processor and
triggerer, a Spark standalone master with two workers, and moto's S3 server holding the
warehouse (`s3a://`). Settings come from `stack.env`, the compose file's source too.

    .venv/bin/python scripts/stack.py start   # prints the UI's address and login
    .venv/bin/python scripts/stack.py stop    # leaves no process of the stack behind

Every process started here carries `DATAFLOW_STACK_HOME=<state folder>` in its environment, and
so does everything they start (task processes, Spark drivers, executors): `stop` ends exactly
the processes that carry it, by PID, and says if any is left. moto keeps objects in memory,
so each start begins with an empty warehouse and writes the sample input again.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_FILE = ROOT / "stack.env"
MARKER = "DATAFLOW_STACK_HOME"
VENV_BIN = ROOT / ".venv" / "bin"
START_TIMEOUT_S = 240
SECRETS = ("POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_SECRET")
"""Settings stack.env leaves empty, so that no two stacks share them: each is the
environment's when set there, else generated on the stack's first start and kept in
`<state>/secrets.env`, which only its user can read (`with_secrets`)."""


def read_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """stack.env's NAME=value lines, each overridden by a variable of the same name in `environ`."""
    environ = os.environ if environ is None else environ
    settings = {}
    for line in SETTINGS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            settings[name.strip()] = environ.get(name.strip(), value.strip())
    return settings


def with_secrets(s: dict[str, str], state: Path) -> dict[str, str]:
    """`s` with every one of SECRETS set: the environment's (already in `s`), else the one kept
    in `<state>/secrets.env`, else a new random one kept there (mode 0600)."""
    path = state / "secrets.env"
    kept = read_env_file(path) if path.exists() else {}
    missing = [name for name in SECRETS if not s.get(name) and not kept.get(name)]
    if "POSTGRES_PASSWORD" in missing and (state / "postgres" / "data" / "PG_VERSION").exists():
        raise SystemExit(f"make stack: the database in {state / 'postgres'} was made with a password this stack "
                         "did not keep (an older stack.env's); set POSTGRES_PASSWORD to it, or remove that folder "
                         "(Airflow's history with it)")
    if missing:
        kept.update({name: secrets.token_urlsafe(24) for name in missing})
        state.mkdir(parents=True, exist_ok=True)
        write_private(path, "".join(f"{name}={value}\n" for name, value in kept.items()))
    return {**s, **{name: s.get(name) or kept[name] for name in SECRETS}}


def read_env_file(path: Path) -> dict[str, str]:
    """NAME=value lines (comments and blank lines skipped)."""
    pairs = (line.strip().partition("=") for line in path.read_text().splitlines())
    return {name.strip(): value.strip() for name, _, value in pairs if name.strip() and not name.startswith("#")}


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` readable and writable by this user only, from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_CREAT
    with os.fdopen(fd, "w") as out:
        out.write(text)


def state_dir() -> Path:
    return Path(os.environ.get("DATAFLOW_STACK_DIR") or ROOT / ".cache" / "stack").resolve()


def stack_env(s: dict[str, str], state: Path) -> dict[str, str]:
    """The environment of every process of the stack: Airflow's settings as the compose file
    gives them, Spark's and the object store's (`dataflow_core.objectstore` reads the AWS_*)."""
    api = f"http://127.0.0.1:{s['AIRFLOW_PORT']}"
    return {
        **os.environ,
        MARKER: str(state),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "AIRFLOW_HOME": str(state / "airflow"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (f"postgresql+psycopg2://{s['POSTGRES_USER']}:{s['POSTGRES_PASSWORD']}"
                                                f"@127.0.0.1:{s['POSTGRES_PORT']}/{s['POSTGRES_DB']}"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "dataflow_core" / "airflow" / "plugin" / "folder"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": s["AIRFLOW_PARALLELISM"],
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": s["AIRFLOW_SECRET"],
        "AIRFLOW__API__SECRET_KEY": s["AIRFLOW_SECRET"],
        "AIRFLOW__API__PORT": s["AIRFLOW_PORT"],
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{s['AIRFLOW_ADMIN_USER']}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(state / "airflow" / "passwords.json"),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": s["AIRFLOW_LOG_SERVER_PORT"],
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": s["AIRFLOW_TRIGGER_LOG_SERVER_PORT"],
        "DATAFLOW_UI_URL": api,
        "DATAFLOW_SPARK_MASTER": f"spark://127.0.0.1:{s['SPARK_MASTER_PORT']}",
        "DATAFLOW_WAREHOUSE": s["DATAFLOW_WAREHOUSE"],
        "DATAFLOW_DATA_DOCS": str(state / "data_docs"),  # the gates' Data Docs, beside the stack's other state
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s['S3_PORT']}",
        "AWS_REGION": s["AWS_REGION"],
        "AWS_ACCESS_KEY_ID": s["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": s["AWS_SECRET_ACCESS_KEY"],
        "SPARK_LOCAL_IP": "127.0.0.1",  # the drivers in task processes and the executors meet on loopback
        "SPARK_LOG_DIR": str(state / "logs"),
        "SPARK_WORKER_DIR": str(state / "spark-work"),
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
        "SPARK_CONF_DIR": str(state / "spark-conf"),
    }


def _spark_defaults(s: dict[str, str], state: Path) -> None:
    """The drivers' spark-defaults.conf: a session on a cluster keeps Spark's defaults, 200
    shuffle partitions among them, which two one-core workers would run as 200 tasks per stage."""
    folder = state / "spark-conf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spark-defaults.conf").write_text(f"spark.sql.shuffle.partitions {s['SPARK_SQL_SHUFFLE_PARTITIONS']}\n")


def _daemon(name: str, command: list[str], env: dict[str, str], state: Path) -> int:
    """Start a long-lived process in its own session, its output in logs/<name>.log; its PID."""
    with open(state / "logs" / f"{name}.log", "ab") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=ROOT, start_new_session=True)
    pids = _pids(state)
    pids[name] = process.pid
    (state / "pids.json").write_text(json.dumps(pids))
    return process.pid


def _pids(state: Path) -> dict[str, int]:
    path = state / "pids.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _run(command: list[str], env: dict[str, str], what: str, timeout: float = START_TIMEOUT_S) -> None:
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"make stack: {what} failed: {' | '.join(detail)}")


def _wait(what: str, ready, deadline: float) -> None:
    while True:
        try:
            if ready():
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"make stack: {what} was not ready within {START_TIMEOUT_S} s (logs: {state_dir() / 'logs'})")
        time.sleep(1)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


# --- PostgreSQL ---------------------------------------------------------------------------

def pg_tool(name: str) -> str:
    """A PostgreSQL program from PATH, else Debian's newest /usr/lib/postgresql/*/bin."""
    found = shutil.which(name) or next(
        (str(p) for p in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise SystemExit(f"make stack: no PostgreSQL `{name}` on PATH or in /usr/lib/postgresql/*/bin: "
                         "install PostgreSQL 15 (Debian: apt-get install postgresql)")
    return found


def _db_owner() -> str | None:
    """PostgreSQL refuses to run as root: as root, it runs as the `postgres` user (else `nobody`)."""
    if os.geteuid() != 0:
        return None
    return "postgres" if any(p.pw_name == "postgres" for p in pwd.getpwall()) else "nobody"


def _as_db_owner(command: list[str]) -> list[str]:
    user = _db_owner()
    return ["runuser", "-u", user, "--", *command] if user else command


def _postgres(s: dict[str, str], env: dict[str, str], state: Path) -> None:
    folder, data = state / "postgres", state / "postgres" / "data"
    fresh = not (data / "PG_VERSION").exists()
    folder.mkdir(parents=True, exist_ok=True)
    if fresh:
        write_private(folder / "pw", s["POSTGRES_PASSWORD"])
        if _db_owner():
            state.chmod(0o755)  # the owner must reach its folder
            for path in (folder, folder / "pw"):
                shutil.chown(path, _db_owner())
        _run(_as_db_owner([pg_tool("initdb"), "-D", str(data), "-U", s["POSTGRES_USER"], f"--pwfile={folder / 'pw'}",
                           "-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"]), env, "initdb")
        (folder / "pw").unlink()
    # A development cluster: no fsync (a crash of the machine may lose the last commits)
    options = (f"-c listen_addresses=127.0.0.1 -p {s['POSTGRES_PORT']} -k {folder} "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    _run(_as_db_owner([pg_tool("pg_ctl"), "-D", str(data), "-l", str(folder / "postgres.log"), "-o", options,
                       "-w", "-t", "60", "start"]), env, "PostgreSQL's start")
    if fresh:
        _run([pg_tool("createdb"), "-h", "127.0.0.1", "-p", s["POSTGRES_PORT"], "-U", s["POSTGRES_USER"],
              s["POSTGRES_DB"]], {**env, "PGPASSWORD": s["POSTGRES_PASSWORD"]}, "createdb")


def _stop_postgres(state: Path) -> None:
    data = state / "postgres" / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(_as_db_owner([pg_tool("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=60)


# --- the services -------------------------------------------------------------------------

def _spark(s: dict[str, str], env: dict[str, str], state: Path) -> None:
    spark_class = str(VENV_BIN / "spark-class")
    master = f"spark://127.0.0.1:{s['SPARK_MASTER_PORT']}"
    _spark_defaults(s, state)
    _daemon("spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                             "--port", s["SPARK_MASTER_PORT"], "--webui-port", s["SPARK_MASTER_WEBUI_PORT"]], env, state)
    for n in (1, 2):
        _daemon(f"spark-worker-{n}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                      "--cores", s["SPARK_WORKER_CORES"], "--memory", s["SPARK_WORKER_MEMORY"],
                                      "--webui-port", "0", "--work-dir", str(state / "spark-work"), master], env, state)


def _airflow(s: dict[str, str], env: dict[str, str], state: Path, say) -> None:
    home = state / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    write_private(home / "passwords.json", json.dumps({s["AIRFLOW_ADMIN_USER"]: s["AIRFLOW_ADMIN_PASSWORD"]}))
    _run([str(VENV_BIN / "airflow"), "db", "migrate"], env, "airflow db migrate")
    say("Airflow's database migrated")
    airflow = str(VENV_BIN / "airflow")
    _daemon("airflow-apiserver", [airflow, "api-server", "--host", "127.0.0.1", "--port", s["AIRFLOW_PORT"]], env,
            state)
    # Every process of the stack listens on the loopback address only. Airflow's log servers
    # cannot (they bind every address), and on one machine are not needed: the api-server
    # reads the tasks' log files where the scheduler's task processes write them.
    for component, flags in (("scheduler", ["--skip-serve-logs"]), ("dag-processor", []),
                             ("triggerer", ["--skip-serve-logs"])):
        _daemon(f"airflow-{component}", [airflow, component, *flags], env, state)


def _airflow_healthy(s: dict[str, str]) -> bool:
    health = _get_json(f"http://127.0.0.1:{s['AIRFLOW_PORT']}/api/v2/monitor/health")
    return all(health.get(part, {}).get("status") == "healthy"
               for part in ("metadatabase", "scheduler", "triggerer", "dag_processor"))


def start() -> int:
    state = state_dir()
    s = with_secrets(read_settings(), state)
    if marked_processes(state):
        print(f"the stack is already running (stop it with: make stack-stop): {_address(s)}")
        return 0
    (state / "logs").mkdir(parents=True, exist_ok=True)
    (state / "pids.json").unlink(missing_ok=True)
    env, started = stack_env(s, state), time.monotonic()
    deadline = started + START_TIMEOUT_S
    say = lambda what: print(f"[{time.monotonic() - started:5.1f}s] {what}", flush=True)  # noqa: E731
    say(f"PostgreSQL on 127.0.0.1:{s['POSTGRES_PORT']} ({state / 'postgres'})")
    _postgres(s, env, state)
    bucket = s["DATAFLOW_WAREHOUSE"].split("://", 1)[1].split("/", 1)[0]
    say(f"S3 server (moto) on 127.0.0.1:{s['S3_PORT']}, bucket {bucket}")
    _run([str(VENV_BIN / "python"), "-m", "tests.s3_server", "start", "--state", str(state / "s3.json"),
          "--port", s["S3_PORT"], "--bucket", bucket], env, "the S3 server")
    say(f"Spark master on 127.0.0.1:{s['SPARK_MASTER_PORT']} and two workers")
    _spark(s, env, state)
    say(f"sample input: {s['DATAFLOW_SAMPLE_ROWS']} rows into video_events in {s['DATAFLOW_WAREHOUSE']}")
    sample = subprocess.Popen([str(VENV_BIN / "dataflow"), "generate", "--rows", s["DATAFLOW_SAMPLE_ROWS"],
                               "--seed", "42", "--table", "video_events", "--master", "local[2]"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    say("Airflow: db migrate, then api-server, scheduler, dag-processor, triggerer (LocalExecutor)")
    _airflow(s, env, state, say)
    web = f"http://127.0.0.1:{s['SPARK_MASTER_WEBUI_PORT']}/json/"
    _wait("the Spark workers", lambda: _get_json(web).get("aliveworkers", 0) >= 2, deadline)
    say("Spark workers registered")
    output = sample.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
    if sample.returncode != 0:
        raise SystemExit(f"make stack: the sample input failed: {output.strip().splitlines()[-1:]}")
    say("sample input written")
    _wait("Airflow", lambda: _airflow_healthy(s), deadline)
    shell = state / "shell.env"
    write_private(shell, "".join(f"export {name}={env[name]}\n" for name in (
        "DATAFLOW_WAREHOUSE", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")))
    say("up")
    print(f"\nAirflow UI: {_address(s)}\nlog in as user: {s['AIRFLOW_ADMIN_USER']}   password: "
          f"AIRFLOW_ADMIN_PASSWORD in {state / 'secrets.env'} (readable by you only)\nSpark master UI: http://127.0.0.1:{s['SPARK_MASTER_WEBUI_PORT']}\n"
          f"warehouse: {s['DATAFLOW_WAREHOUSE']} (S3 endpoint http://127.0.0.1:{s['S3_PORT']}); from a shell: "
          f"source {shell} && dataflow sql 'SELECT count(*) FROM video_events'\n"
          f"logs: {state / 'logs'}\nstop it with: make stack-stop")
    return 0


def _address(s: dict[str, str]) -> str:
    return f"http://127.0.0.1:{s['AIRFLOW_PORT']}"


def marked_processes(state: Path) -> list[int]:
    """The live processes whose environment carries this stack's marker."""
    marker = f"{MARKER}={state}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                continue
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def stop() -> int:
    state = state_dir()
    _stop_postgres(state)
    if (state / "s3.json").exists():
        subprocess.run([str(VENV_BIN / "python"), "-m", "tests.s3_server", "stop", "--state", str(state / "s3.json")],
                       cwd=ROOT, capture_output=True, timeout=60)
    for pid in _pids(state).values():  # each service's whole process group first
        try:
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        left = marked_processes(state)
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = marked_processes(state)
        if not left:
            break
    (state / "pids.json").unlink(missing_ok=True)
    left = marked_processes(state)
    if left:
        print(f"make stack-stop: processes still running: {left}", file=sys.stderr)
        return 1
    print("the stack is stopped: no process of it is left")
    return 0


if __name__ == "__main__":
    action = sys.argv[1] if len(sys.argv) > 1 else "start"
    if action not in ("start", "stop"):
        sys.exit("usage: scripts/stack.py start|stop")
    sys.exit(start() if action == "start" else stop())
