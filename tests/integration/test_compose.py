"""docker-compose.yml and the Dockerfile fit together and with the repository.

No Docker engine runs where the tests run, so this checks what can be checked without one:
the compose file's wiring (who depends on whom, which master the workers join, where the
warehouse is, which database Airflow uses), that it and `make stack` take their settings from
stack.env, and that the image build only copies files that exist. (`make stack-check` runs
the same topology as processes.)
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

AIRFLOW_SERVICES = (
    "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"
)
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
SPARK_SERVICES = ("spark-master", *SPARK_WORKERS)
MASTER_URL = "spark://spark-master:7077"


VARIABLE = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")
"""`${NAME}`, `${NAME:-default}` or `${NAME:?error}` (a setting compose refuses to go without)."""


def _compose_text() -> str:
    """The compose file without its comments."""
    return "\n".join(line for line in COMPOSE_FILE.read_text().splitlines() if not line.lstrip().startswith("#"))


def _stack():
    sys.path.insert(0, str(ROOT / "scripts"))
    import stack  # scripts/stack.py

    return stack


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> dict[str, str]:
    """stack.env's settings with the secrets a stack generates (as a `.env` file gives compose)."""
    stack = _stack()
    return stack.with_secrets(stack.read_settings({}), tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="module")
def services(settings) -> dict[str, dict]:
    """The compose file as `docker compose --env-file stack.env --env-file .env` reads it."""
    text = VARIABLE.sub(lambda m: settings.get(m.group(1)) or m.group(3) or "", _compose_text())
    return yaml.safe_load(text)["services"]


def test_every_setting_of_the_compose_file_is_stack_envs():
    """One source: each ${NAME:-value} defaults to stack.env's NAME, and each name is there;
    each secret is required (${NAME:?...}) and left empty in stack.env, so no two stacks share it."""
    stack = _stack()
    settings = stack.read_settings({})
    for name, kind, default in VARIABLE.findall(_compose_text()):
        assert name in settings, f"docker-compose.yml uses ${{{name}}}, which stack.env does not set"
        if name in stack.SECRETS:
            assert kind == "?" and settings[name] == "", f"{name} is a secret: required by compose, empty in stack.env"
        else:
            assert kind == "-" and default == settings[name], \
                f"docker-compose.yml defaults {name} to {default!r}, stack.env to {settings[name]!r}"
    assert {name for name, kind, _ in VARIABLE.findall(_compose_text()) if kind == "?"} == set(stack.SECRETS)


def test_make_stack_makes_its_secrets_once_each_readable_by_its_user_only(tmp_path, monkeypatch):
    stack = _stack()
    first = stack.with_secrets(stack.read_settings({}), tmp_path / "one")
    again = stack.with_secrets(stack.read_settings({}), tmp_path / "one")
    other = stack.with_secrets(stack.read_settings({}), tmp_path / "two")
    for name in stack.SECRETS:
        assert len(first[name]) >= 24 and first[name] == again[name] != other[name], name
    assert (tmp_path / "one" / "secrets.env").stat().st_mode & 0o777 == 0o600
    mine = stack.with_secrets(stack.read_settings({"AIRFLOW_ADMIN_PASSWORD": "chosen"}), tmp_path / "one")
    assert mine["AIRFLOW_ADMIN_PASSWORD"] == "chosen" and mine["AIRFLOW_SECRET"] == first["AIRFLOW_SECRET"]
    (tmp_path / "old" / "postgres" / "data").mkdir(parents=True)
    (tmp_path / "old" / "postgres" / "data" / "PG_VERSION").write_text("15")
    with pytest.raises(SystemExit, match="set POSTGRES_PASSWORD to it"):
        stack.with_secrets(stack.read_settings({}), tmp_path / "old")


def test_every_published_port_is_on_the_loopback_address(services):
    published = {name: ports for name, service in services.items() if (ports := service.get("ports"))}
    assert published and all(str(port).startswith("127.0.0.1:") for ports in published.values() for port in ports), \
        published


