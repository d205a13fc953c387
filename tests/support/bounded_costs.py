"""Ten clients sending the worst request of every kind allotment added, while
probes and claims of other clients are timed (issue 32's acceptance).

Used by tests/live/test_bounded_costs.py, and on its own for figures:

    .venv/bin/python -m tests.support.bounded_costs --url http://127.0.0.1:8778 --build

The kinds (``worst_requests``): the audit at its largest page, the history at
its largest page, headroom with many granular groups and as many ``add=``
templates as fit in the query string, explain of a many-group request, the
dashboard's largest pages, and ``/metrics``. Loopback only; every loop is
bounded in time.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid

from tests.support.hostile_queries import Seen, _call

# Providers of the cloud, and consumers holding on each.
PROVIDERS = 300
CONSUMERS_PER_PROVIDER = 4
GROUPS = 40


def build_cloud(url: str, providers: int = PROVIDERS) -> list[str]:
    """``providers`` compute hosts (VCPU, MEMORY_MB, DISK_GB), each with a few
    consumers holding on it; their uuids."""
    uuids = []
    for index in range(providers):
        rp = str(uuid.uuid4())
        status, body = _call(url, "POST", "/resource_providers",
                             {"name": f"cn-{index:05d}", "uuid": rp})
        assert status == 200, body
        status, body = _call(url, "PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144},
                "DISK_GB": {"total": 2000}}})
        assert status == 200, body
        uuids.append(rp)
    project, user = str(uuid.uuid4()), str(uuid.uuid4())
    for start in range(0, len(uuids), 50):
        claims = {str(uuid.uuid4()): {
            "allocations": {rp: {"resources": {"VCPU": 1, "MEMORY_MB": 1024}}},
            "project_id": project, "user_id": user, "consumer_generation": None,
            "consumer_type": "INSTANCE"}
            for rp in uuids[start:start + 50] for _ in range(CONSUMERS_PER_PROVIDER)}
        status, body = _call(url, "POST", "/allocations", claims)
        assert status == 204, body
    return uuids


def worst_requests(provider: str) -> list[str]:
    """The most expensive request of each kind, as paths."""
    groups = "&".join(f"resources{i}=VCPU:1" for i in range(1, GROUPS + 1))
    templates = []
    size = len(groups)
    i = 0
    while size < 30_000 and len(templates) < 100:  # (the most GET /headroom takes)
        template = f"add=1xVCPU:{64 + i}"
        templates.append(template)
        size += len(template) + 1
        i += 1
    return [
        "/audit/allocations?limit=1000",
        "/history/allocations?limit=1000",
        f"/history/inventories?resource_provider_uuid={provider}&limit=1000",
        f"/headroom?{groups}&group_policy=none&" + "&".join(templates),
        f"/explain/allocation_candidates?{groups}&group_policy=none",
        "/dashboard/api/providers?limit=500",
        "/dashboard/api/summary?limit=100",
        "/dashboard/api/projects?limit=500",
        "/metrics",
    ]


class Figures:
    """What the attackers, the probes and the claims saw."""

    def __init__(self) -> None:
        self.attackers: dict[str, Seen] = {}
        self.probes = Seen()
        self.claims = Seen()

    def report(self) -> dict:
        return {"attackers": {path.split("?")[0]: seen.summary()
                              for path, seen in self.attackers.items()},
                "probes": self.probes.summary(), "claims": self.claims.summary()}


def attack(url: str, providers: list[str], clients: int = 10, seconds: float = 30.0,
           interval: float = 0.5, timeout: float = 30.0) -> Figures:
    """``clients`` threads cycle over ``worst_requests`` for ``seconds``; one prober
    sends ``GET /`` and one claimer claims and gives back a small allocation,
    each every ``interval``."""
    figures = Figures()
    lock = threading.Lock()
    paths = worst_requests(providers[0])
    figures.attackers = {path: Seen() for path in paths}
    stop_at = time.monotonic() + seconds

    def attacker(index: int) -> None:
        turn = index
        while time.monotonic() < stop_at:
            path = paths[turn % len(paths)]
            turn += 1
            started = time.monotonic()
            try:
                status: int | str = _call(url, "GET", path, timeout=timeout + 30)[0]
            except OSError as exc:
                status = type(exc).__name__
            with lock:
                figures.attackers[path].add(status, time.monotonic() - started)

    def timed(seen: Seen, send) -> None:
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                status: int | str = send()
            except OSError as exc:
                status = type(exc).__name__
            elapsed = time.monotonic() - started
            with lock:
                seen.add(status, elapsed)
            time.sleep(max(0.0, interval - elapsed))

    def probe() -> int:
        return _call(url, "GET", "/", timeout=timeout)[0]

    claimed = iter(range(10**9))
    project, user = str(uuid.uuid4()), str(uuid.uuid4())

    def claim() -> int:
        consumer = str(uuid.uuid4())
        rp = providers[next(claimed) % len(providers)]
        status, _ = _call(url, "PUT", f"/allocations/{consumer}", {
            "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": project,
            "user_id": user, "consumer_generation": None, "consumer_type": "INSTANCE"},
            timeout=timeout)
        if status != 204:
            return status
        return _call(url, "DELETE", f"/allocations/{consumer}", timeout=timeout)[0]

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True)
               for i in range(clients)]
    threads += [threading.Thread(target=timed, args=(figures.probes, probe), daemon=True),
                threading.Thread(target=timed, args=(figures.claims, claim), daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, stop_at - time.monotonic()) + 2 * timeout + 30)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8778")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--build", action="store_true", help="create the cloud first")
    args = parser.parse_args()
    providers = build_cloud(args.url) if args.build else []
    if not providers:
        _, body = _call(args.url, "GET", "/resource_providers")
        providers = [rp["uuid"] for rp in json.loads(body)["resource_providers"]]
    print(json.dumps(attack(args.url, providers, args.clients, args.seconds).report(),
                     indent=2))


if __name__ == "__main__":
    main()
