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


@dataclass
class Consumers:
    """What the history of writes says of every consumer written."""

    # Every state each consumer may hold now.
    states: dict[str, list[Allocation]] = field(default_factory=dict)
    # Uncertain writes (no definite answer) not settled by a later read: the
    # final state tells how the nodes resolved them.
    uncertain: dict[str, Operation] = field(default_factory=dict)
    # Uncertain writes settled by a read: consumer -> (the write, applied?).
    settled: dict[str, tuple[Operation, bool]] = field(default_factory=dict)
    # Reads that answered a state the history does not allow.
    misread: list[str] = field(default_factory=list)
    # Each consumer's acknowledged states, in order (from {}).
    acknowledged: dict[str, list[Allocation]] = field(default_factory=dict)


def admissible_states(history: History) -> Consumers:
    """Per consumer written, every state it may hold now, its uncertain writes and
    how the reads that settled them found them."""
    found = Consumers()
    for operation in history.operations:
        consumer = operation.consumer
        if consumer is None:
            continue
        if operation.kind == "settle_read":
            if operation.outcome == "ok" and operation.held is not None:
                _settle(found, consumer, operation)
            continue
        if not operation.is_write:
            continue
        assert operation.target is not None
        current = found.states.setdefault(consumer, [{}])
        if operation.outcome == "ok":
            found.states[consumer] = [operation.target]
            found.acknowledged.setdefault(consumer, [{}]).append(operation.target)
        elif operation.outcome == "refused":
            pass
        elif operation.target not in current:
            # May have happened (a 503 too: the connection may have been lost at
            # COMMIT). A connection refused before sending is "unavailable" as well;
            # allowing its write costs the check nothing, as the final state tells.
            current.append(operation.target)
            found.uncertain[consumer] = operation
    return found


def _settle(found: Consumers, consumer: str, read: Operation) -> None:
    held = read.held
    assert held is not None
    admissible = found.states.get(consumer, [{}])
    if held not in admissible:
        found.misread.append(f"{consumer}: {read.server} read {held} at {read.invoked:.1f}s, "
                             f"admissible {admissible}")
        return
    write = found.uncertain.pop(consumer, None)
    if write is not None:
        found.settled[consumer] = (write, held == write.target and held != admissible[0])
        # The read decided it: the consumer holds that (the scheduler writes it
        # only after this read, so nothing else may change it meanwhile).
        found.states[consumer] = [held]
        if held != found.acknowledged.get(consumer, [{}])[-1]:
            found.acknowledged.setdefault(consumer, [{}]).append(held)


@dataclass
class Report:
    lost: list[str] = field(default_factory=list)
    overcommitted: list[str] = field(default_factory=list)
    overcommitted_providers: set[str] = field(default_factory=set)
    servers_disagree: list[str] = field(default_factory=list)
    generations_decreased: list[str] = field(default_factory=list)
    # allotment's own allocation history against the nodes and the clients' history
    history_disagrees: list[str] = field(default_factory=list)
    recorded_history: str = "absent"  # checked, or absent (no history tables)
    # outcome (unavailable, indeterminate) -> applied / not applied -> consumers
    resolved: dict[str, dict[str, int]] = field(default_factory=dict)
    applied_after_503: list[str] = field(default_factory=list)
    snapshots: int = 0

    def clean(self) -> bool:
        return not (self.lost or self.overcommitted or self.servers_disagree
                    or self.generations_decreased or self.history_disagrees)


def check(history: History, nodes: list[Node], servers: dict[str, str],
          providers: list[str], snapshots: list[Snapshot]) -> Report:
    report = Report(snapshots=len(snapshots))
    final = [snapshot(node, history.began) for node in nodes]

    found = admissible_states(history)
    _check_consumers(report, found, final)
    _check_snapshots(report, [*snapshots, *final])
    _check_servers(report, final[0], servers, providers)
    _check_recorded_history(report, found, nodes, final)
    return report


