"""A newcomer's path through the real UI, in headless Chromium driven by Playwright.

`scripts/airflow-standalone.sh start` (what `make airflow` runs) starts Airflow standalone
over a small generated sample in a throwaway home and warehouse; the browser logs in with the
generated admin password, fills in and submits the `dataflow_backfill` trigger form (after
seeing it refuse a bad value), and watches the run's grid until the mapped day tasks and the
gates have finished. The Delta output is then read with Spark SQL. Screenshots of the form
and of the finished grid are kept in `$DATAFLOW_TEST_ARTIFACTS` (default
`test-artifacts/browser/`).

Needs Debian's `chromium` (`/usr/bin/chromium`; `.ci/run` installs it) and the `playwright`
package; Playwright never downloads a browser here.
"""

from __future__ import annotations

import json
import os
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
        DATAFLOW_WAREHOUSE=str(home / "warehouse"),
        DATAFLOW_SPARK_MASTER="local[2]",
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
        log = home / "airflow" / "standalone.log"
        if log.exists():
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, ARTIFACTS / "standalone.log")


def _api(ui, method: str, path: str, body=None, token=None):
    request = urllib.request.Request(
        ui["url"] + path, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def test_backfill_from_the_trigger_form_in_a_real_browser(airflow_ui, spark):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    url = airflow_ui["url"]
    token = _api(airflow_ui, "POST", "/auth/token",
                 {"username": "admin", "password": airflow_ui["password"]})["access_token"]

    def runs() -> list[dict]:
        return _api(airflow_ui, "GET", "/api/v2/dags/dataflow_backfill/dagRuns", token=token)["dag_runs"]

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            # Log in as the README says: user admin, the generated password.
            page.goto(url + "/", wait_until="networkidle")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", airflow_ui["password"])
            page.get_by_role("button", name="Sign In").click()
            page.wait_for_load_state("networkidle")

            # The DAG may still be on its way from the dag-processor to the UI.
            deadline = time.monotonic() + 120
            while True:
                page.goto(url + "/dags/dataflow_backfill", wait_until="networkidle")
                if page.get_by_text("check_request").count():
                    break
                assert time.monotonic() < deadline, "dataflow_backfill never showed up in the UI"
                page.wait_for_timeout(3000)

            page.get_by_role("button", name="Trigger").first.click()
            form = page.get_by_role("dialog")
            form.locator("#element_start").fill("2024-05-01")
            form.locator("#element_end").fill("2024-05-03")
            # A bad value first: the schema's pattern refuses it, no run is created.
            form.locator("#element_batch_interval").fill("0m")
            page.wait_for_timeout(1000)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_timeout(3000)
            page.screenshot(path=str(ARTIFACTS / "01-form-refuses-bad-interval.png"), full_page=True)
            assert runs() == [], "a run was created from a form with batch interval '0m'"
            assert page.get_by_role("dialog").count(), "the form closed although its value was refused"

            form.locator("#element_batch_interval").fill("1m")
            # The error toast lies over the form's button until it fades (hovering pauses it).
            page.mouse.move(5, 5)
            page.locator("[data-scope=toast][data-type=error]").first.wait_for(state="hidden", timeout=30000)
            page.screenshot(path=str(ARTIFACTS / "02-backfill-form.png"), full_page=True)
            form.get_by_test_id("trigger-dag-submit").click()
            page.wait_for_url("**/dags/dataflow_backfill/runs/**", timeout=30000)
            run_id = page.url.rsplit("/runs/", 1)[1].split("?")[0]
            run_id = urllib.request.unquote(run_id)

            # Watch the run's grid until it is done (reloading as a user would).
            deadline = time.monotonic() + RUN_TIMEOUT_S
            state = None
            while time.monotonic() < deadline:
                (run,) = [r for r in runs() if r["dag_run_id"] == run_id]
                state = run["state"]
                if state in ("success", "failed"):
                    break
                page.wait_for_timeout(10000)
                page.reload(wait_until="networkidle")
            page.reload(wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "03-finished-run-grid.png"), full_page=True)
            page.goto(url + "/dags/dataflow_backfill/runs/" + urllib.request.quote(run_id, safe="")
                      + "/tasks/backfill_day/mapped", wait_until="networkidle")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(ARTIFACTS / "04-mapped-day-tasks.png"), full_page=True)
        finally:
            browser.close()

    assert state == "success", f"run {run_id} ended {state}; see {ARTIFACTS}"
    instances = _api(airflow_ui, "GET", f"/api/v2/dags/dataflow_backfill/dagRuns/{urllib.request.quote(run_id, safe='')}"
                     "/taskInstances", token=token)["task_instances"]
    days = sorted((t["map_index"], t["state"], t.get("rendered_map_index")) for t in instances
                  if t["task_id"] == "backfill_day")
    assert days == [(0, "success", "2024-05-01"), (1, "success", "2024-05-02")]
    assert {t["task_id"]: t["state"] for t in instances if t["task_id"] != "backfill_day"} == {
        "check_request": "success", "gate_input": "success", "days_of": "success",
        "gate_output": "success", "summary": "success",
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
    assert str(windows["first"]) >= "2024-05-01" and str(windows["last"]) < "2024-05-03"
    assert windows["runs"] == 2  # one backfill run per day
    finished = spark.sql("SELECT count(*) FROM dataflow_runs WHERE pipeline = 'billing' "
                         "AND status = 'finished'").first()[0]
    assert finished == 2
    docs = airflow_ui["warehouse"] / "_data_docs" / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
    assert docs.is_file() and "billing_panes" in docs.read_text()
    for name in ("02-backfill-form.png", "03-finished-run-grid.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000
