"""A tiny HTTP proxy in front of the test S3 server that misbehaves as some S3-compatible stores
and networks do (tests/integration/test_s3_stores.py): a thread of the test process, started on
a free loopback port.

Modes, switched while it runs (`proxy.mode = ...`, or `PUT /_proxy/mode/<mode>` from another
process):

- `forward`: every request as it came;
- `ignore-conditions`: `If-None-Match` dropped from every request, so a second conditional
  create of one object succeeds as on a store that ignores the header;
- `lose-commit-answers`: the first PUT of each `_delta_log/*.json` reaches the server, but its
  answer is replaced by a 500, so the client retries a PUT that has landed (a lost answer).
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

MODES = ("forward", "ignore-conditions", "lose-commit-answers")
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}
_LOST = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
         b"<Message>answer lost by the test proxy</Message></Error>")


class S3Proxy:
    """The proxy's server thread; `endpoint` is what clients use instead of the server's."""

    def __init__(self, upstream: str, mode: str = "forward") -> None:
        self.upstream = urlparse(upstream)
        self.mode = mode
        self.lost: set[str] = set()  # paths whose first answer was lost
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(proxy: S3Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and 100-continue, as S3 clients expect

        def log_message(self, *args) -> None:  # quiet
            pass

        def _body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks = []
                while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _relay(self) -> None:
            body = self._body()
            if self.path.startswith("/_proxy/mode/"):
                proxy.mode = self.path.rsplit("/", 1)[1]
                return self._answer(200, {}, b"")
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Host"] = proxy.upstream.netloc
            if proxy.mode == "ignore-conditions":
                headers = {k: v for k, v in headers.items() if k.lower() != "if-none-match"}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=60)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                answer_headers = {k: v for k, v in answer.getheaders()
                                  if k.lower() not in _HOP and k.lower() not in ("server", "date")}
                status = answer.status
            finally:
                upstream.close()
            key = urlparse(self.path).path
            if (proxy.mode == "lose-commit-answers" and self.command == "PUT" and status == 200
                    and "/_delta_log/" in key and key.endswith(".json") and key not in proxy.lost):
                proxy.lost.add(key)
                return self._answer(500, {"Content-Type": "application/xml"}, _LOST)
            self._answer(status, answer_headers, data, head=self.command == "HEAD")

        def _answer(self, status: int, headers: dict[str, str], data: bytes, head: bool = False) -> None:
            self.send_response(status)
            for key, value in headers.items():
                if key.lower() != "content-length" or head:
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

    return Handler
