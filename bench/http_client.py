"""A small thread-safe Placement HTTP client for the benchmark (standard library only).

Each thread keeps its own keep-alive connection, so a pool of threads is a pool of
concurrent clients. Bodies are returned as raw bytes and parsed only on demand:
timing JSON decoding on the client side would blur what the server costs.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

MICROVERSION = "1.39"


class RequestTimeout(Exception):
    """The server did not answer within the per-request timeout."""


@dataclass(frozen=True)
class Prepared:
    """A request ready to send: method, full path, encoded body and headers."""

    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]


@dataclass
class Reply:
    status: int
    body: bytes
    elapsed: float  # seconds, from sending the request to the last byte of the body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def describe(self) -> str:
        text = self.body[:300].decode("utf-8", "replace")
        return f"HTTP {self.status}: {text}"


class PlacementClient:
    """Talks to one Placement endpoint as admin, at one microversion."""

    def __init__(self, url: str, token: str = "admin", microversion: str = MICROVERSION,
                 timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL {url!r}")
        self.url = url.rstrip("/")
        self.scheme = parsed.scheme
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.prefix = parsed.path.rstrip("/")
        self.token = token
        self.microversion = microversion
        self.timeout = timeout
        self._local = threading.local()
        # Every thread's connection, so that ``close`` closes them all: a worker
        # thread's would otherwise be dropped, open, when the thread ends.
        self._opened: set[http.client.HTTPConnection] = set()
        self._opened_lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (http.client.HTTPSConnection if self.scheme == "https"
                   else http.client.HTTPConnection)
            conn = cls(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            self._local.used = False
            with self._opened_lock:
                self._opened.add(conn)
        elif conn.sock is None:
            with self._opened_lock:  # closed by ``close`` and opened again
                self._opened.add(conn)
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            with self._opened_lock:
                self._opened.discard(conn)
        self._local.conn = None

    def close_own(self) -> None:
        """Close the calling thread's connection: what a sender thread does as
        it ends, while the others may still be sending on theirs."""
        self._drop_connection()

    def close(self) -> None:
        """Close every connection this client opened, in any thread (a thread
        that sends again afterwards connects anew). Only once no thread sends:
        a connection closed under a request fails it."""
        with self._opened_lock:
            opened, self._opened = self._opened, set()
        for conn in opened:
            conn.close()
        self._local.conn = None

    def prepare(self, method: str, path: str, body: Any = None,
                microversion: str | None = "") -> Prepared:
        """A request built once and sent many times (open-loop generators).

        ``microversion`` "" means the client's; None sends no version header (the
        server's minimum, as a caller that never asks for one gets).
        """
        headers = {"X-Auth-Token": self.token, "Accept": "application/json"}
        version = self.microversion if microversion == "" else microversion
        if version is not None:
            headers["OpenStack-API-Version"] = f"placement {version}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        return Prepared(method, self.prefix + path, data, headers)

    def request(self, method: str, path: str, body: Any = None,
                timeout: float | None = None) -> Reply:
        """Send one request; raise RequestTimeout when the server is too slow."""
        return self.send(self.prepare(method, path, body), timeout)

    def send(self, prepared: Prepared, timeout: float | None = None) -> Reply:
        """Send a prepared request on this thread's connection."""
        method, path = prepared.method, prepared.path
        limit = self.timeout if timeout is None else timeout
        # A kept-alive connection may have been closed by the server while idle;
        # that shows up as a reset on first use and deserves exactly one retry.
        for attempt in (1, 2):
            conn = self._connection()
            reused = self._local.used
            try:
                start = time.perf_counter()
                if conn.sock is None:
                    conn.timeout = limit
                else:
                    conn.sock.settimeout(limit)
                conn.request(method, path, prepared.body, prepared.headers)
                response = conn.getresponse()
                raw = response.read()
                elapsed = time.perf_counter() - start
            except TimeoutError as exc:
                self._drop_connection()
                raise RequestTimeout(f"{method} {path}: no answer within {limit:g} s") from exc
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self._drop_connection()
                if time.perf_counter() - start >= limit * 0.95:
                    # uwsgi's HTTP router gives up on a slow worker after its
                    # own 60 s and closes the connection: that is a timeout too.
                    raise RequestTimeout(
                        f"{method} {path}: connection closed after {limit:g} s") from exc
                if attempt == 1 and reused:
                    continue
                raise
            self._local.used = True
            if response.will_close:
                self._drop_connection()
            return Reply(response.status, raw, elapsed)
        raise AssertionError("unreachable")

    def get(self, path: str, timeout: float | None = None) -> Reply:
        return self.request("GET", path, timeout=timeout)

    def put(self, path: str, body: Any) -> Reply:
        return self.request("PUT", path, body)

    def post(self, path: str, body: Any) -> Reply:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Reply:
        return self.request("DELETE", path)