def _check_consumers(report: Report, found: Consumers, final: list[Snapshot]) -> None:
    """Every node holds the same, and for each consumer one of its admissible states."""
    report.lost += found.misread
    for consumer, (write, applied) in found.settled.items():
        _resolved(report, consumer, write, applied)
    for consumer, admissible in found.states.items():
        held = [s.allocations.get(consumer, {}) for s in final]
        if any(h != held[0] for h in held):
            report.lost.append(f"{consumer}: nodes disagree {held}")
        elif held[0] not in admissible:
            report.lost.append(f"{consumer}: holds {held[0]}, admissible {admissible}")
        elif consumer in found.uncertain:
            _resolved(report, consumer, found.uncertain[consumer], held[0] == admissible[-1])
    for s in final:
        strangers = set(s.allocations) - set(found.states)
        if strangers:
            report.lost.append(f"{s.node}: allocations nobody wrote: {sorted(strangers)[:5]}")


def _resolved(report: Report, consumer: str, write: Operation, applied: bool) -> None:
    counts = report.resolved.setdefault(write.outcome, {})
    way = "applied" if applied else "not_applied"
    counts[way] = counts.get(way, 0) + 1
    if applied and write.outcome == "unavailable":
        report.applied_after_503.append(
            f"{write.kind} {consumer} via {write.server} at {write.invoked:.1f}s "
            f"({write.during_fault}): {write.status} {write.error[:200]}")


RECORDED = """
SELECT consumer_uuid, resource_provider_uuid, used_after, txn, created_at, id
FROM allotment_allocation_history ORDER BY consumer_uuid, created_at, id
"""


def _check_recorded_history(report: Report, found: Consumers, nodes: list[Node],
                            final: list[Snapshot]) -> None:
    """allotment's own allocation history (its table, read on every node) implies
    what each node holds, and holds every acknowledged state in order."""
    for node, held in zip(nodes, final, strict=True):
        conn = connect(node)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT COUNT(*) FROM information_schema.tables WHERE "
                               "table_schema = DATABASE() AND "
                               "table_name = 'allotment_allocation_history'")
                row = cursor.fetchone()
                if not row or not row[0]:
                    return  # upstream's schema: nothing recorded to compare
                cursor.execute(RECORDED)
                rows = cursor.fetchall()
        finally:
            conn.close()
        report.recorded_history = "checked"
        recorded = _recorded_states(rows)
        for consumer in sorted(set(recorded) | set(held.allocations)):
            states = recorded.get(consumer, [{}])
            if states[-1] != held.allocations.get(consumer, {}):
                report.history_disagrees.append(
                    f"{held.node} {consumer}: history ends at {states[-1]}, the node holds "
                    f"{held.allocations.get(consumer, {})}")
        for consumer, acknowledged in found.acknowledged.items():
            if not _in_order(_runs(acknowledged), _runs(recorded.get(consumer, [{}]))):
                report.history_disagrees.append(
                    f"{held.node} {consumer}: acknowledged {acknowledged}, history records "
                    f"{recorded.get(consumer, [{}])}")


def _recorded_states(rows: list[tuple[Any, ...]]) -> dict[str, list[Allocation]]:
    """Each consumer's states, one per recorded transaction, in the order they were made."""
    changes: dict[str, dict[Any, dict[str, int]]] = defaultdict(dict)
    for consumer, provider, used_after, txn, _at, entry in rows:
        # Entries of one transaction share its token; without one, each stands alone.
        key = txn if txn is not None else f"entry {entry}"
        changes[consumer].setdefault(key, {})[provider] = int(used_after)
    states: dict[str, list[Allocation]] = {}
    for consumer, transactions in changes.items():
        state: Allocation = {}
        sequence = [dict(state)]
        for change in transactions.values():  # dicts keep the order rows came in
            for provider, used in change.items():
                if used:
                    state[provider] = used
                else:
                    state.pop(provider, None)
            sequence.append(dict(state))
        states[consumer] = sequence
    return states


def _runs(states: list[Allocation]) -> list[Allocation]:
    """The states without repeats in a row (a claim that changed nothing)."""
    return [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]


def _in_order(wanted: list[Allocation], recorded: list[Allocation]) -> bool:
    """``wanted`` is a subsequence of ``recorded``."""
    position = iter(recorded)
    return all(any(state == seen for seen in position) for state in wanted)


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
