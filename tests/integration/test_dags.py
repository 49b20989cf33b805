"""The DAGs in dags/ under the real Airflow: parsed by its DagBag, run by `airflow dags test`.

Every Airflow command runs in a subprocess with its own AIRFLOW_HOME (a tmp dir holding
a SQLite DB made by `airflow db migrate`), so nothing leaks into the pytest process or
into the developer's ~/airflow. A module's `airflow dags test` commands run in one such
process, in turn (`dags_tests`): Airflow and Spark start once for all of them; on the worker
that runs test_dags_dataflow.py first, this module's demo runs are among its commands
(`DEMO_RUNS`), and the metadata DB is migrated once for both (`migrated_home`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = ROOT / "dags"
AIRFLOW = Path(sys.executable).with_name("airflow")
EXPECTED_DAG_IDS = {
    "dataflow_demo", "dataflow_backfill", "dataflow_maintenance",
    "dataflow_daily__billing", "dataflow_daily__ad_sessions",
    "dataflow_microbatch__billing", "dataflow_microbatch__ad_sessions", "dataflow_microbatch_once",
    "dataflow_invoice_corrections",
}
DEMO_PARAMS = {"rows", "seed", "window", "master", "warehouse"}

MIGRATE_TIMEOUT_S = 300
DAG_TEST_TIMEOUT_S = 900
OUTPUT_TAIL_LINES = 80


def _airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """The caller's environment minus any Airflow settings, plus a throwaway Airflow home."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
    )
    env.update(extra)
    return env


def _run(
    name: str, command: list[str], env: dict[str, str], timeout: int, log: Path,
    expect_success: bool = True,
) -> subprocess.CompletedProcess:
    """Run a command, keep its whole output in `log`, fail with the output's tail if its
    exit status is not the expected one (zero, or non-zero with `expect_success=False`)."""
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, env=env, cwd=log.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode() if isinstance(exc.output, bytes) else (exc.output or "")
        log.write_text(output)
        pytest.fail(f"{name} did not finish in {timeout}s; output tail:\n{_tail(output)}")
    log.write_text(result.stdout)
    elapsed = time.monotonic() - started
    print(f"{name}: exit {result.returncode} after {elapsed:.0f}s (log: {log})")
    if (result.returncode == 0) != expect_success:
        pytest.fail(
            f"{name} exited {result.returncode} (full output: {log}); tail:\n"
            f"{_tail(result.stdout)}"
        )
    return result


@dataclass(frozen=True)
class DagsTest:
    """One `airflow dags test` command of `dags_tests`: its exit code and what it printed."""

    code: int
    stdout: str


# Each command of `dags_tests` in turn: Airflow's entry point, as the `airflow` executable
# calls it, with that command's arguments and environment; its output framed by two lines.
DAGS_TESTS = """
import json, os, sys, traceback
from airflow.__main__ import main
for name, argv, env in json.loads(sys.argv[1]):
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    sys.argv = ["airflow", *argv]
    print(f"=== command {name} starts", flush=True)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:  # what the command would die of, as it would print it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    print(f"=== command {name} exits {code}", flush=True)
    for key, value in saved.items():  # the next command sees the environment it was given
        if value is None:
            del os.environ[key]
        else:
            os.environ[key] = value
"""


def dags_tests(commands: dict[str, tuple[list[str], dict[str, str]]], env: dict[str, str],
               log: Path) -> dict[str, DagsTest]:
    """`airflow dags test ARGS` for each (ARGS, extra environment) of `commands`, in turn,
    in one Airflow process with `env`: its DAG runs' tasks run in that process, so Spark
    starts with the first task that needs it and later commands' tasks find it running, as
    the tasks of one run always do. Each command's exit code and output, by name."""
    sequence = json.dumps([(name, ["dags", "test", *argv], extra) for name, (argv, extra) in commands.items()])
    out = _run("airflow dags test (each command in turn)", [sys.executable, "-c", DAGS_TESTS, sequence],
               {**env, "PYTHONUNBUFFERED": "1"}, DAG_TEST_TIMEOUT_S, log).stdout
    runs = {}
    for name in commands:
        found = re.search(rf"^=== command {name} starts\n(.*?)^=== command {name} exits (-?\d+)$", out, re.S | re.M)
        assert found, f"no output of command {name} (full output: {log}); tail:\n{_tail(out)}"
        runs[name] = DagsTest(int(found.group(2)), found.group(1))
    return runs


