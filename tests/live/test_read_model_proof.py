"""The read model is never stale: a randomized proof with live servers and raw SQL.

On each backend, two ``allotment serve`` processes (2 workers each, read model
on, checked against the tables every few seconds) and a reference server
(``candidates_source = database``) share one database. Each round, writers
run concurrently: claims, deletions, inventory, trait and aggregate changes
and new providers through both servers' API, and raw SQL writers standing for
upstream Placement or an operator -- including transactions that roll back
(ids that never appear) and a transaction that takes its change-log ids
early and commits after later ones (the commit-order gap). When every writer
has committed, every candidates query asked of the model servers (several
times, so that every worker answers) must equal the reference server's
answer, byte for byte in JSON. At the end no server logged drift.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.db.engine import create_engine
from tests.clients import live
from tests.conftest import _backends, _create_server_database, _drop_server_database

ROUNDS = 10
HEADERS = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
           "Content-Type": "application/json"}

QUERIES = [
    ("1.39", "resources=VCPU:1,MEMORY_MB:256"),
    ("1.39", "resources=VCPU:2&limit=3"),
    ("1.39", "resources=VCPU:1&required=HW_CPU_X86_AVX2"),
    ("1.39", "resources=VCPU:1&required=!HW_CPU_X86_AVX2&member_of=in:{agg0},{agg1}"),
    ("1.39", "resources=VCPU:1,DISK_GB:10"),
    ("1.39", "resources=DISK_GB:5&member_of={agg0}"),
    ("1.39", "resources1=VCPU:1&resources2=MEMORY_MB:128&group_policy=isolate"),
    ("1.39", "resources1=VCPU:1&resources2=SRIOV_NET_VF:1&same_subtree=1,2"
             "&group_policy=none"),
    ("1.39", "resources_CPU=VCPU:1&resources_NIC=SRIOV_NET_VF:1&same_subtree=_CPU,_NIC"
             "&group_policy=none"),
    ("1.39", "resources=VCPU:1&root_required=COMPUTE_STATUS_DISABLED"),
    ("1.39", "resources=VCPU:1&root_required=!COMPUTE_STATUS_DISABLED&limit=5"),
    ("1.39", "resources=VCPU:1&in_tree={tree0}"),
    ("1.25", "resources=VCPU:1,SRIOV_NET_VF:1"),
    ("1.10", "resources=VCPU:1,MEMORY_MB:64"),
]

TRAITS = ["HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED", "CUSTOM_GOLD"]


class Cloud:
    def __init__(self, url: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(HEADERS)
        self.aggregates = [str(uuid.uuid4()) for _ in range(3)]

    def call(self, method: str, path: str, body=None) -> requests.Response:
        return self.session.request(method, self.url + path,
                                    data=None if body is None else json.dumps(body), timeout=30)

    def provider(self, name: str, parent: str | None = None) -> str:
        ident = str(uuid.uuid4())
        body = {"name": name, "uuid": ident}
        if parent:
            body["parent_provider_uuid"] = parent
        assert self.call("POST", "/resource_providers", body).status_code == 200
        return ident

    def inventories(self, rp: str, inventories: dict[str, int]) -> requests.Response:
        generation = self.call("GET", f"/resource_providers/{rp}").json()["generation"]
        return self.call("PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": generation,
            "inventories": {rc: {"total": total, "max_unit": total}
                            for rc, total in inventories.items()}})

    def traits(self, rp: str, traits: list[str]) -> requests.Response:
        generation = self.call("GET", f"/resource_providers/{rp}").json()["generation"]
        return self.call("PUT", f"/resource_providers/{rp}/traits",
                         {"resource_provider_generation": generation, "traits": traits})

    def aggregates_of(self, rp: str, aggs: list[str]) -> requests.Response:
        generation = self.call("GET", f"/resource_providers/{rp}").json()["generation"]
        return self.call("PUT", f"/resource_providers/{rp}/aggregates",
                         {"resource_provider_generation": generation, "aggregates": aggs})


def _seed(cloud: Cloud, rng: random.Random) -> dict[str, list[str]]:
    made: dict[str, list[str]] = {"roots": [], "nics": [], "sharing": []}
    assert cloud.call("PUT", "/traits/CUSTOM_GOLD").status_code == 201
    for i in range(12):
        root = cloud.provider(f"cn{i}")
        made["roots"].append(root)
        assert cloud.inventories(root, {"VCPU": rng.randint(2, 8), "MEMORY_MB": 1024,
                                        "DISK_GB": 40}).status_code == 200
        if i % 3 == 0:
            nic = cloud.provider(f"cn{i}-nic", parent=root)
            made["nics"].append(nic)
            assert cloud.inventories(nic, {"SRIOV_NET_VF": 4}).status_code == 200
        cloud.aggregates_of(root, [cloud.aggregates[i % 3]])
        if i % 4 == 1:
            cloud.traits(root, ["HW_CPU_X86_AVX2"])
    for j in range(2):
        disk = cloud.provider(f"shared-disk{j}")
        made["sharing"].append(disk)
        cloud.inventories(disk, {"DISK_GB": 100})
        cloud.traits(disk, ["MISC_SHARES_VIA_AGGREGATE"])
        cloud.aggregates_of(disk, [cloud.aggregates[j]])
    return made


def _api_writer(cloud: Cloud, made: dict[str, list[str]], consumers: list[str],
                rng: random.Random, until: float) -> None:
    while time.monotonic() < until:
        action = rng.random()
        if action < 0.45:
            # A claim of one candidate, as a scheduler makes it.
            found = cloud.call("GET", "/allocation_candidates?resources=VCPU:1,MEMORY_MB:64"
                                      "&limit=5").json()["allocation_requests"]
            if found:
                consumer = str(uuid.uuid4())
                body = {"allocations": rng.choice(found)["allocations"],
                        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
                        "consumer_generation": None}
                if cloud.call("PUT", f"/allocations/{consumer}", body).status_code == 204:
                    consumers.append(consumer)
        elif action < 0.6 and consumers:
            cloud.call("DELETE", f"/allocations/{consumers.pop(rng.randrange(len(consumers)))}")
        elif action < 0.7:
            rp = rng.choice(made["roots"])
            cloud.inventories(rp, {"VCPU": rng.randint(2, 8), "MEMORY_MB": 1024,
                                   "DISK_GB": rng.choice([10, 40])})
        elif action < 0.8:
            cloud.traits(rng.choice(made["roots"]), rng.sample(TRAITS, rng.randint(0, 2)))
        elif action < 0.9:
            cloud.aggregates_of(rng.choice(made["roots"] + made["sharing"]),
                                rng.sample(cloud.aggregates, rng.randint(0, 2)))
        else:
            root = cloud.provider(f"late-{uuid.uuid4().hex[:8]}")
            made["roots"].append(root)
            cloud.inventories(root, {"VCPU": 2, "MEMORY_MB": 512})


def _sql_writer(engine: sa.Engine, rng: random.Random, until: float) -> None:
    """Writes as upstream or an operator would: straight into the tables."""
    inv, rpt = t.inventories, t.resource_provider_traits
    while time.monotonic() < until:
        action = rng.random()
        try:
            with engine.begin() as conn:
                rows = conn.execute(sa.select(inv.c.id, inv.c.resource_provider_id,
                                              inv.c.total)).all()
                if not rows:
                    return
                row = rng.choice(rows)
                if action < 0.4:
                    conn.execute(inv.update().where(inv.c.id == row.id)
                                 .values(reserved=rng.randint(0, 1),
                                         allocation_ratio=rng.choice([1.0, 2.0])))
                elif action < 0.6:
                    trait_id = conn.execute(sa.select(t.traits.c.id).where(
                        t.traits.c.name == "CUSTOM_GOLD")).scalar_one()
                    conn.execute(rpt.delete().where(rpt.c.resource_provider_id
                                                    == row.resource_provider_id))
                    conn.execute(rpt.insert().values(resource_provider_id=row.resource_provider_id,
                                                     trait_id=trait_id))
                elif action < 0.8:
                    # Takes change-log ids now, commits after others have committed.
                    conn.execute(inv.update().where(inv.c.id == row.id)
                                 .values(total=row.total + rng.choice([-1, 1])
                                         if row.total > 1 else 2))
                    time.sleep(rng.uniform(0.3, 1.2))
                else:
                    conn.execute(inv.update().where(inv.c.id == row.id).values(total=1))
                    raise _RollBack
        except _RollBack:
            pass
        except (sa.exc.OperationalError, sa.exc.IntegrityError):
            # A deadlock or lock timeout with a concurrent writer, or an API writer that
            # gave the provider the same trait first: nothing committed.
            pass
        time.sleep(rng.uniform(0, 0.05))


class _RollBack(Exception):
    pass


def _recording(failures: list[BaseException], target, *args) -> threading.Thread:
    def run() -> None:
        try:
            target(*args)
        except BaseException as exc:  # reported by the test
            failures.append(exc)
    return threading.Thread(target=run)


def _answer(session: requests.Session, url: str, version: str, query: str) -> str:
    resp = session.get(f"{url}/allocation_candidates?{query}", timeout=30,
                       headers={"OpenStack-API-Version": f"placement {version}"})
    assert resp.status_code == 200, (url, query, resp.text)
    return json.dumps(resp.json(), sort_keys=True)


def _difference(expected: str, got: str) -> str:
    """What a model server answered differently, briefly (for the failure message)."""
    want, have = json.loads(expected), json.loads(got)
    found = []
    requests_of = [{json.dumps(r, sort_keys=True) for r in body["allocation_requests"]}
                   for body in (want, have)]
    found += [f"missing request {r}" for r in sorted(requests_of[0] - requests_of[1])[:3]]
    found += [f"extra request {r}" for r in sorted(requests_of[1] - requests_of[0])[:3]]
    summaries = [body["provider_summaries"] for body in (want, have)]
    for rp in sorted(summaries[0].keys() | summaries[1].keys()):
        if summaries[0].get(rp) != summaries[1].get(rp):
            found.append(f"summary {rp}: expected {summaries[0].get(rp)}, "
                         f"got {summaries[1].get(rp)}")
    return "; ".join(found[:8])


def _log_tail(server: live.LiveServer) -> str:
    lines = server.log_path.read_text(errors="replace").splitlines()
    return "\n".join(line for line in lines if "GET /allocation_candidates" not in line)[-3000:]


@pytest.fixture(params=_backends())
def shared_database(request, tmp_path):
    backend = request.param
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path}/proof.sqlite"
        return
    url = _create_server_database(backend)
    yield url
    _drop_server_database(backend, url)


def test_every_answer_after_a_commit_equals_the_tables(shared_database, tmp_path: Path):
    model_conf = "[allotment]\ncandidates_source = model\nread_model_check_interval = 3\n"
    first = live.start(tmp_path / "a", shared_database, workers=2, threads=2,
                       extra_conf=model_conf)
    servers = [first]
    try:
        servers.append(live.start(tmp_path / "b", shared_database, workers=2, threads=2,
                                  extra_conf=model_conf))
        reference = live.start(tmp_path / "ref", shared_database, workers=1, threads=2,
                               extra_conf="[allotment]\ncandidates_source = database\n")
        servers.append(reference)
        rng = random.Random(20261201)
        clouds = [Cloud(first.url), Cloud(servers[1].url)]
        clouds[1].aggregates = clouds[0].aggregates
        made = _seed(clouds[0], rng)
        queries = [(version, q.format(agg0=clouds[0].aggregates[0], agg1=clouds[0].aggregates[1],
                                      tree0=made["roots"][0])) for version, q in QUERIES]
        engine = create_engine(shared_database)
        consumers: list[str] = []
        session = requests.Session()
        session.headers.update({"X-Auth-Token": "admin"})
        compared = 0
        failures: list[BaseException] = []
        for round_number in range(ROUNDS):
            until = time.monotonic() + 1.5
            writers = [_recording(failures, _api_writer, cloud, made, consumers,
                                  random.Random(rng.random()), until) for cloud in clouds]
            writers.append(_recording(failures, _sql_writer, engine,
                                      random.Random(rng.random()), until))
            for writer in writers:
                writer.start()
            # Asked while writes are committing, too: never an error.
            while any(writer.is_alive() for writer in writers):
                version, q = rng.choice(queries)
                _answer(session, rng.choice(servers[:2]).url, version, q)
            for writer in writers:
                writer.join()
            assert not failures, failures
            for version, q in queries:
                expected = _answer(session, reference.url, version, q)
                for server in servers[:2]:
                    for _ in range(4):  # two workers each: every one answers
                        got = _answer(session, server.url, version, q)
                        assert got == expected, (round_number, server.url, version, q,
                                                 _difference(expected, got),
                                                 _log_tail(server))
                        compared += 1
        engine.dispose()
        assert compared == ROUNDS * len(queries) * 8
    finally:
        for server in servers:
            server.stop()
    for server in servers[:2]:
        log = server.log_path.read_text(errors="replace")
        assert "drifted" not in log, log[-3000:]
