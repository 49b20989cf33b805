"""A newcomer's path through the real UI, in headless Chromium driven by Playwright.

`scripts/airflow-standalone.sh start` (what `make airflow` runs) starts Airflow standalone
over a small generated sample in a throwaway home and warehouse; the browser logs in with the
generated admin password, fills in and submits the `dataflow_backfill` trigger form (after
seeing it refuse a bad value) for one day, and watches the run's grid until the day's mapped
task and the gates have finished (runs of several days, days at once: test_dags_dataflow.py); it reads `summary`'s log (the ledger, logged as it happens, outside the
collapsed "Post Execute" group) and opens the pane explorer (Browse -> Pane explorer) on a key,
whose diagram must draw exactly the panes and retractions of the pane log it lists. The Delta
output is then read with Spark SQL. Last, `make airflow-stop` is run while a task and its Spark
JVM are running, and no process of that Airflow may be left. Between the two, on the same
Airflow (issue 51): `dataflow_microbatch_once` runs a batch from its form while the scheduled
micro-batch DAG stays paused; the explorer draws the watermark and no two labels' rendered
boxes overlap; the Data Docs open from the link the gate logs, styled, with every request to
another host refused; a backfill with "Require approval" shows its plan in the approval task
and the explorer's plan view, lands as previewed once approved, and changes nothing once
rejected. Screenshots (the form's refusal, the form, the grid, the mapped days, the summary
log, the explorer, the one-off micro-batch, the watermark, the Data Docs, the approval) are kept
in `$DATAFLOW_TEST_ARTIFACTS` (default `test-artifacts/browser/`).

Needs Debian's `chromium` (`/usr/bin/chromium`; `.ci/run` installs it) and the `playwright`
package; Playwright never downloads a browser here.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("DATAFLOW_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("DATAFLOW_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "browser"
START_TIMEOUT_S = 300
RUN_TIMEOUT_S = 1500  # generous: on a loaded 2-core machine the run took 16 min
CHROMIUM_ARGS = [  # no sandbox as root; nothing that phones home on a closed network
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def airflow_ui(tmp_path_factory):
    """Airflow standalone as `make airflow` starts it, in a temporary home and warehouse."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; .ci/run does)")
    home = tmp_path_factory.mktemp("airflow_ui")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DATAFLOW_"))}
    port = _free_port()
    env.update(
        AIRFLOW_HOME=str(home / "airflow"),
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__CORE__PARALLELISM="2",
        # The DAG files do not change during the test: parse them when Airflow starts, not
        # again every 30 s (each parse imports the project's pipelines, on a busy machine).
        AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="600",
        DATAFLOW_WAREHOUSE=str(home / "warehouse"),
        DATAFLOW_SPARK_MASTER="local[2]",
        # The suite's JVM flags and class archive (tests/jvm_archive.py) for the tasks' JVMs.
        DATAFLOW_SPARK_JAVA_OPTS=os.environ.get("DATAFLOW_SPARK_JAVA_OPTS", ""),
        DATAFLOW_SAMPLE_ROWS="3000",
        PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
    )
    script = ROOT / "scripts" / "airflow-standalone.sh"
    started = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True,
                             timeout=START_TIMEOUT_S)
    print(started.stdout[-3000:], started.stderr[-3000:])
    try:
        assert started.returncode == 0, f"make airflow's script failed:\n{started.stdout}\n{started.stderr}"
        assert f"Airflow is up: http://localhost:{port}" in started.stdout
        assert "log in as user: admin   password: " in started.stdout
        passwords = json.loads((home / "airflow" / "simple_auth_manager_passwords.json.generated").read_text())
        yield {"url": f"http://localhost:{port}", "password": passwords["admin"], "env": env,
               "warehouse": home / "warehouse", "home": home}
    finally:
        stopped = subprocess.run([str(script), "stop"], env=env, capture_output=True, text=True, timeout=120)
        print(stopped.stdout, stopped.stderr)
        _kill_leftovers(home / "airflow")
        log = home / "airflow" / "standalone.log"
        if log.exists():
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, ARTIFACTS / "standalone.log")


def _processes_of(airflow_home: Path) -> dict[int, str]:
    """pid -> command line of every live process carrying this Airflow's marker
    (`DATAFLOW_AIRFLOW_INSTANCE`, which scripts/airflow-standalone.sh gives everything it starts)."""
    marker = f"DATAFLOW_AIRFLOW_INSTANCE={airflow_home}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    with open(f"/proc/{name}/cmdline", "rb") as c:
                        found[int(name)] = c.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
    return found


