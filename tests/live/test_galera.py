"""Claims on a 3-node MariaDB Galera cluster: no overcommit, no lost update, never a 500.

A private cluster (``tests.support.galera``: 3 nodes on loopback, node 1 bootstrapped,
2 and 3 joined by rsync SST) and three live ``allotment serve``, each on a
node of its own; the schema is created through the first. Threads claim,
move and release through all three servers at once on the same few
providers until they are full. On Galera, two nodes' transactions on the
same provider row both run; the second to commit fails certification and
gets a deadlock error (1213), at the statement or at COMMIT, which the
service must run again like any lost race: at worst the client gets 409,
never a 500.

Afterwards, read through every server: each provider's usage is at most its
capacity and equals the sum of its allocations; every accepted claim is
there with its exact amounts, every refused one is absent.

The second test does the same while node 3 is stopped and started again
mid-load: its server answers 503 meanwhile (counted), the others keep
serving, and it answers normally again once the node has rejoined (IST).

Figures (claims per server, certification retries from the Prometheus
counters, 503s, wall times) are printed; ``pytest -s`` shows them.
Select with ``-m galera``; runs by default (about a minute).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.clients import live
from tests.support.dbservers import call
from tests.support.galera import GaleraCluster, write_retries
from tests.support.needs import require

pytestmark = pytest.mark.galera

PROJECT = "6f1b0c1e-9b1c-4d7e-8f8b-1c2d3e4f5a6b"
USER = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
THREADS_PER_SERVER = 6
CLASSES = ("VCPU", "MEMORY_MB")
# After ``stop_after`` a thread only claims (no release, move or pair), so usage no
# longer falls, and it stops once this many claims in a row were refused for
# capacity. A claim goes to one of 3 providers at random, so while only one still has
# room for any claim a thread stops by chance about 1 time in 3,000 ((2/3)**20).
# (Releasing during that phase let the last threads free room after the others had
# stopped for good: a run ended with 4 VCPU left.)
FULL_STREAK = 20

Allocation = dict[str, dict[str, int]]  # provider uuid -> class -> amount


@dataclass
class Cloud:
    cluster: GaleraCluster
    servers: list[live.LiveServer]
    started_in: float


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    require(GaleraCluster.missing(), "no Galera cluster")
    began = time.monotonic()
    cluster = GaleraCluster.create()
    assert cluster is not None
    servers: list[live.LiveServer] = []
    try:
        cluster.start()
        cluster.nodes[0].create_database("placement")
        workdir = tmp_path_factory.mktemp("galera")
        # One after the other: the first creates the schema, the others find it at head.
        for number, node in enumerate(cluster.nodes, start=1):
            servers.append(live.start(workdir / f"server{number}",
                                      database_url=node.url("placement"),
                                      extra_conf="[allotment]\nmetrics = True\n"))
        yield Cloud(cluster, servers, time.monotonic() - began)
    finally:
        for server in servers:
            server.stop()
        cluster.remove()


def _providers(server: live.LiveServer, count: int, vcpus: int) -> list[str]:
    uuids = []
    for _ in range(count):
        rp = str(uuid.uuid4())
        status, _, body = call(server.url, "POST", "/resource_providers",
                               {"uuid": rp, "name": f"galera-{rp}"})
        assert status == 200, body
        status, _, body = call(server.url, "PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": vcpus},
                            "MEMORY_MB": {"total": vcpus * 512}}})
        assert status == 200, body
        uuids.append(rp)
    return uuids


def _retries(server: live.LiveServer) -> dict[str, float]:
    return write_retries(server.url)


@dataclass
class Load:
    """What every thread did and what the database must now hold."""

    servers: list[live.LiveServer]
    providers: list[str]
    stop_after: float  # monotonic time after which threads only claim, until full
    deadline: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[int, Counter] = field(default_factory=dict)
    # consumer -> its one possible state (None: no allocations), or several
    # when a write's outcome is unknown (503 after the commit may have landed).
    expected: dict[str, list[Allocation | None]] = field(default_factory=dict)
    stale_reads: int = 0
    cross_reads: int = 0
    # (server, when the request was sent, when its 503 came back)
    unavailable_at: list[tuple[int, float, float]] = field(default_factory=list)
    surprises: list[str] = field(default_factory=list)  # the first unexpected answers

    def count(self, server: int, what: str) -> None:
        with self.lock:
            self.counts.setdefault(server, Counter())[what] += 1


def _outcome(status: int, body: object) -> str:
    if status in (200, 204):
        return "accepted"
    if status == 409:
        code = body["errors"][0].get("code") if isinstance(body, dict) else None
        return "conflict" if code == "placement.concurrent_update" else "refused"
    if status == 503:
        return "unavailable"
    return f"status {status}"


def _claim_body(allocation: Allocation | None, generation: int | None) -> dict:
    return {"allocations": {rp: {"resources": resources}
                            for rp, resources in (allocation or {}).items()},
            "project_id": PROJECT, "user_id": USER, "consumer_generation": generation,
            "consumer_type": "INSTANCE"}


def _worker(load: Load, number: int, seed: int) -> None:
    _Worker(load, number, seed).run()


class _Worker:
    """One thread's claims, moves and releases through its home server."""

    def __init__(self, load: Load, number: int, seed: int) -> None:
        self.load = load
        self.rng = random.Random(seed)
        self.home = number % len(load.servers)
        self.server = load.servers[self.home]
        self.mine: dict[str, Allocation] = {}  # consumers this thread holds (certain state)
        self.history: dict[str, list] = {}
        self.sent_at = 0.0

    def run(self) -> None:
        load = self.load
        full_streak = 0
        filling = False
        while time.monotonic() < load.deadline:
            if load.surprises:
                return
            if not filling and time.monotonic() > load.stop_after:
                filling, full_streak = True, 0  # a streak from before may predate a release
            if filling and full_streak >= FULL_STREAK:
                return
            # Filling: only single claims, which can only use room up.
            roll = 1.0 if filling else self.rng.random()
            if self.mine and roll < 0.08:
                self.release()
                continue
            if self.mine and roll < 0.16:
                outcome = self.move()
                if outcome is None:
                    continue
            elif roll < 0.28:
                outcome = self.claim_pair()
            else:
                outcome = self.claim_one()
            full_streak = full_streak + 1 if outcome == "refused" else 0

    def send(self, method: str, path: str, body: object = None) -> tuple:
        self.sent_at = time.monotonic()
        return call(self.server.url, method, path, body, timeout=30)

    def record(self, consumer: str, status: int, body: object, before: Allocation | None,
               after: Allocation | None) -> str:
        load = self.load
        outcome = _outcome(status, body)
        self.history.setdefault(consumer, []).append((status, after))
        with load.lock:
            if outcome == "accepted":
                load.expected[consumer] = [after]
            elif outcome == "unavailable":
                load.expected[consumer] = [before, after]
            else:
                load.expected.setdefault(consumer, [before])
        load.count(self.home, outcome)
        if outcome.startswith("status") and len(load.surprises) < 5:
            seen = [call(other.url, "GET", f"/allocations/{consumer}")[2]
                    for other in load.servers]
            load.surprises.append(f"{outcome} for {consumer}: {str(body)[:300]}; "
                                  f"history {self.history.get(consumer)}; now {seen}")
        if outcome == "unavailable":
            with load.lock:
                load.unavailable_at.append((self.home, self.sent_at, time.monotonic()))
            self.mine.pop(consumer, None)  # its state is unknown: leave it alone
            time.sleep(0.05)
        elif after is not None and outcome == "accepted":
            self.mine[consumer] = after
        elif outcome == "accepted":
            self.mine.pop(consumer, None)
        return outcome

    def amounts(self) -> dict[str, int]:
        vcpu = self.rng.randint(1, 3)
        return {"VCPU": vcpu, "MEMORY_MB": 256 * vcpu}

    def release(self) -> None:
        consumer = self.rng.choice(sorted(self.mine))
        status, _, body = self.send("DELETE", f"/allocations/{consumer}")
        self.record(consumer, status, body, self.mine[consumer], None)

    def move(self) -> str | None:
        """To another provider; None when the consumer could not be read first."""
        consumer = self.rng.choice(sorted(self.mine))
        status, _, body = self.send("GET", f"/allocations/{consumer}")
        if status != 200:
            self.load.count(self.home, _outcome(status, body))
            return None
        assert isinstance(body, dict)
        generation = body["consumer_generation"]
        before = self.mine[consumer]
        target = self.rng.choice([rp for rp in self.load.providers if rp not in before])
        after = {target: next(iter(before.values()))}
        status, _, body = self.send("PUT", f"/allocations/{consumer}",
                                    _claim_body(after, generation))
        return self.record(consumer, status, body, before, after)

    def claim_pair(self) -> str:
        """Two new consumers in one POST /allocations."""
        pair = {str(uuid.uuid4()): {self.rng.choice(self.load.providers): self.amounts()}
                for _ in range(2)}
        status, _, body = self.send("POST", "/allocations",
                                    {c: _claim_body(a, None) for c, a in pair.items()})
        for consumer, allocation in pair.items():
            outcome = self.record(consumer, status, body, None, allocation)
        return outcome

    def claim_one(self) -> str:
        """A new consumer; sometimes read at once through another server."""
        consumer = str(uuid.uuid4())
        allocation = {self.rng.choice(self.load.providers): self.amounts()}
        status, _, body = self.send("PUT", f"/allocations/{consumer}",
                                    _claim_body(allocation, None))
        outcome = self.record(consumer, status, body, None, allocation)
        if outcome == "accepted" and self.rng.random() < 0.25:
            self.cross_read(consumer)
        return outcome

    def cross_read(self, consumer: str) -> None:
        """Causal reads make a claim visible at once through another node."""
        load = self.load
        other = load.servers[(self.home + 1) % len(load.servers)]
        status, _, body = call(other.url, "GET", f"/allocations/{consumer}", timeout=30)
        if status == 200:
            assert isinstance(body, dict)
            with load.lock:
                load.cross_reads += 1
                if not body["allocations"]:
                    load.stale_reads += 1


