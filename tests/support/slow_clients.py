"""Hold many half-sent and idle connections open, and probe the server meanwhile.

Used by tests/live/test_slow_clients.py, and on its own for figures:

    .venv/bin/python -m tests.support.slow_clients --url http://127.0.0.1:8778 --held 1000

Loopback only. Every socket is closed when ``Hold`` is left.
"""

from __future__ import annotations

import argparse
import http.client
import selectors
import socket
import statistics
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HEADERS = {"X-Auth-Token": "admin", "Accept": "application/json"}

# Three ways to stop half-way: in the request line, in the headers, in the body.
HALF_SENT = [
    b"GET /resource_providers?name=slo",
    b"GET /resource_providers HTTP/1.1\r\nHost: slow\r\nX-Auth-Token: admin\r\nX-Pad",
    b"POST /resource_providers HTTP/1.1\r\nHost: slow\r\nX-Auth-Token: admin\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\": \"sl",
]
KEEPALIVE_REQUEST = (b"GET / HTTP/1.1\r\nHost: idle\r\nX-Auth-Token: admin\r\n"
                     b"Connection: keep-alive\r\n\r\n")


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"
    return host, parts.port or 80


@dataclass
class Probes:
    """What a well-behaved client saw: statuses and latencies in seconds."""

    statuses: list[int | str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return sum(1 for status in self.statuses if status == 200)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies) * 1000 if self.latencies else float("nan")

    @property
    def worst_ms(self) -> float:
        return max(self.latencies) * 1000 if self.latencies else float("nan")


def probe(url: str, count: int, timeout: float = 5.0) -> Probes:
    """``count`` GETs, each on a new connection, as a scheduler's would be."""
    host, port = _address(url)
    seen = Probes()
    for _ in range(count):
        started = time.monotonic()
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", "/resource_providers", headers=HEADERS)
            response = conn.getresponse()
            response.read()
            seen.statuses.append(response.status)
        except OSError as exc:
            seen.statuses.append(type(exc).__name__)
        finally:
            conn.close()
        seen.latencies.append(time.monotonic() - started)
    return seen


class Hold:
    """``half_sent`` connections stopped mid-request and ``idle`` kept-alive ones."""

    def __init__(self, url: str, half_sent: int, idle: int) -> None:
        self.address = _address(url)
        self.half_sent_count = half_sent
        self.idle_count = idle
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> Hold:
        for index in range(self.half_sent_count):
            sock = socket.create_connection(self.address, timeout=10)
            sock.sendall(HALF_SENT[index % len(HALF_SENT)])
            self.sockets.append(sock)
        idle = []
        for _ in range(self.idle_count):
            sock = socket.create_connection(self.address, timeout=10)
            sock.sendall(KEEPALIVE_REQUEST)
            idle.append(sock)
        for sock in idle:  # read each answer, keep the connection open
            _read_answer(sock)
            self.sockets.append(sock)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sock in self.sockets:
            sock.close()

    def closed_by_server(self, within: float) -> int:
        """How many held connections the server closes within ``within`` seconds."""
        selector = selectors.DefaultSelector()
        for sock in self.sockets:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        closed = 0
        deadline = time.monotonic() + within
        while closed < len(self.sockets) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (ConnectionResetError, BlockingIOError) as exc:
                    data = b"" if isinstance(exc, ConnectionResetError) else b"?"
                if not data:
                    selector.unregister(sock)
                    closed += 1
        selector.close()
        return closed


def _read_answer(sock: socket.socket) -> None:
    """Read one whole HTTP answer with a Content-Length from ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed mid-answer")
        body += chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--held", type=int, default=1000, help="half-sent connections")
    parser.add_argument("--idle", type=int, default=1000, help="idle keep-alive connections")
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--probe-timeout", type=float, default=5.0)
    args = parser.parse_args()
    before = probe(args.url, args.probes, args.probe_timeout)
    print(f"no held connections: {before.answered}/{args.probes} answered, "
          f"median {before.median_ms:.1f} ms, worst {before.worst_ms:.1f} ms")
    started = time.monotonic()
    with Hold(args.url, args.held, 0) as held:
        during = probe(args.url, args.probes, args.probe_timeout)
        print(f"{args.held} half-sent: {during.answered}/{args.probes} answered, "
              f"median {during.median_ms:.1f} ms, worst {during.worst_ms:.1f} ms")
        closed = held.closed_by_server(within=60)
        print(f"  server closed {closed}/{args.held} of them within "
              f"{time.monotonic() - started:.0f} s")
    try:
        with Hold(args.url, args.held, args.idle) as held:
            during = probe(args.url, args.probes, args.probe_timeout)
            print(f"{args.held} half-sent + {args.idle} idle keep-alive: "
                  f"{during.answered}/{args.probes} answered, median {during.median_ms:.1f} ms, "
                  f"worst {during.worst_ms:.1f} ms")
    except OSError as exc:
        print(f"{args.held} half-sent + {args.idle} idle keep-alive: could not set up "
              f"({type(exc).__name__}: {exc})")


if __name__ == "__main__":
    main()
