"""The pipeline DAGs (backfill, daily, micro-batch, maintenance) under the real Airflow:
`airflow dags test` with a SQLite metadata DB, local Spark, Delta tables in tmp warehouses.

One module-scoped Airflow home serves every test, and every DAG run the tests look at is
made by one Airflow process (`dag_runs`): Airflow's own command-line entry point
(`airflow.__main__.main`, what the `airflow` executable runs) called once per `airflow dags
test ...` command, in turn, each with its own warehouse in the environment, as a user's
shell would run them one after another. Each command runs all of a DAG's tasks in that
process; Spark starts with the first task that needs it and later commands' tasks find it
running (and switch to their warehouse), as several tasks of one run always have. The
warehouses are written first, through the test worker's shared Spark session.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from test_dags import (  # same folder: pytest puts it on sys.path
    DEMO_RUNS, ROOT, DagsTest, _airflow_env, _dag_run_state, dagbag_probe, dags_tests, demo_commands, migrated_home,
)

pytestmark = pytest.mark.integration

SAMPLE_ROWS = 3000


def _sample(spark, warehouse: Path, **overrides) -> None:
    from dataflow_core.sample import SampleConfig
    from dataflow_core.sample.write import write_sample
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF

    spark.conf.set(WAREHOUSE_CONF, str(warehouse))
    config = SampleConfig(**{"rows": SAMPLE_ROWS, "seed": 11, "span_hours": 48, **overrides})
    write_sample(spark, config, table="video_events", progress=lambda _m: None)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Path:
    return migrated_home(tmp_path_factory, "airflow_dataflow")


@pytest.fixture(scope="module")
def sample_wh(spark, tmp_path_factory) -> Path:
    """A warehouse with a 3,000-row sample over 2024-05-01 and 02."""
    path = tmp_path_factory.mktemp("dags_warehouse")
    _sample(spark, path)
    return path


@pytest.fixture(scope="module")
def live_wh(spark, tmp_path_factory) -> Path:
    """A warehouse of its own for micro-batches (no backfill has written its pane logs)."""
    path = tmp_path_factory.mktemp("live_warehouse")
    _sample(spark, path, rows=800)
    return path


@pytest.fixture(scope="module")
def bad_wh(spark, tmp_path_factory) -> Path:
    """A warehouse whose sample has a quarter of its rows malformed."""
    path = tmp_path_factory.mktemp("bad_warehouse")
    _sample(spark, path, rows=2000, malformed_share=0.25)
    return path


@pytest.fixture(scope="module")
def dag_runs(airflow_home, sample_wh, live_wh, bad_wh, tmp_path_factory) -> dict[str, DagsTest]:
    """The DAG runs the tests look at, by name, made by one Airflow process (see the module
    docstring). The first needs no Spark and must not start it; the backfill's day comes
    before the daily DAG's run of the same day, and maintenance after both, on the tables
    they wrote."""
    base = tmp_path_factory.mktemp("dag_runs")
    (base / "broken_pipeline.py").write_text(BROKEN_PIPELINE)

    def test(dag_id: str, warehouse: Path, *args: str, conf=None, **env: str) -> tuple[list[str], dict[str, str]]:
        argv = [dag_id, *args] + (["--conf", json.dumps(conf)] if conf is not None else [])
        return argv, {"DATAFLOW_WAREHOUSE": str(warehouse), **env}

    day = {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02"}
    commands = {
        "refused": test("dataflow_backfill", base / "empty", conf={}),
        "backfill": test("dataflow_backfill", sample_wh,
                         conf={"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-03", "days_at_once": 2}),
        "bad_input": test("dataflow_backfill", bad_wh, conf=day),
        "daily": test("dataflow_daily__billing", sample_wh, "2024-05-02T00:00:00+00:00"),
        "maintenance": test("dataflow_maintenance", sample_wh, DATAFLOW_RESULTS_FILE_MB="8"),
        "microbatch": test("dataflow_microbatch__ad_sessions", live_wh),
        "broken_microbatch": test("dataflow_microbatch__broken_counts", live_wh),
    }
    # test_dags.py's demo DAG runs come last, in this process too, unless that module made
    # them already (test_dags.DEMO_RUNS): its job finds Spark running, as a second job of
    # one driver does, and switches to the warehouse its conf names.
    demo_base = tmp_path_factory.mktemp("demo_runs")
    demo = {} if DEMO_RUNS else demo_commands(demo_base)
    commands.update({f"demo_{name}": command for name, command in demo.items()})
    # The broken pipeline is one more registered pipeline for all of them (the registry
    # reads $DATAFLOW_PIPELINES once per process).
    env = _airflow_env(airflow_home, DATAFLOW_SPARK_MASTER="local[2]", DATAFLOW_PIPELINES="broken_pipeline",
                       PYTHONPATH=f"{base}:{ROOT}", PYTHONUNBUFFERED="1")
    runs = dags_tests(commands, env, base / "dags-tests.log")
    if demo:
        DEMO_RUNS.append(({name: runs.pop(f"demo_{name}") for name in demo}, demo_base))
    return runs


def returned(output: str, task_id: str) -> str:
    """The 'Returned value was: ...' line of a task (the XCom the task pushed)."""
    lines = [line for line in output.splitlines() if "Returned value was:" in line]
    for line in lines:
        if f"task_id={task_id}" in line or f"'{task_id}'" in line:
            return line
    return "\n".join(lines)


def test_backfill_dag_runs_every_day_and_gates_the_output(dag_runs, sample_wh):
    from deltalake import DeltaTable

    run = dag_runs["backfill"]
    out = run.stdout
    assert run.code == 0 and _dag_run_state(out) == "success"
    assert "backfill billing over [2024-05-01, 2024-05-03): 2 day(s), batch, 2 day(s) at once" in out
    assert "suite billing_input: PASSED" in out
    assert "suite billing_panes: PASSED" in out and "suite billing_results: PASSED" in out
    # One mapped task per day, each its own backfill run; the summary adds their ledgers.
    day_runs = re.findall(r"run (backfill-[0-9a-f]+): read (\d+),", out)
    assert len(day_runs) == 2 and len({r for r, _ in day_runs}) == 2
    total = sum(int(n) for _, n in day_runs)
    summary = next(line for line in out.splitlines() if "'ledger_ok': True" in line and "'run_ids'" in line)
    assert f"'read': {total}," in summary
    assert re.search(r"read = accepted \+ duplicates \+ quarantined: [\d,]+ = .* OK", out)

    # The output with an independent Delta reader: windows of both days, from the two runs.
    rows = DeltaTable(str(sample_wh / "billing")).to_pyarrow_table().to_pylist()
    assert rows and {r["run_id"] for r in rows} == {r for r, _ in day_runs}
    assert {str(r["window_start"].date()) for r in rows} == {"2024-05-01", "2024-05-02"}
    docs = sample_wh / "_data_docs" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert f"Data Docs: {docs}" in out and docs.is_file()


def _asset_events(home: Path) -> list[dict]:
    """The asset events in the Airflow home's metadata DB (SQLite): asset, source and extra."""
    import sqlite3

    with sqlite3.connect(home / "airflow.db") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute("SELECT a.name, e.source_dag_id, e.source_task_id, e.extra FROM asset_event e "
                          "JOIN asset a ON a.id = e.asset_id ORDER BY e.id").fetchall()
    return [{**dict(r), "extra": json.loads(r["extra"] or "{}")} for r in rows]


