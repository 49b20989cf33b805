"""Stores that cannot lie to the log store: an S3 server behind a proxy that misbehaves
(tests/s3_proxy.py), driven by one driver process of its own (tests/s3_store_driver.py).

- A store that ignores `If-None-Match` (the proxy drops it) is refused when the session
  starts, in one line naming the endpoint, before any table is written; through the same
  proxy forwarding the header, the probe passes.
- A PUT of a log file that landed but whose answer was lost (the proxy answers 500, the client
  retries, the server answers 412) is our commit: each row lands once, each version once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests import s3_server
from tests.s3_proxy import S3Proxy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def s3() -> Iterator[s3_server.S3Server]:
    server = s3_server.start()
    try:
        server.create_bucket("lake", versioning=True)
        yield server
    finally:
        server.stop()


def test_a_store_ignoring_if_none_match_is_refused_and_a_lost_answer_is_our_commit(s3):
    proxy = S3Proxy(s3.endpoint, mode="ignore-conditions")
    try:
        env = {**os.environ, **s3.env(), "AWS_ENDPOINT_URL": proxy.endpoint}
        run = subprocess.run([sys.executable, "-m", "tests.s3_store_driver"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=400)
    finally:
        proxy.stop()
    assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    steps = {line["step"]: line for line in map(json.loads, filter(None, run.stdout.splitlines()))
             if isinstance(line, dict)}

    refused = steps["ignore-conditions"]["refused"]
    assert refused and "\n" not in refused, refused
    assert proxy.endpoint in refused and "412" in refused and "s3a://lake/unsafe" in refused, refused
    written = s3.versions("lake", "unsafe/")
    assert written and all("/_dataflow_probe/" in key for key in written), written  # the probe only

    lost = steps["lose-commit-answers"]
    assert proxy.lost, "the proxy lost no answer: the retried PUT was not exercised"
    assert lost["rows"] == [["a", 1]], lost
    assert lost["versions"] == [0], lost
    log = {key.rsplit("/", 1)[1]: n for key, n in s3.versions("lake", "retried/t/_delta_log/").items()
           if key.endswith(".json")}
    assert log == {f"{0:020d}.json": 1}, log