def _dag_run_state(output: str) -> str:
    """The final state `airflow dags test` logs for the run ("success", "failed", ...)."""
    finished = [line for line in output.splitlines() if "DagRun Finished" in line]
    assert finished, f"no 'DagRun Finished' line in the output; tail:\n{_tail(output)}"
    return finished[-1].split(" state=", 1)[1].split(",", 1)[0]


def _tail(output: str) -> str:
    return "\n".join(output.splitlines()[-OUTPUT_TAIL_LINES:])


def migrated_home(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh Airflow home holding a migrated SQLite metadata DB: a copy of one `airflow db
    migrate` made once per test process (test_dags.py and test_dags_dataflow.py go to one
    worker, tests/conftest.py's ONE_WORKER), not a migration per module (half a minute of
    CPU on a loaded machine, for the same empty schema)."""
    assert AIRFLOW.exists(), f"no airflow CLI next to {sys.executable}: run `make setup` first"
    template = tmp_path_factory.getbasetemp() / "airflow-migrated"
    if not (template / "airflow.db").exists():
        template.mkdir(exist_ok=True)
        _run("airflow db migrate", [str(AIRFLOW), "db", "migrate"], _airflow_env(template),
             MIGRATE_TIMEOUT_S, template / "db-migrate.log")
    home = tmp_path_factory.mktemp(name)
    shutil.copy2(template / "airflow.db", home / "airflow.db")
    return home


DAGBAG_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization

bag = DagBag()


def refusals(dag, confs):
    # What creating a run with each conf says (the check Airflow makes for `airflow dags
    # test --conf`, the trigger form and the REST API alike): None when accepted.
    params = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag)).params
    out = []
    for conf in confs:
        try:
            params.deep_merge(conf).validate()
            out.append(None)
        except Exception as exc:
            out.append(str(exc))
    return out


confs = json.loads(sys.argv[1])
print("DAGBAG-JSON " + json.dumps({
    "dag_ids": sorted(bag.dag_ids),
    "import_errors": {str(path): str(error) for path, error in bag.import_errors.items()},
    "params": {
        dag_id: {name: dag.params.get_param(name).resolve() for name in dag.params}
        for dag_id, dag in bag.dags.items()
    },
    "schedules": {dag_id: repr(dag.schedule) for dag_id, dag in bag.dags.items()},
    "shapes": {
        dag_id: {"schedule": str(getattr(dag.timetable, "summary", dag.schedule)),
                 "paused": dag.is_paused_upon_creation, "max_active_runs": dag.max_active_runs,
                 "catchup": dag.catchup, "tasks": sorted(dag.task_ids)}
        for dag_id, dag in bag.dags.items()
    },
    "optional": {
        dag_id: sorted(name for name in dag.params
                       if "null" in (dag.params.get_param(name).schema.get("type") or []))
        for dag_id, dag in bag.dags.items()
    },
    "refusals": {dag_id: refusals(bag.dags[dag_id], tried) for dag_id, tried in confs.items()},
    "spark_imported": "pyspark" in sys.modules,
}))
"""


def dagbag_probe(log_dir: Path, env: dict[str, str], confs: dict[str, list[dict]] | None = None) -> dict:
    """What Airflow's DagBag makes of dags/ in a fresh process with `env`: DAG ids, import
    errors, params, schedules and shapes, and what creating a run of DAG d with each conf
    of `confs[d]` would say (the refusal's message, None when accepted)."""
    result = _run("DagBag probe", [sys.executable, "-c", DAGBAG_PROBE, json.dumps(confs or {})], env,
                  MIGRATE_TIMEOUT_S, log_dir / "dagbag.log")
    line = next(line for line in result.stdout.splitlines() if line.startswith("DAGBAG-JSON "))
    return json.loads(line.removeprefix("DAGBAG-JSON "))


BAD_DEMO_PARAMS = [
    ({"window": "abc"}, "window", "'abc' does not match"),
    ({"window": "0m"}, "window", "'0m' does not match"),
    ({"rows": -5}, "rows", "-5 is less than or equal to the minimum of 0"),
]
ENV_MASTER = "spark://from-env.example:7077"


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory) -> dict:
    """One DagBag probe for this module's tests, with a master and warehouse in the environment."""
    home = tmp_path_factory.mktemp("dagbag")
    env = _airflow_env(home, DATAFLOW_SPARK_MASTER=ENV_MASTER, DATAFLOW_WAREHOUSE=str(home / "env-warehouse"))
    bag = dagbag_probe(home, env, {"dataflow_demo": [conf for conf, _, _ in BAD_DEMO_PARAMS] + [{"rows": 5}]})
    return {**bag, "home": home}


