"""The nemesis: seeded faults, each bounded in time and undone, then measured.

Kinds (each on a node, link or server the seed picks):

- ``partition_node``: one node cut off from the other two, both directions; it
  loses quorum (non-primary) while the other two go on. Its server stays
  reachable by clients: the majority/minority split with servers on both sides.
- ``partition_bridge``: only the link between two nodes cut; each still sees
  the third (Jepsen's "majorities ring" on three nodes).
- ``kill_ist``: SIGKILL a node; after a while recover its position
  (``--wsrep-recover``) and start it: it catches up by IST.
- ``kill_sst``: SIGKILL a node and wipe its data; it comes back by SST.
- ``pause``: SIGSTOP a node longer than ``evs.suspect_timeout`` (3 s), then SIGCONT.
- ``packet_drop``: drop a random share of the packets on a node's links, both ways.
- ``server_restart``: SIGKILL a server (master and workers) while claims are in
  flight, and start it again on the same port.
- ``slow_writer``: a writer outside the servers (an operator's SQL, a slow
  client) changes a probe provider's inventory and generation on a node, as an
  API write would, and holds that transaction open past the read model's
  settle time for changes not seen yet (``GALERA_GAP_SETTLE``, 10 s) while the
  servers commit on every node, then commits. Its staleness is measured from
  that commit until every server's candidates show the new capacity.

After each fault is undone the cluster is waited for (3 nodes Synced), then
every server is probed with a claim on a probe provider of its own: the time
from the heal to its first acknowledged probe is the recovery time. After each
acknowledged probe, the provider's usage is read on a node and every server's
``GET /allocation_candidates`` is polled until its provider summary shows that
usage: the staleness of the read model.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.faults import cloud as clouds
from tests.faults.checker import Node, connect
from tests.faults.history import History, request
from tests.faults.netfilter import PacketFilter
from tests.faults.workload import Providers, claim_body

KINDS = ("partition_node", "partition_bridge", "kill_ist", "kill_sst", "pause",
         "packet_drop", "server_restart", "slow_writer")
PROBE_TIMEOUT = 120.0


@dataclass
class Fault:
    kind: str
    target: str
    began: float
    held_s: float = 0.0
    healed_s: float = 0.0  # from undoing the fault to 3 nodes Synced
    recovery_s: float = 0.0  # from undoing it to every server's first acknowledged write
    staleness_s: float = 0.0
    transfer: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 2) if isinstance(v, float) else v)
                for k, v in self.__dict__.items()}


@dataclass
class Nemesis:
    cloud: clouds.Cloud
    packets: PacketFilter
    history: History
    providers: Providers
    nodes: list[Node]
    seed: int
    faults: list[Fault] = field(default_factory=list)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def schedule(self, kinds: tuple[str, ...]) -> list[str]:
        """Every kind once (in a seeded order), then seeded draws."""
        first = list(kinds)
        self.rng.shuffle(first)
        return first

    def run(self, kinds: tuple[str, ...], until: float, stop: threading.Event) -> None:
        order = self.schedule(kinds)
        while not stop.is_set() and time.monotonic() < until and kinds:
            kind = order.pop(0) if order else self.rng.choice(kinds)
            self.inject(kind)
            stop.wait(self.rng.uniform(2, 5))

    def inject(self, kind: str) -> Fault:
        index = self.rng.randrange(3)
        node = self.cloud.cluster.nodes[index]
        address = node.host
        others = [a for a in self.cloud.addresses if a != address]
        hold = self.rng.uniform(6, 12)
        fault = Fault(kind, node.name, time.monotonic() - self.history.began)
        self.history.fault = kind
        began = time.monotonic()
        mark = clouds.log_size(node)
        if kind == "partition_node":
            self.packets.isolate([address], others)
            time.sleep(hold)
            self.packets.heal()
        elif kind == "partition_bridge":
            other = self.rng.choice(others)
            fault.target = f"{node.host}<->{other}"
            self.packets.isolate([address], [other])
            time.sleep(hold)
            self.packets.heal()
        elif kind == "packet_drop":
            share = self.rng.uniform(0.2, 0.4)
            fault.note = f"p={share:.2f}"
            for other in others:
                self.packets.drop_share(address, other, share)
                self.packets.drop_share(other, address, share)
            time.sleep(hold)
            self.packets.heal()
        elif kind == "pause":
            hold = max(hold, 8.0)  # beyond evs.suspect_timeout (3 s) and inactive (6 s)
            clouds.pause_node(node)
            time.sleep(hold)
            clouds.resume_node(node)
        elif kind in ("kill_ist", "kill_sst"):
            clouds.kill_node(node)
            if kind == "kill_sst":
                clouds.wipe_node(node)
                position = None
            time.sleep(hold)
            if kind == "kill_ist":
                position = clouds.recovered_position(node)
                fault.note = f"position {position}"
            clouds.restart_node(node, position)
            fault.transfer = clouds.transfer_seen(node, mark)
        elif kind == "server_restart":
            server = self.cloud.servers[index]
            fault.target = server.name
            server.kill()
            time.sleep(self.rng.uniform(1, 3))
            server.start()
        elif kind == "slow_writer":
            hold = self.rng.uniform(12, 16)  # past the read model's 10 s on Galera
            fault.target = f"{node.name}, probe {index + 1}"
            fault.staleness_s = self.slow_write(self.nodes[index],
                                                self.providers.probes[index], hold)
            fault.note = f"held {hold:.1f} s"
        else:
            raise ValueError(kind)
        healed = time.monotonic()
        fault.held_s = healed - began
        fault.healed_s = clouds.wait_healed(self.cloud)
        self.history.fault = None
        fault.recovery_s, staleness = self.probe(healed)
        fault.staleness_s = max(fault.staleness_s, staleness)
        self.faults.append(fault)
        return fault

    def slow_write(self, node: Node, probe: str, hold: float) -> float:
        """Write ``probe``'s inventory in a transaction held open ``hold`` seconds;
        seconds from its commit until every server's candidates show it."""
        conn = connect(node)
        try:
            with conn.cursor() as cursor:
                cursor.execute("START TRANSACTION")
                cursor.execute("UPDATE inventories i JOIN resource_providers rp "
                               "ON rp.id = i.resource_provider_id "
                               "SET i.total = i.total + 1 WHERE rp.uuid = %s", (probe,))
                cursor.execute("UPDATE resource_providers SET generation = generation + 1 "
                               "WHERE uuid = %s", (probe,))
                cursor.execute("SELECT FLOOR((i.total - i.reserved) * i.allocation_ratio) "
                               "FROM inventories i JOIN resource_providers rp "
                               "ON rp.id = i.resource_provider_id WHERE rp.uuid = %s",
                               (probe,))
                row = cursor.fetchone()
                assert row is not None
                capacity = int(row[0])
                time.sleep(hold)
                cursor.execute("COMMIT")
        finally:
            conn.close()
        committed = time.monotonic()
        self._wait_for_servers(probe, "capacity", capacity, committed)
        return time.monotonic() - committed

    def probe(self, healed: float) -> tuple[float, float]:
        """Seconds from ``healed`` until every server acknowledged a probe claim,
        and the longest wait for the servers' candidates to show a probe."""
        recovery = 0.0
        staleness = 0.0
        for server, probe in zip(self.cloud.servers, self.providers.probes, strict=True):
            while True:
                consumer = str(uuid.uuid4())
                target = {probe: 1}
                operation = self.history.invoke("probe_claim", server.name, consumer, {},
                                                target)
                answer = request(server.url, "PUT", f"/allocations/{consumer}",
                                 claim_body(target, None))
                self.history.complete(operation, answer)
                if answer.outcome == "ok":
                    break
                if time.monotonic() - healed > PROBE_TIMEOUT:
                    raise RuntimeError(f"{server.name} did not recover: {answer}")
                time.sleep(0.2)
            acknowledged = time.monotonic()
            recovery = max(recovery, acknowledged - healed)
            staleness = max(staleness, self.staleness(probe, acknowledged))
        return recovery, staleness

    def _usage_on_a_node(self, probe: str) -> int:
        conn = connect(self.nodes[0])
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT COALESCE(SUM(a.used), 0) FROM allocations a JOIN "
                               "resource_providers rp ON rp.id = a.resource_provider_id "
                               "WHERE rp.uuid = %s", (probe,))
                row = cursor.fetchone()
        finally:
            conn.close()
        return int(row[0]) if row else 0

    def staleness(self, probe: str, acknowledged: float) -> float:
        self._wait_for_servers(probe, "used", self._usage_on_a_node(probe), acknowledged)
        return time.monotonic() - acknowledged

    def _wait_for_servers(self, probe: str, field_name: str, expected: int,
                          since: float) -> None:
        """Until every server's candidates show ``expected`` as the probe's VCPU
        ``field_name`` (used, capacity), or PROBE_TIMEOUT after ``since``."""
        waiting = {s.name: s.url for s in self.cloud.servers}
        while waiting:
            for name, url in list(waiting.items()):
                answer = request(url, "GET", "/allocation_candidates?resources=VCPU:1"
                                 f"&in_tree={probe}&limit=1")
                if answer.outcome == "ok" and isinstance(answer.body, dict):
                    summary = answer.body.get("provider_summaries", {}).get(probe, {})
                    shown = summary.get("resources", {}).get("VCPU", {}).get(field_name)
                    if shown == expected:
                        del waiting[name]
            if time.monotonic() - since > PROBE_TIMEOUT:
                return
            if waiting:
                time.sleep(0.1)
