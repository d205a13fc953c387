"""Helpers for mixed serving: upstream Placement 16.0.0 and allotment on ONE database.

A database of its own per scenario on the PostgreSQL / MariaDB test servers,
upstream under uwsgi (bench's helpers) and ``allotment serve`` on it, the
reads both give, and a claim storm through both servers with its tally.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from allotment.db import migrate
from allotment.db.engine import normalize_url
from tests.clients import sidebyside
from tests.clients.live import free_port
from tests.conftest import SERVER_URLS

VERSION = "1.39"
UPSTREAM_MANAGE = sidebyside.UPSTREAM_VENV / "bin" / "placement-manage"


# --- databases ------------------------------------------------------------------------


@contextmanager
def fresh_database(backend: str) -> Iterator[str]:
    """A new empty database on ``backend``'s test server; its URL (dropped afterwards)."""
    admin = normalize_url(SERVER_URLS[backend])
    name = f"allotment_mixed_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        if backend == "postgresql":
            yield f"postgresql://postgres@127.0.0.1:5432/{name}"
        else:
            yield f"mysql+pymysql://root@127.0.0.1:3306/{name}"
    finally:
        with engine.connect() as conn:
            force = " WITH (FORCE)" if backend == "postgresql" else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        engine.dispose()


def upstream_url(url: str) -> str:
    """Upstream's venv has psycopg2, which a bare postgresql:// does not name under 2.x."""
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url.removeprefix("postgresql://")
    return url


def db_sync_upstream(workdir: Path, url: str) -> None:
    """``placement-manage db sync`` from upstream's venv."""
    conf = sidebyside._bench_servers().write_config(workdir / "manage", upstream_url(url))
    subprocess.run([str(UPSTREAM_MANAGE), "--config-file", str(conf), "db", "sync"],
                   check=True, capture_output=True, text=True, timeout=180)


def set_guard(url: str, on: bool) -> None:
    """Install (allotment's head) or remove (back to 0001) the capacity guard."""
    engine = sa.create_engine(normalize_url(url))
    try:
        if on:
            migrate.upgrade(engine)
        else:
            with engine.begin() as conn:
                from alembic import command
                command.downgrade(migrate._config(conn), "0001")
    finally:
        engine.dispose()


def sql(url: str, statement: str) -> list[Any]:
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return list(conn.exec_driver_sql(statement))
    finally:
        engine.dispose()


# --- servers --------------------------------------------------------------------------


@contextmanager
def server(kind: str, workdir: Path, url: str, workers: int = 2,
           threads: int = 4) -> Iterator[sidebyside.Server]:
    """Upstream (uwsgi) or allotment serving ``url`` (schema sync on start)."""
    bench = sidebyside._bench_servers()
    binary = (sidebyside.UPSTREAM_VENV / "bin" / "uwsgi" if kind == "upstream"
              else sidebyside.ALLOTMENT_BIN)
    command = bench.ServerCommand(kind, str(binary), workers, threads)
    directory = workdir / f"{kind}-{uuid.uuid4().hex[:6]}"
    conf = bench.write_config(directory, upstream_url(url) if kind == "upstream" else url)
    running = bench.RunningServer(command, conf, free_port(), directory / "server.log")
    running.start(120.0)
    try:
        yield sidebyside.Server(kind, running.url)
    finally:
        running.stop()


def call(srv: sidebyside.Server, method: str, path: str, body: Any = None,
         version: str = VERSION) -> sidebyside.Answer:
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": f"placement {version}"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    return srv.send(method, path, headers, data)


def ok(answer: sidebyside.Answer, *statuses: int) -> Any:
    assert answer.status in (statuses or (200, 201, 204)), (answer.status, answer.body[:500])
    return answer.json()


# --- filling a database and reading it back -----------------------------------------


@dataclass
class Fill:
    providers: list[str]
    consumers: list[str]
    projects: list[str]


