"""An HTTP proxy on loopback in front of fake-gcs-server that breaks chosen requests the way
Cloud Storage fails in production: a 503 now and then, a request that hangs, or an outage; or
delays them as a remote store's latency does.

Point ``STORAGE_EMULATOR_HOST`` at ``proxy.url``. A rule matches a request by method and by a
needle found in its path (URL-decoded) or the start of its body, which is where the object's
name is for multipart and resumable uploads.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple
from urllib.parse import unquote, urlsplit

WRITES = ("POST", "PUT")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass
class Rule:
    """Break matching requests: ``status`` (e.g. 503); or, with ``hang_s``, hold the request
    that long and then drop it; or, with ``delay_s``, hold it that long and then answer it as
    usual (latency, not a failure); or, with ``mangle``, answer with the real response whose body
    is "corrupt" (one byte flipped) or "truncated" (half sent, then the connection closed).
    ``every`` 2 breaks every other match (each write then needs one retry); 1 breaks all of
    them (an outage); counted from the first match past ``after``, and with ``limit`` only
    the first that many (a refusal that ends)."""

    needle: str
    methods: Tuple[str, ...] = WRITES
    status: int = 503
    hang_s: float = 0.0
    delay_s: float = 0.0
    mangle: str = ""
    every: int = 1
    after: int = 0  # the first ``after`` matches pass untouched
    limit: int = 0  # break no more than this many (0: no limit), then pass the rest
    matched: int = 0
    broken: int = 0
    hit: threading.Event = field(default_factory=threading.Event)  # set at the first break

    def breaks(self, method: str, text: str) -> bool:
        if method not in self.methods or self.needle not in text:
            return False
        self.matched += 1
        if self.matched <= self.after or (self.matched - 1 - self.after) % self.every \
                or (self.limit and self.broken >= self.limit):
            return False
        self.broken += 1
        self.hit.set()
        return True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class GcsFaultProxy:
    """Forwards to ``upstream`` (fake-gcs-server's URL) except where a rule says otherwise."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = upstream.rstrip("/")
        self._upstream_address = (parts.hostname, parts.port)
        self.rules: List[Rule] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = "http://127.0.0.1:{}".format(self._server.server_address[1])

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        """Stop breaking what ``rule`` matches (requests it holds now stay held)."""
        with self._lock:
            self.rules.remove(rule)

    def start(self) -> "GcsFaultProxy":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _broken_by(self, method: str, text: str) -> Optional[Rule]:
        with self._lock:
            return next((rule for rule in self.rules if rule.breaks(method, text)), None)

    def _forward(self, method: str, path: str, headers, body: bytes):
        connection = http.client.HTTPConnection(*self._upstream_address, timeout=60)
        try:
            connection.request(method, path, body=body, headers={
                name: value for name, value in headers.items()
                if name.lower() not in _HOP_BY_HOP and name.lower() != "host"})
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                text = unquote(self.path) + body[:4096].decode("latin-1")
                rule = proxy._broken_by(self.command, text)
                if rule is not None and rule.hang_s:
                    time.sleep(rule.hang_s)
                    self.close_connection = True
                    return
                if rule is not None and rule.delay_s:
                    time.sleep(rule.delay_s)
                    rule = None
                if rule is not None and not rule.mangle:
                    status, headers, data = rule.status, [], (
                        b'{"error": {"code": %d, "message": "injected by the fault proxy"}}'
                        % rule.status)
                    headers = [("Content-Type", "application/json")]
                else:
                    status, headers, data = proxy._forward(self.command, self.path,
                                                           self.headers, body)
                self.send_response(status)
                for name, value in headers:
                    if name.lower() in _HOP_BY_HOP:
                        continue
                    # Resumable upload sessions name the upstream: keep them on the proxy.
                    self.send_header(name, value.replace(proxy.upstream, proxy.url))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if rule is not None and rule.mangle == "truncated":
                    self.wfile.write(data[:len(data) // 2])
                    self.close_connection = True
                    return
                if rule is not None and rule.mangle == "corrupt" and data:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any  # noqa: N815

            def log_message(self, *args) -> None:
                pass

        return Handler