def test_a_backfill_day_that_changed_windows_publishes_them_as_an_asset_event(dag_runs, airflow_home, sample_wh,
                                                                             dagbag):
    """Each day of the backfill DAG's run wrote every window of its day (a first backfill): one
    event per day for billing's results asset naming exactly those windows, from the Delta
    table; the daily DAG's run of a day the backfill wrote changed nothing and published none.
    The consumer DAG is scheduled on that asset (`airflow dags test` runs no scheduler, which
    is what starts an asset-scheduled run: its schedule is checked in the DagBag)."""
    from decimal import Decimal

    from deltalake import DeltaTable

    from dataflow_core.model.time import format_instant

    assert dag_runs["backfill"].code == 0 and dag_runs["daily"].code == 0
    events = [e for e in _asset_events(airflow_home) if e["source_dag_id"] in ("dataflow_backfill", "dataflow_daily__billing")]
    assert {(e["name"], e["source_dag_id"], e["source_task_id"]) for e in events} == {
        ("dataflow.results.billing", "dataflow_backfill", "backfill_day")}, events
    rows = DeltaTable(str(sample_wh / "billing")).to_pyarrow_table().to_pylist()
    by_run = {e["extra"]["run_id"]: e["extra"] for e in events}
    assert len(events) == 2 and set(by_run) == {r["run_id"] for r in rows}

    def iso(t) -> str:
        return format_instant(int(t.timestamp() * 1000))

    for run_id, extra in by_run.items():
        written = [r for r in rows if r["run_id"] == run_id]
        assert extra["reason"] == "backfill" and extra["count"] == len(written) == extra["new"]
        assert extra["spans"] == sorted([iso(a), iso(b)] for a, b in {(r["window_start"], r["window_end"]) for r in written})
        assert extra["range"] == {"start": iso(min(r["window_start"] for r in written)),
                                  "end": iso(max(r["window_end"] for r in written))}
        top = max(written, key=lambda r: abs(r["value"]))
        assert abs(Decimal(extra["largest"][0]["new"])) == abs(top["value"]) and len(extra["largest"]) == 5
    assert "dataflow.results.billing" in dagbag["schedules"]["dataflow_invoice_corrections"]


