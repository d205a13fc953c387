"""The checker: what the nodes and servers hold, against what the clients were told.

Written apart from the code under test: it reads every Galera node directly
(pymysql, the tables Placement's schema defines) and every server over HTTP,
and knows nothing of allotment's modules.

- Each consumer's admissible states follow from its operations in order: an
  acknowledged write sets it, a refused one leaves it, one without a definite
  answer (503, timeout, dropped connection, or a 5xx) may have happened or
  not, and is its last (the scheduler never writes it again).
- ``lost``: a consumer whose state on some node is none of its admissible
  states (an acknowledged write undone, a refused one applied) or differs
  between nodes (an indeterminate write resolved two ways).
- ``overcommitted``: a provider whose allocations exceed
  ``(total - reserved) * allocation_ratio`` on some node, at the end or in a
  periodic snapshot during the run.
- usage through every server (``GET /resource_providers/{uuid}/usages``) and
  the allocations each server lists equal what the nodes hold.
- generations: a provider's or a consumer's generation on a node never went
  down from one snapshot to the next.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pymysql

from tests.faults.history import Allocation, History, Operation, request

Node = tuple[str, str, int]  # name, host, port


def connect(node: Node, timeout: float = 3.0) -> pymysql.connections.Connection:
    _, host, port = node
    return pymysql.connect(host=host, port=port, user="root", password="",
                           database="placement", connect_timeout=timeout,
                           read_timeout=timeout * 2, write_timeout=timeout * 2)


OVER_CAPACITY = """
SELECT rp.uuid, i.resource_class_id, i.total, i.reserved, i.allocation_ratio,
       COALESCE(SUM(a.used), 0)
FROM inventories i
JOIN resource_providers rp ON rp.id = i.resource_provider_id
LEFT JOIN allocations a ON a.resource_provider_id = i.resource_provider_id
                       AND a.resource_class_id = i.resource_class_id
GROUP BY rp.uuid, i.resource_class_id, i.total, i.reserved, i.allocation_ratio
"""


@dataclass
class Snapshot:
    """One node's state at one time."""

    node: str
    at: float
    allocations: dict[str, Allocation]  # consumer -> provider -> VCPU
    over: list[str]  # "uuid class N: used > capacity"
    over_providers: set[str]
    provider_generations: dict[str, int]
    consumer_generations: dict[str, int]


def snapshot(node: Node, began: float) -> Snapshot:
    conn = connect(node)
    try:
        with conn.cursor() as cursor:
            # One transaction: the four reads see the same state.
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute(OVER_CAPACITY)
            over = []
            over_providers = set()
            for rp, rc, total, reserved, ratio, used in cursor.fetchall():
                capacity = int((total - reserved) * ratio)
                if int(used) > capacity:
                    over.append(f"{rp} class {rc}: {int(used)} > {capacity}")
                    over_providers.add(rp)
            cursor.execute("SELECT a.consumer_id, rp.uuid, SUM(a.used) FROM allocations a "
                           "JOIN resource_providers rp ON rp.id = a.resource_provider_id "
                           "GROUP BY a.consumer_id, rp.uuid")
            allocations: dict[str, Allocation] = defaultdict(dict)
            for consumer, rp, used in cursor.fetchall():
                allocations[consumer][rp] = int(used)
            cursor.execute("SELECT uuid, generation FROM resource_providers")
            providers = {u: int(g) for u, g in cursor.fetchall()}
            cursor.execute("SELECT uuid, generation FROM consumers")
            consumers = {u: int(g) for u, g in cursor.fetchall()}
            cursor.execute("COMMIT")
    finally:
        conn.close()
    return Snapshot(node[0], time.monotonic() - began, dict(allocations), over,
                    over_providers, providers, consumers)


@dataclass
class Snapshotter:
    """Reads every node every ``period`` seconds while the campaign runs."""

    nodes: list[Node]
    began: float
    period: float = 4.0
    taken: list[Snapshot] = field(default_factory=list)
    unreadable: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(self.period):
            for node in self.nodes:
                self._take(node)

    def _take(self, node: Node) -> None:
        try:
            self.taken.append(snapshot(node, self.began))
        except (pymysql.MySQLError, OSError):
            self.unreadable += 1  # non-primary, paused, down: nothing to read

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="snapshots", daemon=True)
        thread.start()
        return thread


def admissible_states(history: History) -> tuple[dict[str, list[Allocation]],
                                                  dict[str, Operation]]:
    """Per consumer written, every state it may hold now; and for those whose last
    write had no definite answer, that answer's outcome (unavailable, indeterminate)."""
    states: dict[str, list[Allocation]] = {}
    uncertain: dict[str, Operation] = {}
    for operation in history.operations:
        if not operation.is_write or operation.consumer is None:
            continue
        assert operation.target is not None
        current = states.setdefault(operation.consumer, [{}])
        if operation.outcome == "ok":
            states[operation.consumer] = [operation.target]
        elif operation.outcome == "refused":
            pass
        elif operation.target not in current:
            # May have happened (a 503 too: the connection may have been lost at
            # COMMIT). A connection refused before sending is "unavailable" as well;
            # allowing its write costs the check nothing, as the final state tells.
            current.append(operation.target)
            uncertain[operation.consumer] = operation
    return states, uncertain