def fill(srv: sidebyside.Server) -> Fill:
    """Providers (a tree), inventories, traits, aggregates, classes, allocations."""
    ok(call(srv, "PUT", "/resource_classes/CUSTOM_MIXED_GOLD"), 201, 204)
    ok(call(srv, "PUT", "/traits/CUSTOM_MIXED_FAST"), 201, 204)
    root, child, other = (str(uuid.uuid4()) for _ in range(3))
    ok(call(srv, "POST", "/resource_providers", {"uuid": root, "name": f"cn-{root[:8]}"}))
    ok(call(srv, "POST", "/resource_providers",
            {"uuid": child, "name": f"numa-{child[:8]}", "parent_provider_uuid": root}))
    ok(call(srv, "POST", "/resource_providers", {"uuid": other, "name": f"ss-{other[:8]}"}))
    for rp, inventories in ((root, {"VCPU": {"total": 16, "allocation_ratio": 4.0},
                                    "MEMORY_MB": {"total": 8192, "reserved": 512}}),
                            (child, {"CUSTOM_MIXED_GOLD": {"total": 10, "max_unit": 5}}),
                            (other, {"DISK_GB": {"total": 500, "step_size": 10,
                                                 "min_unit": 10}})):
        gen = ok(call(srv, "GET", f"/resource_providers/{rp}"))["generation"]
        ok(call(srv, "PUT", f"/resource_providers/{rp}/inventories",
                {"resource_provider_generation": gen, "inventories": inventories}))
    gen = ok(call(srv, "GET", f"/resource_providers/{root}"))["generation"]
    ok(call(srv, "PUT", f"/resource_providers/{root}/traits",
            {"resource_provider_generation": gen,
             "traits": ["CUSTOM_MIXED_FAST", "HW_CPU_X86_AVX2"]}))
    aggregate = str(uuid.uuid4())
    for rp in (root, other):
        gen = ok(call(srv, "GET", f"/resource_providers/{rp}"))["generation"]
        ok(call(srv, "PUT", f"/resource_providers/{rp}/aggregates",
                {"resource_provider_generation": gen, "aggregates": [aggregate]}))
    projects = [str(uuid.uuid4()) for _ in range(2)]
    consumers = [str(uuid.uuid4()) for _ in range(3)]
    ok(call(srv, "PUT", f"/allocations/{consumers[0]}",
            {"allocations": {root: {"resources": {"VCPU": 4, "MEMORY_MB": 1024}},
                             child: {"resources": {"CUSTOM_MIXED_GOLD": 2}}},
             "project_id": projects[0], "user_id": "u1", "consumer_generation": None,
             "consumer_type": "INSTANCE"}))
    ok(call(srv, "POST", "/allocations",
            {consumers[1]: {"allocations": {other: {"resources": {"DISK_GB": 20}}},
                            "project_id": projects[1], "user_id": "u2",
                            "consumer_generation": None, "consumer_type": "MIGRATION"},
             consumers[2]: {"allocations": {root: {"resources": {"VCPU": 2}},
                                            other: {"resources": {"DISK_GB": 10}}},
                            "project_id": projects[0], "user_id": "u1",
                            "consumer_generation": None, "consumer_type": "INSTANCE"}}))
    return Fill([root, child, other], consumers, projects)


def read_paths(data: Fill) -> list[str]:
    """Every read endpoint, on what ``fill`` made."""
    paths = ["/", "/resource_providers", "/resource_classes", "/resource_classes/VCPU",
             "/resource_classes/CUSTOM_MIXED_GOLD", "/traits", "/traits/CUSTOM_MIXED_FAST",
             "/traits?name=startswith:CUSTOM_", "/resource_providers?in_tree=" + data.providers[0],
             "/resource_providers?resources=VCPU:1",
             "/resource_providers?required=CUSTOM_MIXED_FAST",
             "/allocation_candidates?resources=VCPU:2,MEMORY_MB:128",
             "/allocation_candidates?resources=VCPU:1&resources1=CUSTOM_MIXED_GOLD:1"
             "&group_policy=none",
             "/allocation_candidates?resources=VCPU:1,DISK_GB:10&member_of="
             "in:" + ",".join(["00000000-0000-0000-0000-000000000000"]),
             "/usages?project_id=" + data.projects[0],
             "/usages?project_id=" + data.projects[0] + "&user_id=u1",
             "/usages?project_id=" + data.projects[1] + "&consumer_type=all"]
    for rp in data.providers:
        base = f"/resource_providers/{rp}"
        paths += [base, base + "/inventories", base + "/usages", base + "/traits",
                  base + "/aggregates", base + "/allocations"]
    paths.append(f"/resource_providers/{data.providers[0]}/inventories/VCPU")
    paths += [f"/allocations/{c}" for c in data.consumers]
    return paths


