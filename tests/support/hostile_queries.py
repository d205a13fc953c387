"""Clients that send the most expensive candidates queries, and probes meanwhile.

Used by tests/live/test_hostile_queries.py, and on its own for figures:

    .venv/bin/python -m tests.support.hostile_queries --url http://127.0.0.1:8778 --clients 10 \
        --seconds 30 --pid <allotment serve's pid>

The cloud it builds (``build_cloud``) holds three trees whose one-unit children
make granular requests explode combinatorially under ``group_policy=none``:

* ``ten``: 10 children, 10 groups: 10! = 3,628,800 candidates;
* ``wide``: 200 children, 5 groups: about 3 x 10^11 candidates;
* ``bug``: upstream bug 2126751's shape, 8 children, 8 groups: 40,320
  candidates (38 MB of JSON), which upstream answers and so must we.

Loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

HEADERS = {"X-Auth-Token": "admin", "Accept": "application/json",
           "OpenStack-API-Version": "placement 1.39", "Content-Type": "application/json"}

# name -> (resource class, children, groups)
SHAPES: dict[str, tuple[str, int, int]] = {
    "ten": ("CUSTOM_HOSTILE_TEN", 10, 10),
    "wide": ("CUSTOM_HOSTILE_WIDE", 200, 5),
    "bug": ("CUSTOM_HOSTILE_BUG", 8, 8),
}


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    assert host in ("127.0.0.1", "localhost", "::1"), "loopback only"
    return host, parts.port or 80


def _call(url: str, method: str, path: str, body: object = None,
          timeout: float = 60.0) -> tuple[int, bytes]:
    host, port = _address(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers=HEADERS)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def build_cloud(url: str, shapes: list[str] | None = None) -> None:
    """One root per shape (all of ``SHAPES`` unless named) with one-unit children
    of the shape's class."""
    for name in shapes or list(SHAPES):
        resource_class, children, _ = SHAPES[name]
        status, _ = _call(url, "PUT", f"/resource_classes/{resource_class}")
        assert status in (201, 204), status
        root = str(uuid.uuid4())
        status, body = _call(url, "POST", "/resource_providers",
                             {"name": f"hostile-{name}", "uuid": root})
        assert status == 200, body
        status, body = _call(url, "PUT", f"/resource_providers/{root}/inventories", {
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
        assert status == 200, body
        for index in range(children):
            child = str(uuid.uuid4())
            status, body = _call(url, "POST", "/resource_providers", {
                "name": f"hostile-{name}-{index}", "uuid": child,
                "parent_provider_uuid": root})
            assert status == 200, body
            status, body = _call(url, "PUT", f"/resource_providers/{child}/inventories", {
                "resource_provider_generation": 0,
                "inventories": {resource_class: {"total": 1}}})
            assert status == 200, body


def query(shape: str, limit: int | None = None) -> str:
    resource_class, _, groups = SHAPES[shape]
    parts = [f"resources{i}={resource_class}:1" for i in range(1, groups + 1)]
    parts.append("group_policy=none")
    if limit is not None:
        parts.append(f"limit={limit}")
    return "/allocation_candidates?" + "&".join(parts)


@dataclass
class Seen:
    """What one kind of client saw: statuses and latencies in seconds."""

    statuses: list[int | str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def add(self, status: int | str, latency: float) -> None:
        self.statuses.append(status)
        self.latencies.append(latency)

    def summary(self) -> dict:
        counts: dict[str, int] = {}
        for status in self.statuses:
            counts[str(status)] = counts.get(str(status), 0) + 1
        lat = sorted(self.latencies)
        return {
            "count": len(lat), "statuses": counts,
            "p50_ms": round(statistics.median(lat) * 1000, 1) if lat else None,
            "max_ms": round(lat[-1] * 1000, 1) if lat else None,
        }


def worker_pids(server_pid: int) -> list[int]:
    """The server's child processes (its gunicorn workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == server_pid:
            found.append(int(entry))
    return sorted(found)


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class Attack:
    """The figures of one run."""

    attackers: Seen = field(default_factory=Seen)
    probes: Seen = field(default_factory=Seen)
    peak_worker_rss: int = 0
    rss_before: list[int] = field(default_factory=list)
    rss_after: list[int] = field(default_factory=list)

    def report(self) -> dict:
        return {"attackers": self.attackers.summary(), "probes": self.probes.summary(),
                "worker_rss_before_mib": [r >> 20 for r in self.rss_before],
                "peak_worker_rss_mib": self.peak_worker_rss >> 20,
                "worker_rss_after_mib": [r >> 20 for r in self.rss_after]}


def attack(url: str, clients: int, seconds: float, server_pid: int | None = None,
           probe_interval: float = 0.5, probe_timeout: float = 30.0,
           attack_timeout: float = 120.0) -> Attack:
    """``clients`` threads send the shapes in turn, unlimited, for ``seconds``;
    one prober sends ``GET /`` and a small ``GET /resource_providers`` every
    ``probe_interval``. Worker memory is sampled every 0.2 s."""
    seen = Attack()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    workers = worker_pids(server_pid) if server_pid else []
    seen.rss_before = [rss_bytes(pid) for pid in workers]
    shapes = list(SHAPES)

    def attacker(index: int) -> None:
        turn = index
        while time.monotonic() < stop_at:
            path = query(shapes[turn % len(shapes)])
            turn += 1
            started = time.monotonic()
            try:
                status: int | str = _call(url, "GET", path, timeout=attack_timeout)[0]
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                seen.attackers.add(status, time.monotonic() - started)

    def prober() -> None:
        paths = ["/", "/resource_providers?name=hostile-ten"]
        turn = 0
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                status: int | str = _call(url, "GET", paths[turn % 2],
                                          timeout=probe_timeout)[0]
            except OSError as exc:
                status = type(exc).__name__
            elapsed = time.monotonic() - started
            with lock:
                seen.probes.add(status, elapsed)
            turn += 1
            time.sleep(max(0.0, probe_interval - elapsed))

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True)
               for i in range(clients)]
    threads.append(threading.Thread(target=prober, daemon=True))
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for pid in workers:
            seen.peak_worker_rss = max(seen.peak_worker_rss, rss_bytes(pid))
        time.sleep(0.2)
        if time.monotonic() > stop_at + attack_timeout + probe_timeout:
            break  # a client still waiting: its socket times out by itself
    seen.rss_after = [rss_bytes(pid) for pid in workers]
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8778")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--pid", type=int, help="allotment serve's pid (for worker memory)")
    parser.add_argument("--build", action="store_true", help="create the cloud first")
    args = parser.parse_args()
    if args.build:
        build_cloud(args.url)
    print(json.dumps(attack(args.url, args.clients, args.seconds, args.pid).report(),
                     indent=2))


if __name__ == "__main__":
    main()