@dataclass
class Report:
    lost: list[str] = field(default_factory=list)
    overcommitted: list[str] = field(default_factory=list)
    overcommitted_providers: set[str] = field(default_factory=set)
    servers_disagree: list[str] = field(default_factory=list)
    generations_decreased: list[str] = field(default_factory=list)
    # outcome (unavailable, indeterminate) -> applied / not applied -> consumers
    resolved: dict[str, dict[str, int]] = field(default_factory=dict)
    applied_after_503: list[str] = field(default_factory=list)
    snapshots: int = 0

    def clean(self) -> bool:
        return not (self.lost or self.overcommitted or self.servers_disagree
                    or self.generations_decreased)


def check(history: History, nodes: list[Node], servers: dict[str, str],
          providers: list[str], snapshots: list[Snapshot]) -> Report:
    report = Report(snapshots=len(snapshots))
    final = [snapshot(node, history.began) for node in nodes]

    _check_consumers(report, history, final)
    _check_snapshots(report, [*snapshots, *final])
    _check_servers(report, final[0], servers, providers)
    return report


def _check_consumers(report: Report, history: History, final: list[Snapshot]) -> None:
    """Every node holds the same, and for each consumer one of its admissible states."""
    states, uncertain = admissible_states(history)
    written = set(states)
    for consumer, admissible in states.items():
        held = [s.allocations.get(consumer, {}) for s in final]
        if any(h != held[0] for h in held):
            report.lost.append(f"{consumer}: nodes disagree {held}")
        elif held[0] not in admissible:
            report.lost.append(f"{consumer}: holds {held[0]}, admissible {admissible}")
        elif consumer in uncertain:
            operation = uncertain[consumer]
            way = "applied" if held[0] == admissible[-1] else "not_applied"
            counts = report.resolved.setdefault(operation.outcome, {})
            counts[way] = counts.get(way, 0) + 1
            if way == "applied" and operation.outcome == "unavailable":
                report.applied_after_503.append(
                    f"{operation.kind} {consumer} via {operation.server} at "
                    f"{operation.invoked:.1f}s ({operation.during_fault}): "
                    f"{operation.status} {operation.error[:200]}")
    for s in final:
        strangers = set(s.allocations) - written
        if strangers:
            report.lost.append(f"{s.node}: allocations nobody wrote: {sorted(strangers)[:5]}")



def _check_snapshots(report: Report, snapshots: list[Snapshot]) -> None:
    """Over capacity at no time, and generations never down on a node."""
    for s in snapshots:
        report.overcommitted += [f"{s.node} at {s.at:.1f}s: {o}" for o in s.over]
        report.overcommitted_providers |= s.over_providers

    seen: dict[tuple[str, str], int] = {}
    for s in sorted(snapshots, key=lambda s: s.at):
        for kind, generations in (("provider", s.provider_generations),
                                  ("consumer", s.consumer_generations)):
            for uuid, generation in generations.items():
                key = (s.node, f"{kind} {uuid}")
                if generation < seen.get(key, generation):
                    report.generations_decreased.append(
                        f"{s.node} {kind} {uuid}: {seen[key]} -> {generation} at {s.at:.1f}s")
                seen[key] = max(generation, seen.get(key, generation))



def _check_servers(report: Report, final: Snapshot, servers: dict[str, str],
                   providers: list[str]) -> None:
    """Every server lists what the nodes hold, and its usages are their sums."""
    expected: dict[str, dict[str, int]] = defaultdict(dict)
    for consumer, allocation in final.allocations.items():
        for rp, used in allocation.items():
            expected[rp][consumer] = used
    for name, url in servers.items():
        for rp in providers:
            listed = _read(url, f"/resource_providers/{rp}/allocations")
            got = {c: a["resources"].get("VCPU", 0)
                   for c, a in listed.get("allocations", {}).items()}
            if got != expected.get(rp, {}):
                report.servers_disagree.append(f"{name} lists {rp}: {got} != "
                                               f"{expected.get(rp, {})}")
            usages = _read(url, f"/resource_providers/{rp}/usages")
            used = usages.get("usages", {}).get("VCPU", 0)
            if used != sum(expected.get(rp, {}).values()):
                report.servers_disagree.append(
                    f"{name} usage of {rp}: {used} != {sum(expected.get(rp, {}).values())}")


def _read(url: str, path: str) -> Any:
    for _ in range(30):
        answer = request(url, "GET", path)
        if answer.outcome == "ok":
            return answer.body
        time.sleep(1)
    raise RuntimeError(f"{url}{path} did not answer: {answer}")