def test_a_request_a_schema_cannot_refuse_fails_the_first_task(dag_runs):
    """A request whose input table is missing: check_request fails the run before Spark starts
    (the checks themselves: test_backfill_requests_a_schema_cannot_refuse_are_refused)."""
    result = dag_runs["refused"]
    assert result.code != 0 and _dag_run_state(result.stdout) == "failed"
    assert "FAILED: input table 'video_events' not found in warehouse" in result.stdout
    assert "JVM" not in result.stdout and "SparkSession" not in result.stdout  # no Spark started
    assert "Starting Spark" not in result.stdout


@pytest.mark.parametrize(
    ("conf", "env", "reason"),
    [
        ({"start": "2024-05-03", "end": "2024-05-01"}, {},
         "end 2024-05-01 is not after start 2024-05-03: the range [start, end) is empty"),
        ({"start": "2024-05-01", "end": "2024-05-09"}, {"DATAFLOW_BACKFILL_MAX_DAYS": "3"},
         "range [2024-05-01, 2024-05-09) is 8 days, more than the maximum of 3"),
        ({}, {}, "input table 'video_events' not found in warehouse"),
        ({"mode": "replay", "require_approval": True}, {},
         "require_approval plans the corrections of a batch backfill; a replay writes the pane history"),
    ],
)
def test_backfill_requests_a_schema_cannot_refuse_are_refused(monkeypatch, tmp_path, conf, env, reason):
    from dataflow_core.airflow.requests import check_request
    from dataflow_core.errors import DataflowError

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    params = {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02", **conf}
    with pytest.raises(DataflowError) as refused:
        check_request(params, str(tmp_path / "empty"))
    assert reason in str(refused.value) and "\n" not in str(refused.value)


BAD_FORMS = [
    ({"pipeline": "no_such_pipeline"}, "pipeline", "'no_such_pipeline' is not one of"),
    ({"start": "May 1st"}, "start", "'May 1st' is not a 'date'"),
    ({"mode": "fast"}, "mode", "'fast' is not one of ['batch', 'replay']"),
    ({"days_at_once": 0}, "days_at_once", "0 is less than or equal to the minimum of 0"),
    ({"batch_interval": "0m"}, "batch_interval", "'0m' does not match"),
]


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory) -> dict:
    """One DagBag probe (test_dags.dagbag_probe) for this module: the DAGs' shapes, and what
    creating a backfill run with each of BAD_FORMS (and one good conf) says."""
    home = tmp_path_factory.mktemp("dagbag")
    env = _airflow_env(home, DATAFLOW_MICROBATCH_SCHEDULE__AD_SESSIONS="*/15 * * * *")
    good = {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02", "days_at_once": 1}
    return dagbag_probe(home, env, {"dataflow_backfill": [conf for conf, _, _ in BAD_FORMS] + [good]})


def test_backfill_form_refuses_values_of_the_wrong_shape(dagbag):
    """What the form, the REST API and `airflow dags test --conf` all check before a run
    exists (test_dags.py sees the command line refuse, test_browser.py the form)."""
    refusals = dagbag["refusals"]["dataflow_backfill"]
    for (_, param, reason), refused in zip(BAD_FORMS, refusals):
        assert refused and f"Invalid input for param {param}: {reason}" in refused, refused
    assert refusals[-1] is None, "a good request passes"


def test_a_bad_input_fails_the_input_gate_quarantines_rows_and_the_run(dag_runs, bad_wh):
    from deltalake import DeltaTable

    result = dag_runs["bad_input"]
    bad, out = bad_wh, result.stdout
    assert result.code != 0 and _dag_run_state(out) == "failed"
    failed = next(line for line in out.splitlines() if "FAILED: input gate on video_events FAILED" in line)
    assert re.search(r"user_id_not_null \(\d+ of \d+ rows\)", failed)
    assert re.search(r"[\d,]+ rows quarantined in billing__quarantine", failed)
    quarantine = DeltaTable(str(bad / "billing__quarantine")).to_pyarrow_table().to_pylist()
    assert len(quarantine) > 20
    assert {r["pipeline"] for r in quarantine} == {"billing"}
    assert any("user_id_not_null" in r["quarantine_reason"] for r in quarantine)
    assert not (bad / "billing_panes").exists()  # no day ran


def test_daily_dag_backfills_its_data_interval(dag_runs):
    result = dag_runs["daily"]
    out = result.stdout
    assert result.code == 0 and _dag_run_state(out) == "success"
    assert "range [2024-05-01T00:00:00Z, 2024-05-02T00:00:00Z) of table video_events" in out
    assert "backfill billing [2024-05-01, 2024-05-02) batch" in out
    assert "backfill of billing over [2024-05-01, 2024-05-02), batch: 1 day(s)" in out


def test_maintenance_dag_optimizes_and_vacuums(dag_runs, sample_wh):
    """On the tables the backfill and daily DAGs wrote (billing's output in several files)."""
    from deltalake import DeltaTable

    result = dag_runs["maintenance"]
    out = result.stdout
    assert result.code == 0 and _dag_run_state(out) == "success"
    assert re.search(r"billing_panes: OPTIMIZE compacted \d+ file\(s\) into \d+; VACUUM kept 168 h", out)
    # the results table in files of at most $DATAFLOW_RESULTS_FILE_MB (test_delta_roundtrip shows what that does)
    assert re.search(r"billing: OPTIMIZE compacted \d+ file\(s\) into \d+ of at most 8 MiB; VACUUM kept 168 h", out)
    assert "pipeline ad_sessions: no output or state tables yet" in out
    history = DeltaTable(str(sample_wh / "billing_panes")).history()
    assert {"OPTIMIZE", "VACUUM START", "VACUUM END"} & {h["operation"] for h in history}
    # The results hold the rows they held before OPTIMIZE (the version before it, by time travel).
    results = DeltaTable(str(sample_wh / "billing"))
    optimized = min(h["version"] for h in results.history() if h["operation"] == "OPTIMIZE")
    before = DeltaTable(str(sample_wh / "billing"), version=optimized - 1).to_pyarrow_table()
    assert before.num_rows > 0 and results.to_pyarrow_table().num_rows == before.num_rows


def test_schedules_and_shapes(dagbag):
    dags = dagbag["shapes"]
    assert dags["dataflow_backfill"]["tasks"] == [
        "apply_plan", "approve_backfill", "backfill_day", "check_request", "days_of", "gate_input", "gate_output",
        "plan_backfill", "reject_plan", "route", "summary"]
    for name in ("billing", "ad_sessions"):
        micro = dags[f"dataflow_microbatch__{name}"]
        assert micro["paused"] and micro["max_active_runs"] == 1 and not micro["catchup"]
        assert micro["tasks"] == ["gate_output", "microbatch"]
        assert "CronDataIntervalTimetable(expression='0 0 * * *'" in dags[f"dataflow_daily__{name}"]["schedule"]
    assert dags["dataflow_microbatch__billing"]["schedule"] == "*/5 * * * *"
    assert dags["dataflow_microbatch__ad_sessions"]["schedule"] == "*/15 * * * *"
    assert dags["dataflow_maintenance"]["tasks"] == ["maintain__ad_sessions", "maintain__billing"]


BROKEN_PIPELINE = '''
"""A pipeline whose combiner calls itself a count but emits negative values: every pane it
writes breaks the pane gate's value_possible rule."""
from dataflow_core.model.accumulation import AccumulationMode
from dataflow_core.model.combiners import CountFn
from dataflow_core.model.strategy import WindowingStrategy
from dataflow_core.model.time import parse_duration
from dataflow_core.model.triggers import AfterWatermark
from dataflow_core.model.watermarks import HeuristicWatermark
from dataflow_core.model.windows import FixedWindows
from dataflow_core.pipelines import PipelineSpec, StageSpec, register


class NegativeCount(CountFn):
    name = "count"

    def extract_output(self, acc):
        return -acc


register(PipelineSpec(
    name="broken_counts", description="views per ad and hour, negated (a broken combiner)",
    input_table="video_events", where="ad_id IS NOT NULL", key={"ad_id": "ad_id"}, value="1",
    partition_column="event_date", quality_suite="video_events",
    watermark=lambda: HeuristicWatermark(bound=parse_duration("2m")),
    stages=(StageSpec(output="broken_counts", key_columns=("ad_id",), value_type="bigint",
                      strategy=WindowingStrategy(window_fn=FixedWindows(parse_duration("1h")), trigger=AfterWatermark(),
                                                 accumulation=AccumulationMode.DISCARDING,
                                                 allowed_lateness=parse_duration("1h"), combiner=NegativeCount())),),
))
'''


def test_microbatch_dag_gates_the_panes_the_batch_wrote(dag_runs, live_wh):
    from dataflow_core.query import query

    result = dag_runs["microbatch"]
    out = result.stdout
    assert result.code == 0 and _dag_run_state(out) == "success"
    assert "batches written: batch-0" in out
    # Both stages' gates checked the panes the batch wrote (run id batch-N), not 0 rows.
    for table in ("ad_sessions_panes", "ad_short_sessions_panes"):
        written = query(f"SELECT run_id, count(*) AS n FROM {table} GROUP BY run_id", str(live_wh)).table.to_pylist()
        assert len(written) == 1 and written[0]["run_id"] == "batch-0" and written[0]["n"] > 0
        checked = re.search(rf"panes gate on {table}: ([\d,]+) rows checked", out)
        assert checked and int(checked.group(1).replace(",", "")) == written[0]["n"]
        assert f"suite {table}: PASSED" in out


def test_a_micro_batch_that_writes_a_broken_pane_fails_its_gate(dag_runs, live_wh):
    from dataflow_core.query import query

    result = dag_runs["broken_microbatch"]
    out = result.stdout
    assert result.code != 0 and _dag_run_state(out) == "failed"
    failed = [line for line in out.splitlines() if "FAILED: panes gate on broken_counts_panes FAILED" in line]
    assert failed and re.search(r"value_possible \(\d+ of \d+ rows\)", failed[0]), out[-3000:]
    panes = query("SELECT count(*) AS n FROM broken_counts_panes", str(live_wh)).table.to_pylist()[0]["n"]
    quarantined = query("SELECT count(*) AS n, min(quarantine_reason) AS r FROM broken_counts_panes_quarantine",
                        str(live_wh)).table.to_pylist()[0]
    assert panes > 0 and quarantined["n"] == panes and "value_possible" in quarantined["r"]


def test_a_gate_over_a_run_that_wrote_panes_but_checked_none_fails(spark, dag_runs, live_wh, tmp_path):
    """The old micro-batch bug: the gate filtered on a run id the pane log does not use. The
    pane log is the one the micro-batch DAG's run wrote (`dag_runs`, run id batch-0)."""
    from dataflow_core.quality.gates import gate_outputs
    from tests.integration.test_microbatch import in_warehouse

    assert dag_runs["microbatch"].code == 0
    with in_warehouse(spark, live_wh):
        outcomes = gate_outputs(spark, "ad_sessions", ["ad_sessions-batch-0"], "test", docs_dir=tmp_path / "docs",
                                written={"ad_sessions": 59})
    panes = outcomes[0]
    assert panes.table == "ad_sessions_panes" and not panes.success and panes.rows == 0
    assert ("0 panes checked although run(s) ad_sessions-batch-0 wrote 59 panes and retractions to "
            "ad_sessions_panes: the gate's run ids do not match the pane log's") in panes.summary()


def test_jvm_lines_are_logged_at_their_own_level():
    import logging

    from dataflow_core.airflow.tasks import jvm_line_level

    assert jvm_line_level("WARNING: Using incubator modules: jdk.incubator.vector")[0] == logging.WARNING
    assert jvm_line_level("26/11/24 09:36:23 WARN MapPartitionsRDD: RDD 316 was locally checkpointed")[0] == logging.WARNING
    assert jvm_line_level("26/11/24 09:57:57 ERROR Executor: Exception in task 0.0")[0] == logging.ERROR
    assert jvm_line_level("26/11/24 09:57:57 INFO SparkContext: Running Spark")[0] == logging.INFO
    # A stack trace's continuation keeps the level of its first line.
    assert jvm_line_level("  at org.apache.spark.Foo(Foo.scala:1)", logging.ERROR)[0] == logging.ERROR
    assert jvm_line_level("Setting default log level to \"WARN\".")[0] == logging.INFO