def _run(load: Load, during: threading.Thread | None = None) -> float:
    began = time.monotonic()
    threads = [threading.Thread(target=_worker, args=(load, n, n * 7919), daemon=True)
               for n in range(THREADS_PER_SERVER * len(load.servers))]
    for thread in threads:
        thread.start()
    if during is not None:
        during.start()
    for thread in threads:
        thread.join(timeout=max(1.0, load.deadline - time.monotonic() + 60))
    if during is not None:
        during.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    return time.monotonic() - began


def _check(load: Load) -> dict[str, dict[str, int]]:
    """Every server reads exactly what was accepted; usage within capacity."""
    usage_seen: dict[str, dict[str, int]] = {}
    for server in load.servers:
        held: dict[str, Allocation] = {}
        for rp in load.providers:
            status, _, body = call(server.url, "GET", f"/resource_providers/{rp}/allocations")
            assert status == 200, body
            assert isinstance(body, dict)
            for consumer, entry in body["allocations"].items():
                held.setdefault(consumer, {})[rp] = entry["resources"]
            status, _, usages = call(server.url, "GET", f"/resource_providers/{rp}/usages")
            assert status == 200
            status, _, inventories = call(server.url, "GET",
                                          f"/resource_providers/{rp}/inventories")
            assert status == 200
            assert isinstance(usages, dict) and isinstance(inventories, dict)
            summed: Counter[str] = Counter()
            for entry in body["allocations"].values():
                summed.update(entry["resources"])
            for rc in CLASSES:
                used = usages["usages"].get(rc, 0)
                capacity = inventories["inventories"][rc]["total"]
                assert used <= capacity, f"{server.url}: {rp} {rc} overcommitted"
                assert used == summed[rc], f"{server.url}: {rp} {rc} usage != allocations"
            usage_seen[rp] = dict(usages["usages"])
        unknown = set(held) - set(load.expected)
        assert not unknown, f"{server.url}: allocations nobody was granted: {unknown}"
        for consumer, states in load.expected.items():
            actual = held.get(consumer)
            assert actual in states, (f"{server.url}: consumer {consumer} holds {actual}, "
                                      f"expected one of {states}")
    return usage_seen