def compare_reads(upstream: sidebyside.Server, allotment: sidebyside.Server,
                  data: Fill) -> list[str]:
    """The differences between both servers' answers to every read, as text."""
    everyone = [rp["uuid"] for rp in ok(call(upstream, "GET", "/resource_providers"))[
        "resource_providers"]]
    known = {u.replace("-", "")
             for u in data.providers + data.consumers + data.projects + everyone}
    problems = []
    for path in read_paths(data):
        for version in ("1.0", VERSION):
            if version == "1.0" and ("?" in path or "/usages?" in path):
                continue
            step = sidebyside.Step("GET", path, version)
            up, ours = upstream.run(step), allotment.run(step)
            if up.status >= 500:
                # Upstream's own bug (e.g. /usages at 1.38+ on PostgreSQL): not a
                # difference of the data, reported by the caller.
                UPSTREAM_READ_ERRORS.append(f"{step.describe()}: upstream {up.status}")
                continue
            diff = sidebyside.compare(0, step, sidebyside.normalise(up, known),
                                      sidebyside.normalise(ours, known))
            if diff is not None:
                problems.append(f"{step.describe()}: {diff.fields[:3]}")
    return problems


# --- the claim storm ------------------------------------------------------------------

CAPACITY_TEXT = "would exceed the capacity"
UPSTREAM_READ_ERRORS: list[str] = []


@dataclass
class Tally:
    accepted: dict[str, tuple[str, int]] = field(default_factory=dict)  # consumer -> rp, n
    accepted_by: dict[str, str] = field(default_factory=dict)  # consumer -> server name
    by_server: Counter[str] = field(default_factory=Counter)  # "<server> <outcome>" -> n
    undocumented: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outcome(self, srv: str, answer: sidebyside.Answer) -> str:
        if answer.status == 204:
            return "accepted"
        body = answer.body.decode("utf-8", "replace")
        if answer.status == 409 and "placement.concurrent_update" in body:
            return "409 concurrent_update"
        if answer.status == 409 and CAPACITY_TEXT in body:
            return "409 capacity"
        if answer.status >= 500 and srv == "upstream":
            return f"upstream {answer.status}"
        with self.lock:
            self.undocumented.append(f"{srv}: {answer.status} {body[:300]}")
        return f"other {answer.status}"


def make_providers(srv: sidebyside.Server, count: int, vcpus: int) -> list[str]:
    providers = []
    for _ in range(count):
        rp = str(uuid.uuid4())
        ok(call(srv, "POST", "/resource_providers", {"uuid": rp, "name": f"storm-{rp[:8]}"}))
        ok(call(srv, "PUT", f"/resource_providers/{rp}/inventories",
                {"resource_provider_generation": 0,
                 "inventories": {"VCPU": {"total": vcpus},
                                 "MEMORY_MB": {"total": 1_000_000}}}))
        providers.append(rp)
    return providers