def test_make_stack_gives_airflow_and_spark_the_compose_files_settings(services, settings, tmp_path):
    """What differs is only where each service is: host names there, 127.0.0.1 and ports here."""
    stack = _stack()
    mine = stack.stack_env(settings, tmp_path)
    theirs = _env(services["airflow-scheduler"])
    for key in ("AIRFLOW__CORE__EXECUTOR", "AIRFLOW__CORE__LOAD_EXAMPLES", "AIRFLOW__API_AUTH__JWT_SECRET",
                "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "AIRFLOW__CORE__PARALLELISM",
                "DATAFLOW_WAREHOUSE", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert mine[key] == theirs[key], key
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "DATAFLOW_SPARK_MASTER", "AWS_ENDPOINT_URL"):
        ours, compose = urlsplit(mine[key]), urlsplit(theirs[key])
        assert (ours.scheme, ours.username, ours.password, ours.path) == (
            compose.scheme, compose.username, compose.password, compose.path), key
    worker = _command(services["spark-worker-1"])
    assert worker[worker.index("--cores") + 1] == settings["SPARK_WORKER_CORES"]
    assert worker[worker.index("--memory") + 1] == settings["SPARK_WORKER_MEMORY"]


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the "KEY=value" list form
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def _command(service: dict) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def _mount_targets(service: dict, source: str) -> set[str]:
    """Where a named volume (or host path) `source` is mounted in a service."""
    targets = set()
    for volume in service.get("volumes") or []:
        if isinstance(volume, str):
            parts = volume.split(":")
            if parts[0] == source and len(parts) >= 2:
                targets.add(parts[1])
        elif volume.get("source") == source:
            targets.add(volume["target"])
    return targets


def _depends_on(service: dict) -> dict[str, str]:
    depends = service.get("depends_on") or {}
    if isinstance(depends, list):
        return {name: "service_started" for name in depends}
    return {name: spec.get("condition", "service_started") for name, spec in depends.items()}


def test_every_service_of_the_stack_is_defined(services):
    expected = {"postgres", "s3", "airflow-init", *AIRFLOW_SERVICES, *SPARK_SERVICES}
    assert expected <= set(services), f"missing services: {sorted(expected - set(services))}"


def test_project_services_are_built_from_the_dockerfile(services):
    project_services = ("airflow-init", *AIRFLOW_SERVICES, *SPARK_SERVICES)
    for name in project_services:
        build = services[name].get("build")
        assert build, f"{name} has no build section"
        context = ROOT / build.get("context", ".")
        assert context.resolve() == ROOT, f"{name} builds from {context}, not the repository root"
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE
    images = {services[name].get("image") for name in project_services}
    assert len(images) == 1, f"Airflow and Spark services should share one image, got {images}"


def test_airflow_waits_for_postgres_and_the_migration(services):
    init = services["airflow-init"]
    assert "airflow db migrate" in " ".join(_command(init))
    assert _depends_on(init).get("postgres") == "service_healthy"
    assert "healthcheck" in services["postgres"]
    for name in AIRFLOW_SERVICES:
        depends = _depends_on(services[name])
        assert depends.get("postgres") == "service_healthy", f"{name} does not wait for postgres"
        assert depends.get("airflow-init") == "service_completed_successfully", (
            f"{name} does not wait for the DB migration"
        )


