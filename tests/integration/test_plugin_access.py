"""The pane explorer plugin lets in only whom it should (issue 64, finding 6): every route
behind one dependency that asks Airflow's own auth manager; 401 without a login, 403 without
read access to the pipeline's DAGs; refused when Airflow's auth is not there; the Data Docs
in a CSP sandbox under a signed path.

The app runs behind Airflow's real auth manager in a process of its own (`tests/plugin_server.py`:
the simple auth manager's users and roles, plus per-DAG grants for one user), started once for
the module; no Airflow scheduler or database migration is needed for it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "/dataflow-explorer"
ROUTES = ["/", "/?pipeline=billing", "/keys?pipeline=billing", "/plan", "/plan?pipeline=billing",
          "/data-docs", "/data-docs/index.html"]
USERS = "admin:admin,viewer:viewer,nobody:,billing_reader:viewer"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The plugin app at http://127.0.0.1:PORT/dataflow-explorer, Airflow's auth manager in
    front, over an empty warehouse with a one-page Data Docs site; the users' JWTs."""
    home = tmp_path_factory.mktemp("plugin")
    site = home / "warehouse" / "_data_docs" / "gx" / "uncommitted" / "data_docs" / "local_site"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html><title>Data Docs</title><p id='docs'>validations</p>")
    (site / "static" / "fonts").mkdir(parents=True)
    (site / "static" / "fonts" / "icons.woff2").write_bytes(b"font")
    (home / "secret.html").write_text("outside the site")
    port, tokens = _free_port(), home / "tokens.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "DATAFLOW_"))}
    env.update(
        AIRFLOW_HOME=str(home / "airflow"),
        AIRFLOW__CORE__AUTH_MANAGER="tests.plugin_server.PerDagAuthManager",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=USERS,
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(home / "passwords.json"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(16),
        AIRFLOW__API__SECRET_KEY=secrets.token_hex(16),
        DATAFLOW_WAREHOUSE=str(home / "warehouse"),
        PYTHONPATH=str(ROOT),
    )
    log = (home / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "tests.plugin_server", str(port), str(tokens)], cwd=ROOT,
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{PREFIX}/plan", timeout=5)
            except urllib.error.HTTPError:
                break  # answering (401)
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (home / "server.log").read_text()[-3000:]
                time.sleep(0.5)
        yield {"url": f"http://127.0.0.1:{port}{PREFIX}", "tokens": json.loads(tokens.read_text())}
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _get(url: str, token: str | None = None, cookie: str | None = None) -> tuple[int, dict, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = f"_token={cookie}"
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=60) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def test_every_route_answers_401_without_a_login_and_403_without_read_access(plugin):
    url, tokens = plugin["url"], plugin["tokens"]
    for route in ROUTES + ["/data-docs/signed/forged/index.html"]:
        status, _, body = _get(url + route)
        assert status == 401, (route, status, body[:300])
        assert 'id="error"' in body or '"error"' in body, body[:300]
    assert _get(url + "/", token="not-a-jwt")[0] in (401, 403)
    for route in ROUTES:  # a logged-in user with no role: the auth manager gives no DAG read access
        status, _, body = _get(url + route, token=tokens["nobody"])
        assert status == 403, (route, status, body[:300])
    for route in ROUTES:  # a viewer reads every pipeline's pages, by bearer token or by Airflow's cookie
        assert _get(url + route, token=tokens["viewer"])[0] in (200, 307), route
        assert _get(url + route, cookie=tokens["viewer"])[0] in (200, 307), route


def test_a_user_reads_only_the_pipelines_whose_dags_the_auth_manager_lets_them_read(plugin):
    url, reader = plugin["url"], plugin["tokens"]["billing_reader"]
    status, _, body = _get(url + "/?pipeline=billing", token=reader)
    assert status == 200 and '<option value="billing" selected>' in body and "ad_sessions" not in body, body[:2000]
    status, _, body = _get(url + "/", token=reader)  # the default pipeline is one they may read
    assert status == 200 and "ad_sessions" not in body
    for route in ("/?pipeline=ad_sessions", "/keys?pipeline=ad_sessions", "/plan?pipeline=ad_sessions"):
        status, _, body = _get(url + route, token=reader)
        assert status == 403 and "dataflow_daily__ad_sessions" in body, (route, status, body[:300])
    status, _, body = _get(url + "/data-docs/index.html", token=reader)  # every pipeline's validations
    assert status == 403 and "every pipeline" in body


def test_data_docs_are_served_in_a_sandbox_under_a_signed_path_and_never_outside_the_site(plugin):
    url, viewer = plugin["url"], plugin["tokens"]["viewer"]
    status, headers, _ = _get(url + "/data-docs/index.html", token=viewer)
    assert status == 307
    signed = headers["location"]
    assert signed.startswith(PREFIX + "/data-docs/signed/") and signed.endswith("/index.html")
    base = url[: -len(PREFIX)]
    status, headers, body = _get(base + signed)  # no cookie, no token: the sandboxed page's own requests
    assert status == 200 and "validations" in body
    policy = headers["content-security-policy"]
    assert policy.startswith("sandbox ") and "allow-same-origin" not in policy and "default-src 'self'" in policy
    assert "connect-src 'none'" in policy
    assert "access-control-allow-origin" not in {k.lower() for k in headers}  # a page with data: not shared
    folder = signed.rsplit("/", 1)[0]
    status, headers, _ = _get(base + folder + "/static/fonts/icons.woff2")  # fonts load in CORS mode
    assert status == 200 and headers.get("access-control-allow-origin") == "*"
    for hostile in ("/a%00b.html", "/%00", "/" + "../" * 6 + "secret.html", "/" + "..%2F" * 6 + "secret.html"):
        status, _, body = _get(base + folder + hostile)
        assert status == 404 and "outside the site" not in body, (hostile, status, body[:300])
    status, _, _ = _get(base + folder[:-3] + "xyz/index.html")  # a token altered
    assert status == 401


def test_the_app_refuses_every_request_when_airflow_auth_cannot_be_imported(monkeypatch, tmp_path):
    """In this process Airflow's api-server never ran; with its security module missing the
    app answers 503 in one line, never the page."""
    from fastapi.testclient import TestClient

    from dataflow_core.airflow.plugin.app import app

    monkeypatch.setenv("DATAFLOW_WAREHOUSE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "airflow.api_fastapi.core_api.security", None)  # import raises ImportError
    client = TestClient(app)
    for route in ROUTES:
        response = client.get(route, follow_redirects=False)
        assert response.status_code == 503, (route, response.status_code, response.text[:300])
        assert "refuses every request" in response.text
    monkeypatch.setenv("DATAFLOW_PLUGIN_ALLOW_ANONYMOUS", "yes")  # not the value that names what it does
    assert client.get("/").status_code == 500
    monkeypatch.setenv("DATAFLOW_PLUGIN_ALLOW_ANONYMOUS", "I_UNDERSTAND_ANYONE_CAN_READ_EVERY_PIPELINE")
    assert client.get("/").status_code == 200