def storm(servers: list[sidebyside.Server], providers: list[str], threads: int = 12,
          amount: int = 4, seconds: float = 25.0) -> Tally:
    """Claims from ``threads`` clients through ``servers`` until every provider is full.

    Each client alternates PUT /allocations/{consumer} (1.28, consumer_generation
    null) and POST /allocations, on a random provider; it stops once every
    provider has refused it for capacity (or after ``seconds``).
    """
    tally = Tally()
    deadline = time.monotonic() + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        full: set[str] = set()
        n = 0
        while len(full) < len(providers) and time.monotonic() < deadline:
            srv = servers[(index + n) % len(servers)]
            rp = rng.choice(providers)
            consumer = str(uuid.uuid4())
            one = {"allocations": {rp: {"resources": {"VCPU": amount, "MEMORY_MB": 64}}},
                   "project_id": "storm", "user_id": "storm", "consumer_generation": None}
            if n % 2:
                answer = call(srv, "POST", "/allocations", {consumer: one}, "1.28")
            else:
                answer = call(srv, "PUT", f"/allocations/{consumer}", one, "1.28")
            n += 1
            outcome = tally.outcome(srv.name, answer)
            with tally.lock:
                tally.by_server[f"{srv.name} {outcome}"] += 1
                if outcome == "accepted":
                    tally.accepted[consumer] = (rp, amount)
                    tally.accepted_by[consumer] = srv.name
            if outcome == "409 capacity":
                full.add(rp)

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(client, i) for i in range(threads)]:
            future.result()
    return tally


def usage_report(srv: sidebyside.Server, providers: list[str], tally: Tally,
                 vcpus: int) -> tuple[list[str], list[str]]:
    """(mismatches between usage and accepted claims, providers over capacity)."""
    mismatches, over = [], []
    for rp in providers:
        used = ok(call(srv, "GET", f"/resource_providers/{rp}/usages"))["usages"]["VCPU"]
        claimed = sum(n for p, n in tally.accepted.values() if p == rp)
        if used != claimed:
            mismatches.append(f"{rp}: usage {used}, accepted claims {claimed}")
        if used > vcpus:
            over.append(f"{rp}: VCPU {used} of {vcpus}")
    return mismatches, over


def history_report(allotment: sidebyside.Server, providers: list[str], tally: Tally,
                   vcpus: int) -> list[str]:
    """What allotment's history shows of a storm, against what was accepted.

    Each accepted claim must read, per class, as a chain from 0 to the amount
    (each entry starting where the one before ended), written by ``allotment``
    with its request id or by ``outside`` (upstream) without. Upstream may
    retry a claim inside its transaction (insert, delete, insert): PostgreSQL
    merges that into one entry, MySQL shows each statement. Each provider's
    inventories were created by ``outside`` (upstream made them).
    """
    problems = []
    for consumer, (rp, amount) in sorted(tally.accepted.items()):
        entries = ok(call(allotment, "GET",
                          f"/history/allocations?consumer_uuid={consumer}"))["entries"]
        writer = "allotment" if tally.accepted_by[consumer] == "allotment" else "outside"
        for resource_class, wanted in (("VCPU", amount), ("MEMORY_MB", 64)):
            chain = [(e["used_before"], e["used_after"]) for e in reversed(entries)
                     if e["resource_class"] == resource_class]
            whole = bool(chain) and chain[0][0] == 0 and chain[-1][1] == wanted and all(
                later[0] == earlier[1] for earlier, later in itertools.pairwise(chain))
            right_writer = all(
                e["writer"] == writer and (e["request_id"] is None) == (writer == "outside")
                and e["resource_provider_uuid"] == rp for e in entries)
            if not (whole and right_writer):
                problems.append(f"{consumer} by {writer}, {resource_class} {wanted} on {rp}: "
                                f"history {entries}")
    for rp in providers:
        entries = ok(call(allotment, "GET",
                          f"/history/inventories?resource_provider_uuid={rp}"))["entries"]
        seen_inventory = sorted((e["resource_class"], e["total_before"], e["total_after"],
                                 e["writer"]) for e in entries)
        wanted_inventory = [("MEMORY_MB", None, 1_000_000, "outside"),
                            ("VCPU", None, vcpus, "outside")]
        if seen_inventory != wanted_inventory:
            problems.append(f"provider {rp}: inventory history {seen_inventory}")
    return problems