def _report(title: str, cloud: Cloud, load: Load, wall: float,
            before: list[dict[str, float]], usage: dict[str, dict[str, int]]) -> None:
    after = [_retries(server) for server in cloud.servers]
    print(f"\n== {title}: {wall:.1f} s of load, "
          f"{THREADS_PER_SERVER * len(cloud.servers)} threads ==")
    for number, counts in sorted(load.counts.items()):
        retries = {reason: after[number].get(reason, 0) - before[number].get(reason, 0)
                   for reason in after[number]}
        print(f"server{number + 1} (node{number + 1}): {dict(counts)}; "
              f"write retries {retries}")
    print(f"cross-node reads right after a write: {load.cross_reads}, "
          f"stale: {load.stale_reads}")
    for rp in load.providers:
        print(f"provider {rp[:8]}: usage {usage[rp]}")


def _no_errors(load: Load) -> None:
    bad = {number: {what: n for what, n in counts.items() if what.startswith("status")}
           for number, counts in load.counts.items()}
    assert not any(bad.values()), f"unexpected answers: {bad}; {load.surprises}"


def test_claims_across_nodes(cloud: Cloud) -> None:
    print(f"\ncluster + 3 servers up in {cloud.started_in:.1f} s")
    providers = _providers(cloud.servers[0], 3, vcpus=48)
    before = [_retries(server) for server in cloud.servers]
    now = time.monotonic()
    # Releases and moves for 8 s, among claims that fill the providers; then fill.
    load = Load(cloud.servers, providers, stop_after=now + 8, deadline=now + 60)
    wall = _run(load)
    _no_errors(load)
    usage = _check(load)
    _report("claims through 3 nodes", cloud, load, wall, before, usage)
    assert not any(load.counts[n]["unavailable"] for n in load.counts)
    assert load.stale_reads == 0
    for rp in providers:  # it did fill up
        assert usage[rp]["VCPU"] >= 48 - 2


