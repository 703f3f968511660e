"""An HTTP fault proxy in front of the tests' S3 server, for the faults a TCP proxy cannot make:
an S3 answer (``503 SlowDown``) to chosen requests, a reset of a chosen request, and a request
the store carries out whose answer never comes back (the client's timeout runs out, it retries a
call the store already applied).

Every request is forwarded as it came (method, path, headers: the SigV4 signature covers the
``Host`` the client used, which the store then checks) to the S3 server unless a :class:`Fault`
matches it; its answer is sent back as the server gave it. Toxiproxy (``tests/support/network``)
covers the TCP faults: latency, cut uploads, resets at any byte.

One proxy per test (:func:`s3_fault_proxy`), started on a free loopback port and stopped (its
threads joined) when the test ends.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal
from urllib.parse import urlsplit

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
"""What AWS S3 answers (status 503) when it throttles a request."""

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Request:
    """A request as the proxy saw it: ``path`` with its query, header names in lower case."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Fault:
    """What the proxy does to the requests ``matches`` accepts, the first ``times`` of them
    (None: every one):

    * ``slow_down``: answers ``503 SlowDown`` without forwarding the request;
    * ``reset``: resets the connection without forwarding the request;
    * ``lose_answer``: forwards the request (the store carries it out), then holds the answer
      ``hold_s`` seconds and resets the connection without it.

    ``hits`` lists the requests it acted on."""

    matches: Callable[[Request], bool]
    action: Literal["slow_down", "reset", "lose_answer"]
    times: int | None = None
    hold_s: float = 0.0
    hits: list[Request] = field(default_factory=list)

    def takes(self, request: Request) -> bool:
        if not self.matches(request) or (self.times is not None and len(self.hits) >= self.times):
            return False
        self.hits.append(request)
        return True


class S3FaultProxy:
    """The proxy: ``url`` to give the package's S3 settings, ``faults`` acted on in order
    (the first that takes a request), ``forwarded`` every request sent on to the server."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: list[Fault] = []
        self.forwarded: list[Request] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()  # the clients' open connections
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = False
        self._server.block_on_close = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-faults")

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def start(self) -> S3FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # ends every held answer
        self._server.shutdown()
        with self._lock:  # the clients keep idle connections open: their threads wait on them
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        self._server.server_close()  # joins the request threads (block_on_close)
        self._thread.join()

    def _fault_for(self, request: Request) -> Fault | None:
        with self._lock:
            return next((f for f in self.faults if f.takes(request)), None)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue as S3 clients expect

            def log_message(self, format: str, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b""):
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reset(self) -> None:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    connection.putrequest(self.command, self.path, skip_host=True,
                                          skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in _HOP_BY_HOP:
                            connection.putheader(name, value)
                    if body or self.command in ("PUT", "POST"):
                        connection.putheader("Content-Length", str(len(body)))
                    connection.endheaders(body)
                    answer = connection.getresponse()
                    data = answer.read()
                    return answer.status, answer.reason, answer.getheaders(), data
                finally:
                    connection.close()

            def _handle(self) -> None:
                body = self._body()
                request = Request(self.command, self.path,
                                  {k.lower(): v for k, v in self.headers.items()})
                fault = proxy._fault_for(request)
                if fault is not None and fault.action == "reset":
                    return self._reset()
                if fault is not None and fault.action == "slow_down":
                    self.send_response_only(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return None
                with proxy._lock:
                    proxy.forwarded.append(request)
                status, reason, headers, data = self._forward(body)
                if fault is not None:  # lose_answer: the store did it; the client never hears
                    proxy._stopping.wait(fault.hold_s)
                    return self._reset()
                self.send_response_only(status, reason)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                if self.command == "HEAD":
                    length = dict((k.lower(), v) for k, v in headers).get("content-length")
                    self.send_header("Content-Length", length or "0")
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return None

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler


@contextmanager
def s3_fault_proxy(upstream_url: str) -> Iterator[S3FaultProxy]:
    """An :class:`S3FaultProxy` in front of ``upstream_url``, stopped when the block ends."""
    proxy = S3FaultProxy(upstream_url).start()
    try:
        yield proxy
    finally:
        proxy.stop()