def test_each_airflow_component_runs_its_own_command(services):
    expected = {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    for name, subcommand in expected.items():
        words = " ".join(_command(services[name])).split()
        assert any(
            words[i] == "airflow" and words[i + 1] == subcommand for i in range(len(words) - 1)
        ), f"{name} does not run `airflow {subcommand}`: {_command(services[name])}"


def test_airflow_uses_the_postgres_service_and_the_dags_folder(services):
    postgres_env = _env(services["postgres"])
    for name in ("airflow-init", *AIRFLOW_SERVICES):
        env = _env(services[name])
        url = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert url.scheme.startswith("postgresql"), f"{name}: {url.scheme}"
        assert url.hostname == "postgres", f"{name} points its DB at {url.hostname}"
        assert url.username == postgres_env["POSTGRES_USER"]
        assert url.path.lstrip("/") == postgres_env["POSTGRES_DB"]
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false"
        execution_api = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
        assert execution_api.startswith("http://airflow-apiserver:8080/"), execution_api
        # All components sign and check the same tokens.
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == _env(services["airflow-apiserver"])[
            "AIRFLOW__API_AUTH__JWT_SECRET"
        ]
    for name in AIRFLOW_SERVICES:
        dags_folder = _env(services[name])["AIRFLOW__CORE__DAGS_FOLDER"]
        assert dags_folder in _mount_targets(services[name], "./dags"), (
            f"{name}: dags/ is not mounted at {dags_folder}"
        )


def test_workers_join_the_master(services):
    master = _command(services["spark-master"])
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    host = master[master.index("--host") + 1]
    port = master[master.index("--port") + 1]
    assert f"spark://{host}:{port}" == MASTER_URL
    for name in SPARK_WORKERS:
        command = _command(services[name])
        assert command[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
        assert command[-1] == MASTER_URL, f"{name} joins {command[-1]}"
        assert "spark-master" in _depends_on(services[name])
    for name in AIRFLOW_SERVICES:
        assert _env(services[name])["DATAFLOW_SPARK_MASTER"] == MASTER_URL


def test_the_warehouse_is_on_the_s3_service_and_its_bucket_is_made_first(services):
    for name in ("airflow-init", *AIRFLOW_SERVICES):
        env = _env(services[name])
        assert env["DATAFLOW_WAREHOUSE"].startswith("s3a://"), name
        assert urlsplit(env["AWS_ENDPOINT_URL"]).hostname == "s3", name
    port = urlsplit(_env(services["airflow-scheduler"])["AWS_ENDPOINT_URL"]).port
    assert services["s3"]["entrypoint"][-2:] == ["-p", str(port)]
    assert "python -m dataflow_core.objectstore" in " ".join(_command(services["airflow-init"]))
    assert _depends_on(services["airflow-init"]).get("s3") == "service_started"


def test_the_lock_has_the_drivers_for_airflows_database(services):
    # Airflow 3 derives an async URL from the sync one (postgresql+asyncpg): both must import,
    # in the image (which installs the lock) and under `make stack`.
    scheme = urlsplit(_env(services["airflow-init"])["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).scheme
    driver = scheme.split("+", 1)[1] if "+" in scheme else "psycopg2"
    locked = {line.split("==")[0] for line in (ROOT / "requirements.lock").read_text().splitlines() if "==" in line}
    for package in (driver, "asyncpg"):
        assert package in locked or f"{package}-binary" in locked, f"requirements.lock lacks {package}, which Airflow needs"
    installs = " && ".join(rest for keyword, rest in _dockerfile_instructions() if keyword == "RUN")
    assert "-r requirements.lock" in installs


def test_named_volume_mount_points_are_created_in_the_image(services):
    # A fresh named volume takes its owner from the image's mount point; one Docker has to
    # create would belong to root, and the image's non-root user could not write to it.
    created = set()
    for keyword, rest in _dockerfile_instructions():
        if keyword == "RUN":
            for match in re.finditer(r"mkdir -p ((?:/\S+\s*)+)", rest):
                created.update(match.group(1).split())
    for name, service in services.items():
        if "build" not in service:
            continue
        for volume in service.get("volumes") or []:
            if isinstance(volume, str):
                source, target = volume.split(":")[:2]
            else:
                source, target = volume["source"], volume["target"]
            if source.startswith((".", "/")):
                continue  # a bind mount of a host folder
            assert target in created, (
                f"{name}: mount point {target} of volume {source} is not made in the image"
            )


def test_spark_driver_is_reachable_from_the_workers(services):
    # Tasks (hence Spark drivers) run in the scheduler: executors must resolve its name.
    scheduler = services["airflow-scheduler"]
    assert scheduler.get("hostname") == "airflow-scheduler"
    assert _env(scheduler)["SPARK_LOCAL_HOSTNAME"] == "airflow-scheduler"


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_copies_only_files_that_exist():
    copies = [rest for keyword, rest in _dockerfile_instructions() if keyword in ("COPY", "ADD")]
    assert copies, "the Dockerfile copies nothing from the repository"
    for rest in copies:
        words = [word for word in rest.split() if not word.startswith("--")]
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, not in the repository"


def test_dockerfile_builds_the_project_image():
    instructions = _dockerfile_instructions()
    base = next(rest for keyword, rest in instructions if keyword == "FROM")
    assert re.match(r"python:3\.11-slim", base), base
    runs = " ".join(rest for keyword, rest in instructions if keyword == "RUN")
    assert "openjdk-17-jdk" in runs  # javac builds the S3 log store, which a warehouse on S3 needs
    assert "-r requirements.lock" in runs
    assert "pip install --no-deps -e ." in runs
    # Delta jars are resolved at build time by the project's own module.
    modules = re.findall(r"python -m ([\w.]+)", runs)
    assert "dataflow_core.spark.platform.jars" in modules
    assert {"dataflow_core.spark.platform.s3a", "dataflow_core.spark.platform.logstore"} <= set(modules)
    for module in modules:
        path = ROOT / module.replace(".", "/")
        assert path.with_suffix(".py").exists() or (path / "__main__.py").exists(), (
            f"the Dockerfile runs `python -m {module}`, which is not in the repository"
        )