def test_claims_while_a_node_restarts(cloud: Cloud) -> None:
    providers = _providers(cloud.servers[0], 3, vcpus=160)
    before = [_retries(server) for server in cloud.servers]
    node = cloud.cluster.nodes[2]
    server = cloud.servers[2]
    timeline: dict[str, float] = {}

    def restart() -> None:
        time.sleep(2)
        timeline["stop"] = time.monotonic()
        node.stop()
        timeline["stopped"] = time.monotonic()
        time.sleep(3)
        timeline["synced"] = node.start(timeout=90)
        while True:
            status, _, _ = call(server.url, "GET", "/resource_providers")
            if status == 200:
                timeline["served"] = time.monotonic()
                return
            time.sleep(0.05)

    def restart_then_fill() -> None:
        restart()
        # The load goes on until 2 s after the server is back, then until full.
        load.stop_after = time.monotonic() + 2

    now = time.monotonic()
    load = Load(cloud.servers, providers, stop_after=now + 90, deadline=now + 90)
    restarter = threading.Thread(target=restart_then_fill, daemon=True)
    wall = _run(load, during=restarter)
    _no_errors(load)
    assert "served" in timeline, "server 3 never answered normally again"
    usage = _check(load)
    _report("claims through 3 nodes, node 3 restarted", cloud, load, wall, before, usage)
    print(f"node3 down {timeline['synced'] - timeline['stop']:.1f} s (stop "
          f"{timeline['stopped'] - timeline['stop']:.1f} s, start + IST "
          f"{timeline['synced'] - timeline['stopped'] - 3:.1f} s); server3 normal "
          f"{timeline['served'] - timeline['synced']:.2f} s after the node was synced")
    unavailable = load.unavailable_at
    assert all(n == 2 for n, _, _ in unavailable), "a server on a running node answered 503"
    assert load.counts[2]["unavailable"] > 0
    # A 503 belongs to the outage when the request was in flight at some point of it: a
    # request stuck connecting to the stopped node may answer after another worker's 200.
    assert all(answered >= timeline["stop"] and sent <= timeline["served"]
               for _, sent, answered in unavailable), (timeline, unavailable)
    assert load.counts[2]["accepted"] > 0