def _kill_leftovers(airflow_home: Path) -> None:
    """Whatever a failed test left behind (the stop test asserts there is nothing)."""
    import signal

    for pid in _processes_of(airflow_home):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _api(ui, method: str, path: str, body=None, token=None):
    request = urllib.request.Request(
        ui["url"] + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def test_backfill_from_the_trigger_form_in_a_real_browser(airflow_ui, spark):
    from playwright.sync_api import Error as PlaywrightError, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    url = airflow_ui["url"]
    token = _api(airflow_ui, "POST", "/auth/token",
                 {"username": "admin", "password": airflow_ui["password"]})["access_token"]

    def runs() -> list[dict]:
        return _api(airflow_ui, "GET", "/api/v2/dags/dataflow_backfill/dagRuns", token=token)["dag_runs"]

    state = None
    offline_rows = 0
    summary_text = ""
    explorer: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = _logged_in_page(browser, airflow_ui)
        try:
            # The DAG may still be on its way from the dag-processor to the UI.
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    page.goto(url + "/dags/dataflow_backfill", wait_until="networkidle")
                except PlaywrightError as exc:  # the UI's own redirect may abort or replace this navigation
                    assert "ERR_ABORTED" in str(exc) or "interrupted by another navigation" in str(exc), exc
                if page.get_by_text("check_request").count():
                    break
                assert time.monotonic() < deadline, "dataflow_backfill never showed up in the UI"
                page.wait_for_timeout(3000)

            page.get_by_role("button", name="Trigger").first.click()
            form = page.get_by_role("dialog")
            form.locator("#element_start").fill("2024-05-01")
            form.locator("#element_end").fill("2024-05-02")  # one day: a mapped task of its own
            # A bad value first: the schema's pattern refuses it, no run is created.
            form.locator("#element_batch_interval").fill("0m")
            page.wait_for_timeout(1000)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_timeout(3000)
            page.screenshot(path=str(ARTIFACTS / "01-form-refuses-bad-interval.png"), full_page=True)
            assert runs() == [], "a run was created from a form with batch interval '0m'"
            assert page.get_by_role("dialog").count(), "the form closed although its value was refused"
            # Where the reason shows (the README says so): in the dialog, above the fields,
            # as the schema's words; the toast by the button says only "Bad Request".
            reason = page.get_by_role("dialog").get_by_text(re.compile(r"'0m' does not match")).first
            reason.wait_for(state="visible", timeout=10000)
            field_box = form.locator("#element_batch_interval").bounding_box()
            reason_box = reason.bounding_box()
            assert reason_box and field_box and reason_box["y"] < field_box["y"], (reason_box, field_box)

            form.locator("#element_batch_interval").fill("1m")
            # The error toast lies over the form's button until it fades (hovering pauses it).
            page.mouse.move(5, 5)
            page.locator("[data-scope=toast][data-type=error]").first.wait_for(state="hidden", timeout=30000)
            page.screenshot(path=str(ARTIFACTS / "02-backfill-form.png"), full_page=True)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_url("**/dags/dataflow_backfill/runs/**", timeout=30000)
            run_id = page.url.rsplit("/runs/", 1)[1].split("?")[0]
            run_id = urllib.request.unquote(run_id)

            # The run's grid is open. While the run goes, the browser waits on a blank page
            # (an open grid re-renders itself every few seconds: a third of this test's CPU,
            # the browser's and the API server's, taken from the other tests running beside
            # it); the run's state comes from the REST API, and the grid is opened again at the end.
            grid = page.url
            page.goto("about:blank")
            deadline = time.monotonic() + RUN_TIMEOUT_S
            state = None
            while time.monotonic() < deadline:
                (run,) = [r for r in runs() if r["dag_run_id"] == run_id]
                state = run["state"]
                if state in ("success", "failed"):
                    break
                time.sleep(5)
            page.goto(grid, wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "03-finished-run-grid.png"), full_page=True)
            page.goto(url + "/dags/dataflow_backfill/runs/" + urllib.request.quote(run_id, safe="")
                      + "/tasks/backfill_day/mapped", wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "04-mapped-day-tasks.png"), full_page=True)

            # summary's log: the ledger is there as soon as the page opens.
            page.goto(url + "/dags/dataflow_backfill/runs/" + urllib.request.quote(run_id, safe="")
                      + "/tasks/summary", wait_until="networkidle")
            ledger_line = page.get_by_text(re.compile(r"read = accepted \+ duplicates \+ quarantined")).first
            ledger_line.wait_for(state="visible", timeout=60000)
            ledger_line.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "05-summary-log.png"), full_page=True)
            summary_text = page.inner_text("body")

            explorer = _explore_panes(page, url, airflow_ui["warehouse"])
            offline_rows = _data_docs_offline(browser, airflow_ui["warehouse"])
        finally:
            browser.close()

    assert state == "success", f"run {run_id} ended {state}; see {ARTIFACTS}"
    assert offline_rows >= 3, "Data Docs' index lists no validation without internet"  # input, panes, results
    assert summary_text and "read = accepted + duplicates + quarantined" in summary_text, summary_text[-2000:]
    assert explorer["diagram_panes"] == explorer["table_panes"] > 0, explorer
    assert explorer["diagram_retractions"] == explorer["table_retractions"], explorer
    assert explorer["table_panes"] + explorer["table_retractions"] == explorer["fast_reader_rows"], explorer

    # The task logs, as the UI gets them: summary's ledger is logged before "Post Execute";
    # the JVM's warnings are warnings, not errors; summary returns a small value.
    quoted = urllib.request.quote(run_id, safe="")
    events = _log_events(airflow_ui, token, "dataflow_backfill", quoted, "summary")
    texts = [e.get("event", "") for e in events]
    # Its first line says how the run and each gate ended (issue 51, fault 7).
    headline = next(t for t in texts if "backfill of billing over" in t)
    assert headline.startswith("SUCCEEDED: input gate passed, 1 of 1 day(s) done, output gate passed | "
                               "backfill of billing over [2024-05-01, 2024-05-02), batch: 1 day(s); input: "), headline
    assert texts.index(headline) < next(i for i, t in enumerate(texts) if "ledger (all days)" in t)
    ledger_at = next(i for i, t in enumerate(texts) if "read = accepted + duplicates + quarantined" in t)
    post = [i for i, t in enumerate(texts) if "Post Execute" in t]
    assert post and ledger_at < post[0], texts
    returned = [t for t in texts if "Returned value was" in t]
    assert returned and len(returned[0]) < 400 and "'ledger_ok': True" in returned[0], returned
    day_log = _log_events(airflow_ui, token, "dataflow_backfill", quoted, "backfill_day", map_index=0)
    jvm = [e for e in day_log if re.search(r"\b(WARN|WARNING)\b", e.get("event", ""))]
    assert jvm and all(e.get("level") == "warning" for e in jvm), [(e.get("level"), e.get("event")) for e in jvm][:5]
    assert any("backfill billing [2024-05-01, 2024-05-02) batch" in e.get("event", "") for e in day_log)
    instances = _api(airflow_ui, "GET", f"/api/v2/dags/dataflow_backfill/dagRuns/{urllib.request.quote(run_id, safe='')}"
                     "/taskInstances", token=token)["task_instances"]
    days = sorted((t["map_index"], t["state"], t.get("rendered_map_index")) for t in instances
                  if t["task_id"] == "backfill_day")
    assert days == [(0, "success", "2024-05-01")]
    assert {t["task_id"]: t["state"] for t in instances if t["task_id"] != "backfill_day"} == {
        "check_request": "success", "gate_input": "success", "route": "success", "days_of": "success",
        "gate_output": "success", "summary": "success", "plan_backfill": "skipped", "approve_backfill": "skipped",
        "apply_plan": "skipped", "reject_plan": "skipped",
    }

    # The output, read with Spark SQL from the warehouse the UI's run wrote.
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF
    from dataflow_core.spark.platform.tables import register_tables

    spark.conf.set(WAREHOUSE_CONF, str(airflow_ui["warehouse"]))
    assert {"billing", "billing_panes", "dataflow_runs"} <= set(register_tables(spark))
    windows = spark.sql(
        "SELECT min(window_start) AS first, max(window_start) AS last, count(*) AS n, "
        "count(DISTINCT run_id) AS runs FROM billing").first()
    assert windows["n"] > 0
    assert str(windows["first"]) >= "2024-05-01" and str(windows["last"]) < "2024-05-02"
    assert windows["runs"] == 1  # one backfill run per day
    finished = spark.sql("SELECT count(*) FROM dataflow_runs WHERE pipeline = 'billing' "  # the gate's run apart
                         "AND command = 'backfill' AND status = 'finished'").first()[0]
    assert finished == 1
    docs = airflow_ui["warehouse"] / "_data_docs" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert docs.is_file() and "billing_panes" in docs.read_text()
    for name in ("02-backfill-form.png", "03-finished-run-grid.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000


def test_a_backfill_waits_for_approval_shows_its_plan_and_lands_as_shown_or_not_at_all(airflow_ui, spark):
    """Issue 51: two backfills with "Require approval", one from the form (May 2, approved in
    the browser), one from the API (May 1, with late rows appended, so that its plan changes
    windows; rejected in the browser). Both wait in `approve_backfill`, whose page shows the
    plan; after the decisions the results changed exactly as the approved plan's preview
    said (`plan_diff`, read with Spark while it waited) and nothing else, and dataflow_runs
    records who decided."""
    from playwright.sync_api import sync_playwright

    from dataflow_core.spark.jobs.plan_diff import plan_diff
    from dataflow_core.spark.platform.session import WAREHOUSE_CONF
    from pyspark.sql import functions as F

    from dataflow_core.spark.platform.tables import read_table, table_path

    url, token = airflow_ui["url"], _token(airflow_ui)
    spark.conf.set(WAREHOUSE_CONF, str(airflow_ui["warehouse"]))
    events = read_table(spark, "video_events")
    late = events.where("ad_id IS NOT NULL AND event_time >= '2024-05-01' AND event_time < '2024-05-01 12:00'").limit(2)
    late.withColumn("event_id", F.concat(F.lit("late-"), "event_id")).withColumn("ingest_time", F.current_timestamp()) \
        .write.format("delta").mode("append").save(table_path(spark, "video_events"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = _logged_in_page(browser, airflow_ui)
        try:
            page.goto(url + "/dags/dataflow_backfill", wait_until="networkidle")
            page.get_by_role("button", name="Trigger").first.click()
            form = page.get_by_role("dialog")
            form.locator("#element_start").fill("2024-05-02")
            form.locator("#element_end").fill("2024-05-03")
            toggle = form.locator("input[name=element_require_approval]")  # the switch's hidden input
            form.locator("label[data-scope=switch]:has(input[name=element_require_approval])").click()
            assert toggle.is_checked()
            page.screenshot(path=str(ARTIFACTS / "17-backfill-form-require-approval.png"), full_page=True)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_url("**/dags/dataflow_backfill/runs/**", timeout=30000)
            approved = urllib.request.unquote(page.url.rsplit("/runs/", 1)[1].split("?")[0])
            page.goto("about:blank")  # an open grid re-renders every few seconds: wait on a blank page
            # One plan, and then one decision, at a time: each has the pipeline locked, and a task that
            # finds it locked is rescheduled after its JVM started for nothing (side by side, the
            # second plan ran twice and a decision's task once more). So the second run is asked
            # for once the first waits for its approval, and the rejection clicked once the
            # approved plan's apply is done.
            def awaiting(run: str) -> None:
                states = _wait_for(airflow_ui, token, run, lambda s: s.get("approve_backfill") == "awaiting_input")
                assert states.get("approve_backfill") == "awaiting_input", (run, states)

            awaiting(approved)
            rejected = _api(airflow_ui, "POST", "/api/v2/dags/dataflow_backfill/dagRuns", {
                "logical_date": None, "conf": {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02",
                                               "require_approval": True}}, token=token)["dag_run_id"]
            awaiting(rejected)
            plans = {json.loads(r["args"])["start"][:10]: r["run_id"] for r in read_table(spark, "dataflow_runs")
                     .where("status = 'planned' AND pipeline = 'billing'").collect()}
            previews = {day: plan_diff(spark, plans[day], "billing")[1][0] for day in ("2024-05-01", "2024-05-02")}
            assert previews["2024-05-02"].changes and previews["2024-05-01"].changes, previews
            before = _billing_results(spark)

            # The explorer's plan view: every window of the plan, old against new.
            page.goto(f"{url}/dataflow-explorer/plan?pipeline=billing&run_id={plans['2024-05-02']}",
                      wait_until="networkidle")
            assert page.locator("#plan-billing tbody tr").count() == len(previews["2024-05-02"].changes)
            page.screenshot(path=str(ARTIFACTS / "21-explorer-plan-view.png"), full_page=True)
            for run, option, shot, decided in ((approved, "Approve", "18-approval-page.png", "apply_plan"),
                                               (rejected, "Reject", "19-rejection-page.png", "reject_plan")):
                page.goto(f"{url}/dags/dataflow_backfill/runs/{urllib.request.quote(run, safe='')}/tasks/"
                          "approve_backfill/required_actions", wait_until="networkidle")
                page.get_by_text(re.compile(r"windows change")).first.wait_for(state="visible", timeout=60000)
                assert page.get_by_text(re.compile(r"Sum of changes per key")).count()
                page.screenshot(path=str(ARTIFACTS / shot), full_page=True)
                page.get_by_role("button", name=option).first.click()
                page.wait_for_timeout(2000)
                page.goto("about:blank")
                _wait_for(airflow_ui, token, run, lambda s, t=decided: s.get(t) in ("success", "failed", "skipped"))
            final = {run: _wait_for(airflow_ui, token, run, lambda s: s.get("summary") in ("success", "failed"))
                     for run in (approved, rejected)}
            page.goto(f"{url}/dags/dataflow_backfill/runs/{urllib.request.quote(approved, safe='')}",
                      wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "20-approved-run-grid.png"), full_page=True)
        except Exception:
            page.wait_for_timeout(3000)
            page.screenshot(path=str(ARTIFACTS / "approval-failure.png"), full_page=True)
            raise
        finally:
            browser.close()

    assert final[approved]["apply_plan"] == "success" and final[approved]["summary"] == "success", final
    assert final[rejected]["reject_plan"] == "success" and final[rejected]["apply_plan"] == "skipped", final
    assert final[rejected]["gate_output"] == "skipped", final  # nothing written, nothing to gate
    assert final[rejected]["summary"] == "failed", final  # a rejected run reads as rejected, not as a green success
    assert _api(airflow_ui, "GET", "/api/v2/dags/dataflow_backfill/dagRuns/" + urllib.request.quote(rejected, safe=""),
                token=token)["state"] == "failed"
    after = _billing_results(spark)
    changed = {w: (before.get(w), after.get(w)) for w in before.keys() | after.keys() if before.get(w) != after.get(w)}
    shown = {(c.key, c.window_start, c.window_end): (c.old, c.new) for c in previews["2024-05-02"].changes
             if c.old != c.new}
    assert changed == shown, "the approved plan landed as previewed, the rejected one not at all"
    decisions = {r["run_id"]: (r["status"], r["decided_by"]) for r in read_table(spark, "dataflow_runs")
                 .where("status IN ('applied', 'rejected')").collect()}
    assert decisions[plans["2024-05-02"]] == ("applied", "admin") and decisions[plans["2024-05-01"]] == (
        "rejected", "admin"), decisions
    texts = [e.get("event", "") for e in _log_events(airflow_ui, token, "dataflow_backfill",
                                                     urllib.request.quote(rejected, safe=""), "summary")]
    assert any(t.startswith("REJECTED: plan ") and "no table of the pipeline was changed" in t for t in texts), texts
    texts = [e.get("event", "") for e in _log_events(airflow_ui, token, "dataflow_backfill",
                                                     urllib.request.quote(approved, safe=""), "summary")]
    assert any(t.startswith("SUCCEEDED: input gate passed, plan approved by admin at ") for t in texts), texts


def _wait_for(ui, token: str, run: str, done) -> dict[str, str]:
    """The run's task states once `done(states)` holds, a task failed, or the time is up."""
    quoted = urllib.request.quote(run, safe="")
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        states = {t["task_id"]: t["state"] for t in _api(
            ui, "GET", f"/api/v2/dags/dataflow_backfill/dagRuns/{quoted}/taskInstances", token=token)["task_instances"]
            if t["map_index"] == -1}
        if done(states) or "failed" in states.values() or time.monotonic() > deadline:
            return states
        time.sleep(1)  # a state change is seen within a second; one request is cheap beside a task


def _billing_results(spark) -> dict[tuple, int]:
    from dataflow_core.spark.platform.tables import read_table, table_exists

    if not table_exists(spark, "billing"):  # this test alone: no backfill before it
        return {}

    def ms(t):
        return int(t.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)

    return {((r["ad_id"],), ms(r["window_start"]), ms(r["window_end"])): r["value"]
            for r in read_table(spark, "billing").collect()}


def _log_events(ui, token: str, dag_id: str, run: str, task_id: str, map_index: int = -1) -> list[dict]:
    """A task's log as structured events (the api-server's JSON: event, level, logger, ...)."""
    request = urllib.request.Request(
        f"{ui['url']}/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{task_id}/logs/1?map_index={map_index}",
        headers={"Accept": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        content = json.loads(response.read())["content"]
    return [e if isinstance(e, dict) else {"event": str(e)} for e in content]


def _explore_panes(page, url: str, warehouse: Path) -> dict:
    """Browse -> Pane explorer: billing, the busiest key; what the diagram draws and what the
    pane log table lists, and what the fast reader finds in the table for that key and range."""
    from dataflow_core.query import query

    page.goto(url + "/plugin/pane-explorer", wait_until="networkidle")
    frame = page.frame_locator("iframe").first
    frame.locator("#pipeline").select_option("billing")
    first_key = frame.locator("#key-list a").first
    first_key.wait_for(state="visible", timeout=60000)
    key = first_key.inner_text().strip()
    search = frame.locator("#key")
    search.fill(key[:4])  # the search box lists matching keys as one types
    page.wait_for_timeout(1000)
    search.fill(key)
    frame.locator("#show").click()
    diagram = frame.locator("#diagram")
    diagram.wait_for(state="visible", timeout=60000)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(ARTIFACTS / "06-pane-explorer.png"), full_page=True)
    diagram.screenshot(path=str(ARTIFACTS / "07-pane-explorer-diagram.png"))
    lo, hi = frame.locator("#event_from").input_value(), frame.locator("#event_to").input_value()
    bands = diagram.locator("svg g[id^='pane-']").evaluate_all(
        "els => els.filter(e => /^pane-[0-9]+$/.test(e.id)).length")
    rows = query(
        f"SELECT count(*) AS n FROM billing_panes WHERE ad_id = '{key}' AND window_end > TIMESTAMP '{lo}' "
        f"AND window_start < TIMESTAMP '{hi}'", str(warehouse)).table.to_pylist()[0]["n"]
    return {
        "key": key, "range": (lo, hi),
        "diagram_panes": bands,
        "diagram_retractions": diagram.locator("svg g[id^='retraction-']").count(),
        "table_panes": frame.locator("#pane-log tr.pane").count(),
        "table_retractions": frame.locator("#pane-log tr.retraction").count(),
        "data_panes": int(diagram.get_attribute("data-panes")),
        "fast_reader_rows": rows,
    }


def _data_docs_offline(browser, warehouse: Path) -> int:
    """The Data Docs index with every http(s) request refused (no internet): rows of its
    validation results table."""
    docs = warehouse / "_data_docs" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.route(re.compile(r"^https?://"), lambda route: route.abort())
        page.goto(docs.as_uri(), wait_until="load")
        page.wait_for_timeout(1000)
        page.screenshot(path=str(ARTIFACTS / "08-data-docs-offline.png"), full_page=True)
        return page.locator("table.ge-index-page-validation-results-table tbody tr").count()
    finally:
        page.close()


def _token(ui) -> str:
    return _api(ui, "POST", "/auth/token", {"username": "admin", "password": ui["password"]})["access_token"]


def _logged_in_page(browser, ui, **kwargs):
    """A page logged in to Airflow as the README says (user admin, the generated password)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, **kwargs)
    page.set_default_timeout(120_000)  # a loaded 2-core CI machine answers slowly; waits, not checks
    page.set_default_navigation_timeout(120_000)
    page.goto(ui["url"] + "/", wait_until="networkidle")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", ui["password"])
    page.get_by_role("button", name="Sign In").click()
    # Signed in once the page has left the login page. A navigation before that (a loaded
    # machine's token answer comes late) lands on the login page again, or is aborted by the
    # sign-in's last redirect (net::ERR_ABORTED).
    page.wait_for_url(lambda address: "/auth/" not in address)
    page.wait_for_load_state("networkidle")
    return page


def test_one_off_microbatch_runs_while_the_schedule_is_paused(airflow_ui):
    """Issue 51, fault 1: `dataflow_microbatch_once`, triggered from its form, runs one batch
    while `dataflow_microbatch__billing`'s schedule stays paused; its log says when the live
    results are complete (fault 8)."""
    from playwright.sync_api import Error as PlaywrightError, sync_playwright

    from dataflow_core.query import query

    url, token = airflow_ui["url"], _token(airflow_ui)
    scheduled = _api(airflow_ui, "GET", "/api/v2/dags/dataflow_microbatch__billing", token=token)
    assert scheduled["is_paused"] is True
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = _logged_in_page(browser, airflow_ui)
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    page.goto(url + "/dags/dataflow_microbatch_once", wait_until="networkidle")
                except PlaywrightError as exc:
                    assert "ERR_ABORTED" in str(exc) or "interrupted by another navigation" in str(exc), exc
                if page.get_by_text("fire_due_timer").count():
                    break
                assert time.monotonic() < deadline, "dataflow_microbatch_once never showed up in the UI"
                page.wait_for_timeout(3000)
            page.get_by_role("button", name="Trigger").first.click()
            form = page.get_by_role("dialog")
            form.get_by_text("Pipeline").first.wait_for(state="visible")
            page.screenshot(path=str(ARTIFACTS / "09-microbatch-once-form.png"), full_page=True)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_url("**/dags/dataflow_microbatch_once/runs/**", timeout=30000)
            run_id = urllib.request.unquote(page.url.rsplit("/runs/", 1)[1].split("?")[0])
            grid = page.url
            page.goto("about:blank")  # an open grid re-renders every few seconds: wait on a blank page

            quoted = urllib.request.quote(run_id, safe="")
            states: dict[str, str] = {}
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while time.monotonic() < deadline:
                states = {t["task_id"]: t["state"] for t in _api(
                    airflow_ui, "GET", f"/api/v2/dags/dataflow_microbatch_once/dagRuns/{quoted}/taskInstances",
                    token=token)["task_instances"]}
                if states.get("fire_due_timer") in ("up_for_reschedule", "success", "skipped", "failed") \
                        or "failed" in states.values() or "upstream_failed" in states.values():
                    break
                time.sleep(5)
            page.goto(grid, wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "10-microbatch-once-grid.png"), full_page=True)
            page.goto(url + f"/dags/dataflow_microbatch_once/runs/{quoted}/tasks/microbatch", wait_until="networkidle")
            page.get_by_text(re.compile(r"processing-time timer")).first.wait_for(state="visible", timeout=60000)
            page.screenshot(path=str(ARTIFACTS / "11-microbatch-once-log.png"), full_page=True)
        finally:
            browser.close()

    assert states.get("microbatch") == "success" and states.get("gate_output") == "success", states
    assert states.get("fire_due_timer") in ("up_for_reschedule", "success", "skipped"), states
    texts = [e.get("event", "") for e in _log_events(airflow_ui, token, "dataflow_microbatch_once", quoted, "microbatch")]
    assert any(re.match(r"micro-batch \S+ of billing: read [\d,]+", t) for t in texts), texts[-20:]
    assert any("processing-time timer" in t for t in texts), texts[-20:]
    timer_log = [e.get("event", "") for e in _log_events(airflow_ui, token, "dataflow_microbatch_once", quoted,
                                                        "fire_due_timer")]
    assert any("processing-time timer" in t for t in timer_log), timer_log
    # The schedule stayed paused and ran nothing; the batch is recorded as finished.
    assert _api(airflow_ui, "GET", "/api/v2/dags/dataflow_microbatch__billing", token=token)["is_paused"] is True
    assert _api(airflow_ui, "GET", "/api/v2/dags/dataflow_microbatch__billing/dagRuns", token=token)["total_entries"] == 0
    finished = query("SELECT count(*) AS n FROM dataflow_batches WHERE pipeline = 'billing' AND status = 'finished'",
                     str(airflow_ui["warehouse"])).table.to_pylist()[0]["n"]
    assert finished >= 1
    if states.get("fire_due_timer") == "up_for_reschedule":
        # Its timer is minutes away: end the run here rather than let a batch start under the next tests.
        _api(airflow_ui, "PATCH", f"/api/v2/dags/dataflow_microbatch_once/dagRuns/{quoted}", {"state": "success"},
             token=token)


_LABEL_BOXES_JS = """svg => {
  const boxes = [...svg.querySelectorAll('g[id^="label-"]')].map(g => {
    const r = g.getBoundingClientRect(); return {id: g.id, x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
  }).filter(b => b.x1 > b.x0 && b.y1 > b.y0);
  const overlapping = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.x0 < b.x1 - 0.5 && b.x0 < a.x1 - 0.5 && a.y0 < b.y1 - 0.5 && b.y0 < a.y1 - 0.5) overlapping.push([a.id, b.id]);
  }
  return {labels: boxes.length, overlapping};
}"""

_WATERMARK_JS = """svg => {
  const line = svg.querySelector('g[id^="watermark-"]:not([id^="watermark-step-"]) path');
  const axes = svg.querySelector('g[id^="patch_"] path') ;
  const r = line ? line.getBoundingClientRect() : null;
  const s = svg.getBoundingClientRect();
  return {line: !!line, width: r ? r.width : 0, height: r ? r.height : 0,
          inside: r ? (r.left >= s.left && r.right <= s.right + 1 && r.top >= s.top && r.bottom <= s.bottom + 1) : false,
          steps: svg.querySelectorAll('g[id^="watermark-step-"]').length,
          titled_steps: svg.querySelectorAll('g[id^="watermark-step-"] > title').length};
}"""


def test_explorer_draws_the_watermark_per_batch_and_no_overlapping_labels(airflow_ui):
    """Issue 51, faults 2 to 5, after the backfill and the one-off micro-batch: the pane
    explorer draws the watermark (a line, a marker per batch), its value labels' rendered
    boxes never overlap, its processing-time labels carry the date, and its counts tell read,
    accepted, duplicate and quarantined rows apart (and add up)."""
    from playwright.sync_api import sync_playwright

    from dataflow_core.query import query

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = _logged_in_page(browser, airflow_ui)
            page.goto(airflow_ui["url"] + "/plugin/pane-explorer", wait_until="networkidle")
            frame = page.frame_locator("iframe").first
            frame.locator("#pipeline").select_option("billing")
            first_key = frame.locator("#key-list a").first
            first_key.wait_for(state="visible", timeout=60000)
            first_key.click()
            diagram = frame.locator("#diagram")
            diagram.wait_for(state="visible", timeout=60000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(ARTIFACTS / "12-explorer-watermark.png"), full_page=True)
            diagram.screenshot(path=str(ARTIFACTS / "13-explorer-watermark-diagram.png"))
            svg = diagram.locator("svg")
            watermark = svg.evaluate(_WATERMARK_JS)
            labels = svg.evaluate(_LABEL_BOXES_JS)
            ticks = svg.locator('g[id^="ytick_"] text').all_text_contents()
            counts = {k: int(frame.locator(f"#count-{k}").inner_text().replace(",", ""))
                      for k in ("read", "accepted", "duplicates", "quarantined")}
            key = frame.locator("#key").input_value()
            lo, hi = frame.locator("#event_from").input_value(), frame.locator("#event_to").input_value()
            steps_attr = int(diagram.get_attribute("data-watermark-steps"))
        finally:
            browser.close()

    assert watermark["line"] and watermark["inside"] and watermark["width"] + watermark["height"] > 0, watermark
    assert watermark["steps"] == steps_attr >= 1, watermark  # the backfill's and the micro-batch's (never back)
    assert watermark["titled_steps"] == watermark["steps"], watermark
    assert labels["labels"] > 0 and labels["overlapping"] == [], labels
    assert any(re.match(r"20\d\d-\d\d-\d\d ", t) for t in ticks), ticks
    assert counts["read"] == counts["accepted"] + counts["duplicates"] + counts["quarantined"], counts
    rows = query(f"SELECT count(*) AS n FROM video_events WHERE ad_id = '{key}' AND event_time >= TIMESTAMP '{lo}' "
                 f"AND event_time < TIMESTAMP '{hi}'", str(airflow_ui["warehouse"])).table.to_pylist()[0]["n"]
    assert counts["read"] == rows, (counts, rows)


_STYLED_JS = """() => {
  const sheets = [...document.styleSheets].map(s => { let n = 0; try { n = s.cssRules.length; } catch (e) {} return {href: s.href || '', rules: n}; });
  const icon = document.querySelector('.fas, .fa');
  return {
    sheets,
    jquery: typeof window.jQuery === 'function' && typeof window.jQuery.fn.bootstrapTable === 'function',
    rows: document.querySelectorAll('table.ge-index-page-validation-results-table tbody tr').length,
    navbar: getComputedStyle(document.querySelector('nav, .navbar') || document.body).display,
    bodyFont: getComputedStyle(document.body).fontFamily,
    iconFont: icon ? getComputedStyle(icon, '::before').fontFamily : '',
    origin: window.origin,
  };
}"""


def test_data_docs_are_served_by_airflow_styled_and_without_network(airflow_ui):
    """Issue 51, fault 6: the gate's task log links the Data Docs at the Airflow plugin's URL;
    opened there with every request to another host refused, every stylesheet and script
    loads from the site itself (Bootstrap's rules, jQuery and bootstrap-table, Font Awesome)."""
    from playwright.sync_api import sync_playwright

    token = _token(airflow_ui)
    (run,) = [r for r in _api(airflow_ui, "GET", "/api/v2/dags/dataflow_backfill/dagRuns", token=token)["dag_runs"]
              if r["state"] == "success"][:1]
    quoted = urllib.request.quote(run["dag_run_id"], safe="")
    texts = [e.get("event", "") for e in _log_events(airflow_ui, token, "dataflow_backfill", quoted, "gate_output")]
    links = [t.split("Data Docs in the browser: ", 1)[1].strip() for t in texts if "Data Docs in the browser: " in t]
    assert links and links[0] == airflow_ui["url"] + "/dataflow-explorer/data-docs/index.html", texts[-10:]

    local = re.escape(airflow_ui["url"])
    refused: list[str] = []
    failed: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = _logged_in_page(browser, airflow_ui)

            def refuse(route):
                refused.append(route.request.url)
                route.abort()

            page.route(re.compile(rf"^(?!{local})https?://"), refuse)
            # (The UI's own requests aborted by leaving it are not the Data Docs' business.)
            page.on("requestfailed", lambda r: failed.append(r.url) if "/data-docs/" in r.url else None)
            page.goto(links[0], wait_until="networkidle")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(ARTIFACTS / "14-data-docs-served-offline.png"), full_page=True)
            styled = page.evaluate(_STYLED_JS)
            page.locator("table.ge-index-page-validation-results-table tbody tr").first.click()
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(ARTIFACTS / "15-data-docs-validation-page.png"), full_page=True)
            validation_sheets = page.evaluate("() => [...document.styleSheets].filter(s => s.href).length")
            # The same site under Browse -> Data Docs, inside the Airflow UI.
            page.goto(airflow_ui["url"] + "/plugin/data-docs", wait_until="networkidle")
            page.frame_locator("iframe").first.locator("table.ge-index-page-validation-results-table").wait_for()
            page.screenshot(path=str(ARTIFACTS / "16-data-docs-in-airflow.png"), full_page=True)
        finally:
            browser.close()

    assert refused == [] and failed == [], (refused, failed)
    bootstrap = [s for s in styled["sheets"] if s["href"].endswith("/bootstrap.min.css")]
    # In the plugin's CSP sandbox (an opaque origin, issue 64): the rules of a stylesheet are not
    # readable from the page, so Bootstrap shows in what it styles (its navbar is a flexbox).
    assert styled["origin"] == "null", styled
    assert bootstrap and styled["navbar"] == "flex", styled
    assert re.search(r"/dataflow-explorer/data-docs/signed/[^/]+/static/vendor/", bootstrap[0]["href"]), styled
    assert all(s["href"].startswith(airflow_ui["url"]) for s in styled["sheets"] if s["href"]), styled
    assert styled["jquery"] and styled["rows"] >= 3, styled
    assert "Font Awesome" in styled["iconFont"] or not styled["iconFont"], styled
    assert validation_sheets >= 3


def test_airflow_stop_ends_every_process_it_started_even_a_running_task(airflow_ui):
    """`make airflow-stop` while a backfill day runs (a task supervisor, its task process and
    their Spark JVM): afterwards no process of that Airflow is left."""
    token = _api(airflow_ui, "POST", "/auth/token",
                 {"username": "admin", "password": airflow_ui["password"]})["access_token"]
    _api(airflow_ui, "POST", "/api/v2/dags/dataflow_backfill/dagRuns", token=token,
         body={"logical_date": None, "conf": {"pipeline": "billing", "start": "2024-05-01", "end": "2024-05-02",
                                               "mode": "replay"}})
    home = airflow_ui["home"] / "airflow"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not any("java" in cmd.split(" ", 1)[0] for cmd in _processes_of(home).values()):
        assert time.monotonic() < deadline, "no Spark JVM of the triggered run ever started"
        time.sleep(2)
    before = _processes_of(home)
    stopped = subprocess.run([str(ROOT / "scripts" / "airflow-standalone.sh"), "stop"], env=airflow_ui["env"],
                             capture_output=True, text=True, timeout=120)
    print(stopped.stdout, stopped.stderr)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped: no process of this Airflow is left" in stopped.stdout
    assert re.search(r"stopping airflow standalone: \d+ processes", stopped.stdout)
    assert _processes_of(home) == {}, f"left behind (of {len(before)}): {_processes_of(home)}"
