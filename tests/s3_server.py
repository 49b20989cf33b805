"""The S3 server of development and tests: moto's standalone server as a process of its own.

Installed by `make setup` in `.cache/s3-server` (tests/s3-server.lock), apart from the
product's venv; started on a free loopback port and stopped by its PID. It speaks HTTP to
Spark's S3A (the JVM) and to delta-rs as S3 does, honours `If-None-Match: *` (412) and keeps
object versions when a bucket's versioning is on, which the race test counts.

Buckets are made and inspected with plain HTTP requests: moto checks no signatures, and the
product's venv needs no AWS SDK of its own for this.

`python -m tests.s3_server start|stop [--state FILE]` does the same for `make stack`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / ".cache" / "s3-server" / "bin" / "moto_server"
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
ACCESS_KEY, SECRET_KEY, REGION = "dataflow-dev", "dataflow-dev-secret", "us-east-1"


@dataclass
class S3Server:
    pid: int
    endpoint: str

    def env(self) -> dict[str, str]:
        """The settings a process needs for this server (dataflow_core.spark.platform.s3 reads them)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": REGION,
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def create_bucket(self, name: str, versioning: bool = False) -> None:
        _request("PUT", f"{self.endpoint}/{name}", b"")
        if versioning:
            body = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    b"<Status>Enabled</Status></VersioningConfiguration>")
            _request("PUT", f"{self.endpoint}/{name}?versioning", body)

    def versions(self, bucket: str, prefix: str) -> dict[str, int]:
        """How many versions each key under `prefix` has (versioning must be on)."""
        counts: dict[str, int] = {}
        marker = ""
        while True:
            query = f"versions&prefix={prefix}" + (f"&key-marker={marker}" if marker else "")
            tree = ET.fromstring(_request("GET", f"{self.endpoint}/{bucket}?{query}"))
            for version in tree.iter(f"{_NS}Version"):
                key = version.findtext(f"{_NS}Key")
                counts[key] = counts.get(key, 0) + 1
            if tree.findtext(f"{_NS}IsTruncated") != "true":
                return counts
            marker = tree.findtext(f"{_NS}NextKeyMarker") or ""

    def requests(self) -> list[tuple[str, str]]:
        """(method, path and query) of each request served so far (moto's server logs one
        line each: `"GET /bucket/key?... HTTP/1.1" 200`, colours around the part in quotes)."""
        log = _log_file(self.pid)
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text()) if log.exists() else ""
        return re.findall(r'"([A-Z]+) (\S+) HTTP/1\.[01]"\s+\d{3}', text)

    def stop(self) -> None:
        """End the server (SIGTERM, then SIGKILL after 5 s) and drop its log."""
        try:
            self._end()
        finally:
            _log_file(self.pid).unlink(missing_ok=True)

    def _end(self) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    return
            except ChildProcessError:
                pass
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)


def _log_file(pid: int) -> Path:
    return ROOT / ".cache" / "s3-server" / f"server-{pid}.log"


_AUTH = {"Authorization": f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20260101/{REGION}/s3/aws4_request, "
                          "SignedHeaders=host, Signature=0"}  # moto routes by it; it checks no signature


def _request(method: str, url: str, body: bytes | None = None) -> bytes:
    headers = {**_AUTH, "Content-Type": "application/xml"}  # not urllib's form type, which the server would parse
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(port: int | None = None, timeout: float = 20.0) -> S3Server:
    """A new moto server on 127.0.0.1, answering before this returns."""
    if not SERVER.exists():
        raise RuntimeError(f"{SERVER} is missing: run `make setup`")
    port = port or _free_port()
    log = open(ROOT / ".cache" / "s3-server" / f"server-port-{port}.log", "w")
    process = subprocess.Popen([str(SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    Path(log.name).rename(_log_file(process.pid))
    log.close()
    server = S3Server(process.pid, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + timeout
    while True:
        try:
            _request("GET", server.endpoint + "/")
            return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto_server did not answer on port {port}: {_log_file(process.pid).read_text()[-300:]}")
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """`make stack`'s S3 server: `start` writes its PID and endpoint to --state, `stop` ends it."""
    parser = argparse.ArgumentParser(prog="python -m tests.s3_server")
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--state", type=Path, default=ROOT / ".cache" / "stack" / "s3.json")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--bucket", default=None, help="make this bucket (versioning on)")
    args = parser.parse_args(argv)
    if args.action == "start":
        server = start(args.port)
        if args.bucket:
            server.create_bucket(args.bucket, versioning=True)
        args.state.parent.mkdir(parents=True, exist_ok=True)
        args.state.write_text(json.dumps({"pid": server.pid, "endpoint": server.endpoint}))
        print(server.endpoint)
    elif args.state.exists():
        state = json.loads(args.state.read_text())
        S3Server(state["pid"], state["endpoint"]).stop()
        args.state.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