def test_dagbag_loads_every_dag_without_errors(dagbag):
    assert dagbag["import_errors"] == {}
    assert set(dagbag["dag_ids"]) == EXPECTED_DAG_IDS
    params = dagbag["params"]["dataflow_demo"]
    assert set(params) == DEMO_PARAMS
    # Master and warehouse default to the Airflow worker's environment.
    assert params["master"] == ENV_MASTER
    assert params["warehouse"] == str(dagbag["home"] / "env-warehouse")
    assert dagbag["optional"]["dataflow_demo"] == ["warehouse"]  # the form accepts it empty
    assert isinstance(params["rows"], int) and params["rows"] > 0
    # Triggered by hand only, and cheap to parse: Spark is imported when the task runs.
    assert dagbag["schedules"]["dataflow_demo"] == "None"
    assert dagbag["spark_imported"] is False


def demo_commands(base: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The demo DAG's `airflow dags test` commands (ARGS, extra environment), writing under
    `base`: a run into Delta, a run the job refuses, and a conf the form refuses."""
    conf = {"rows": 2000, "seed": 7, "window": "30m", "master": "local[2]", "warehouse": str(base / "warehouse")}
    # The form accepts any whole seed; the job refuses one beyond 64 bits, before Spark starts.
    failing = {"seed": 2**64, "master": "local[1]", "warehouse": str(base / "wh")}
    return {
        "bad_params": (["dataflow_demo", "--conf", json.dumps(BAD_DEMO_PARAMS[-1][0])], {}),
        "failing": (["dataflow_demo", "--conf", json.dumps(failing)], {}),
        # $DATAFLOW_WAREHOUSE is what the run must NOT use: its conf wins.
        "demo": (["dataflow_demo", "--conf", json.dumps(conf)], {"DATAFLOW_WAREHOUSE": str(base / "env-warehouse")}),
    }


DEMO_RUNS: list[tuple[dict[str, DagsTest], Path]] = []
"""`demo_commands`' runs and their folder, once made in this test process: by `demo_runs`, or
among test_dags_dataflow.py's commands, in its Airflow process (one Airflow and one Spark
start for both modules, which tests/conftest.py sends to one worker)."""


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory) -> tuple[dict[str, DagsTest], Path]:
    """The demo DAG's `airflow dags test` commands (`demo_commands`), in one Airflow process,
    and their folder."""
    if not DEMO_RUNS:
        base = tmp_path_factory.mktemp("demo_runs")
        home = migrated_home(tmp_path_factory, "airflow_home")
        DEMO_RUNS.append((dags_tests(demo_commands(base), _airflow_env(home), base / "dags-tests.log"), base))
    return DEMO_RUNS[0]


def test_dags_test_runs_the_demo_job_into_delta(demo_runs):
    from deltalake import DeltaTable

    from dataflow_core.examples.jobs.demo_job import INPUT_TABLE, OUTPUT_TABLE

    runs, base = demo_runs
    result, warehouse = runs["demo"], base / "warehouse"
    assert result.code == 0 and _dag_run_state(result.stdout) == "success"
    assert "in = accepted + quarantined + dropped as late" in result.stdout  # the job's ledger
    assert not (base / "env-warehouse").exists(), "the run used $DATAFLOW_WAREHOUSE instead of its conf"
    for table in (INPUT_TABLE, OUTPUT_TABLE):
        assert (warehouse / table / "_delta_log").is_dir(), f"no Delta table {table} in {warehouse}"

    # Read back with delta-rs, an independent Delta reader: the params reached the job.
    events = DeltaTable(str(warehouse / INPUT_TABLE)).to_pyarrow_table()
    assert events.num_rows == 2000
    counts = DeltaTable(str(warehouse / OUTPUT_TABLE)).to_pyarrow_table().to_pylist()
    assert counts, f"{OUTPUT_TABLE} is empty"
    assert 0 < sum(row["views"] for row in counts) <= 2000
    sizes = {row["window_end"] - row["window_start"] for row in counts}
    assert sizes == {timedelta(minutes=30)}, f"window sizes in {OUTPUT_TABLE}: {sizes}"


def test_a_failing_job_fails_the_dag_run(demo_runs):
    runs, base = demo_runs
    result = runs["failing"]
    assert result.code != 0 and _dag_run_state(result.stdout) == "failed"
    assert "dataflow_core.examples.jobs.demo_job would refuse its parameters: invalid sample parameter seed" in result.stdout
    assert not (base / "wh").exists()


def test_the_form_refuses_bad_demo_params_before_a_run_exists(dagbag, demo_runs):
    refusals = dagbag["refusals"]["dataflow_demo"]
    for (_, param, reason), refused in zip(BAD_DEMO_PARAMS, refusals):
        assert refused and f"Invalid input for param {param}: {reason}" in refused, refused
    assert refusals[-1] is None, "a good value passes"
    # The command line refuses the same way, before a run exists.
    _, param, reason = BAD_DEMO_PARAMS[-1]
    result = demo_runs[0]["bad_params"]
    assert result.code != 0 and f"Invalid input for param {param}: {reason}" in result.stdout
    assert "DagRun Finished" not in result.stdout


def test_airflow_env_script_points_airflow_at_the_project(tmp_path):
    script = ROOT / "scripts" / "airflow-env.sh"
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AIRFLOW", "DATAFLOW_"))}  # fmt: skip
    sourced = subprocess.run(
        ["bash", "-c", f'source "{script}" && echo "$AIRFLOW_HOME|$DATAFLOW_WAREHOUSE"'],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    assert sourced.stdout.strip() == f"{ROOT / '.airflow'}|{ROOT / 'warehouse'}"

    # Executed with a command, it runs the command inside that environment: ask Airflow's
    # own configuration which settings it ended up with.
    env["AIRFLOW_HOME"] = str(tmp_path)
    probe = (
        "import json; from airflow.configuration import conf; print('CONF ' + json.dumps(["
        "conf.get('core', 'dags_folder'), conf.getboolean('core', 'load_examples'), "
        "conf.get('database', 'sql_alchemy_conn'), conf.get('core', 'plugins_folder')]))"
    )
    result = _run(
        "airflow-env.sh python", [str(script), sys.executable, "-c", probe], env,
        MIGRATE_TIMEOUT_S, tmp_path / "config.log",
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith("CONF "))
    assert json.loads(line.removeprefix("CONF ")) == [
        str(DAGS_FOLDER), False, f"sqlite:///{tmp_path}/airflow.db",
        str(ROOT / "dataflow_core" / "airflow" / "plugin" / "folder"),  # the pane explorer
    ]
