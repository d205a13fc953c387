"""The audit (GET /audit/allocations, ``allotment audit``): each finding made for real.

Every kind is produced as it happens in a cloud: through the API where the API
allows it (an inventory shrunk below its usage, a claim below microversion
1.8), and by SQL from another writer where only one could (a consumer left
without allocations, an inventory deleted under its allocations, a migration
grown old). Each finding must come with its evidence and with the history
entries that explain it, recorded with the writer that made the change.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from allotment import cli, openapi
from allotment.db import tables as t
from allotment.db.engine import normalize_url
from allotment.http.microversion import Version
from allotment.ledger.common import utcnow
from allotment.wsgi import ROUTES, make_app
from tests.conftest import make_conf
from tests.support.claims_support import generation, provider_with, put
from tests.support.client import PlacementClient
from tests.test_openapi import check_answer

LATEST = "1.39"
PATH = "/audit/allocations"
KINDS = ["over_capacity", "empty_consumer", "old_migration", "allocation_without_inventory",
         "incomplete_consumer"]
PLACEHOLDER = "00000000-0000-0000-0000-000000000000"
DAY = datetime.timedelta(days=1)


@contextlib.contextmanager
def outside(database) -> Iterator[sa.Connection]:
    """A transaction of another writer (an operator's SQL): a connection of its own,
    never one of allotment's pool, which carries allotment's context on MySQL."""
    engine = sa.create_engine(normalize_url(database.url), poolclass=NullPool)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def age(database, consumer: str, created: datetime.timedelta,
        updated: datetime.timedelta | None = None) -> None:
    """Make a consumer look created ``created`` ago (and last updated ``updated`` ago)."""
    now = utcnow()
    with outside(database) as conn:
        conn.execute(t.consumers.update().where(t.consumers.c.uuid == consumer).values(
            created_at=now - created,
            updated_at=None if updated is None else now - updated))


def claim(client: PlacementClient, consumer: str, allocations: dict,
          consumer_type: str = "INSTANCE", **kw):
    """PUT /allocations/{consumer} at the latest microversion."""
    return put(client, consumer, allocations, version=LATEST, consumer_type=consumer_type,
               **kw)


def audit(client: PlacementClient, query: str = "", status: int = 200) -> dict:
    resp = client.get(PATH + (f"?{query}" if query else ""), version=LATEST)
    assert resp.status == status, resp
    return resp.json()


def found(body: dict, kind: str) -> list[dict]:
    return [f for f in body["findings"] if f["kind"] == kind]


def fingerprint(database) -> dict:
    """Every row of every table, allotment's own included."""
    with database.engine.connect() as conn:
        return {table.name: sorted((tuple(r) for r in conn.execute(sa.select(table))),
                                   key=repr)
                for table in [*t.metadata.sorted_tables, t.allocation_history,
                              t.inventory_history]}


# -- a healthy cloud --------------------------------------------------------------

def healthy_cloud(client: PlacementClient) -> dict[str, str]:
    """Trees, a sharing provider, claims of every shape the audit must not report."""
    cn1 = provider_with(client, "cn1", VCPU={"total": 8, "allocation_ratio": 2.0},
                        MEMORY_MB=4096)
    numa = provider_with(client, "cn1-numa0", parent=cn1, PCPU=4)
    cn2 = provider_with(client, "cn2", VCPU=8)
    shared = provider_with(client, "shared-disk", DISK_GB=1000)
    resp = client.put(f"/resource_providers/{shared}/traits", {
        "resource_provider_generation": generation(client, shared),
        "traits": ["MISC_SHARES_VIA_AGGREGATE"]}, version=LATEST)
    assert resp.status == 200, resp
    vm, disk_vm, mig = (str(uuid.uuid4()) for _ in range(3))
    # Full to the last unit, on two providers of one tree.
    assert claim(client, vm, {cn1: {"VCPU": 16, "MEMORY_MB": 4096},
                              numa: {"PCPU": 4}}).status == 204
    # A compute node and a sharing provider: two roots by design.
    assert claim(client, disk_vm, {cn2: {"VCPU": 1}, shared: {"DISK_GB": 10}}).status == 204
    # A migration in progress (young).
    assert claim(client, mig, {cn2: {"VCPU": 2}}, consumer_type="MIGRATION").status == 204
    return {"cn1": cn1, "numa": numa, "cn2": cn2, "shared": shared, "vm": vm,
            "disk_vm": disk_vm, "mig": mig}


def test_a_healthy_cloud_has_no_findings(client, database):
    ids = healthy_cloud(client)
    # Old, but on a compute node and a sharing provider only: no migration.
    age(database, ids["disk_vm"], 30 * DAY)
    body = audit(client)
    assert body["counts"] == dict.fromkeys(KINDS, 0)
    assert body["findings"] == []
    assert body["settings"] == {"migration_age": 86400,
                                "incomplete_consumer_project_id": PLACEHOLDER,
                                "incomplete_consumer_user_id": PLACEHOLDER}
    generated = datetime.datetime.strptime(body["generated_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert abs(generated - utcnow()) < datetime.timedelta(minutes=1)


def test_an_empty_database_has_no_findings(client):
    assert audit(client)["counts"] == dict.fromkeys(KINDS, 0)


# -- each kind, made for real ----------------------------------------------------

def test_over_capacity(client):
    cn = provider_with(client, "cn", VCPU={"total": 8, "allocation_ratio": 2.0},
                       MEMORY_MB=1024)
    vm = str(uuid.uuid4())
    assert claim(client, vm, {cn: {"VCPU": 12, "MEMORY_MB": 512}}).status == 204
    # Upstream lets an inventory shrink below its usage (a warning in its log); so do we.
    resp = client.put(f"/resource_providers/{cn}/inventories/VCPU", {
        "resource_provider_generation": generation(client, cn), "total": 8, "reserved": 1,
        "allocation_ratio": 1.0}, version=LATEST)
    assert resp.status == 200, resp
    body = audit(client)
    assert body["counts"]["over_capacity"] == 1
    [finding] = body["findings"]
    assert finding["kind"] == "over_capacity"
    assert (finding["resource_provider_uuid"], finding["resource_class"],
            finding["consumer_uuid"]) == (cn, "VCPU", None)
    assert finding["evidence"] == {"resource_provider_name": "cn", "used": 12, "total": 8,
                                   "reserved": 1, "allocation_ratio": 1.0, "capacity": 7}
    assert "12 used, capacity 7" in finding["summary"]
    # The history: the change that lowered the ratio, and the claim, both allotment's.
    lowered = finding["history"]["inventories"][0]
    assert lowered["allocation_ratio_before"] == 2.0
    assert lowered["allocation_ratio_after"] == 1.0
    assert (lowered["reserved_before"], lowered["reserved_after"]) == (0, 1)
    assert lowered["writer"] == "allotment" and lowered["resource_class"] == "VCPU"
    assert lowered["request_id"].startswith("req-")
    assert lowered["at"].endswith("Z")
    created = finding["history"]["inventories"][-1]
    assert created["total_before"] is None and created["total_after"] == 8
    [claimed] = finding["history"]["allocations"]
    assert (claimed["consumer_uuid"], claimed["resource_class"], claimed["used_before"],
            claimed["used_after"], claimed["writer"]) == (vm, "VCPU", 0, 12, "allotment")
    assert claimed["consumer_type"] == "INSTANCE"


def test_empty_consumer(client, database):
    cn = provider_with(client, "cn", VCPU=8)
    vm, kept = str(uuid.uuid4()), str(uuid.uuid4())
    assert claim(client, vm, {cn: {"VCPU": 2}}, project="p1", user="u1").status == 204
    assert claim(client, kept, {cn: {"VCPU": 1}}).status == 204
    # What upstream leaves after an empty claim, here by another writer's SQL.
    with outside(database) as conn:
        conn.execute(t.allocations.delete().where(t.allocations.c.consumer_id == vm))
    body = audit(client)
    assert body["counts"] == {**dict.fromkeys(KINDS, 0), "empty_consumer": 1}
    [finding] = body["findings"]
    assert (finding["kind"], finding["consumer_uuid"]) == ("empty_consumer", vm)
    evidence = finding["evidence"]
    assert {k: evidence[k] for k in ("consumer_uuid", "project_id", "user_id",
                                     "consumer_type", "generation", "updated_at")} == {
        "consumer_uuid": vm, "project_id": "p1", "user_id": "u1", "consumer_type": "INSTANCE",
        "generation": 1, "updated_at": None}
    assert evidence["created_at"].endswith("Z")
    # Newest first: the deletion by the other writer, then the claim.
    deleted, claimed = finding["history"]["allocations"]
    assert (deleted["used_before"], deleted["used_after"], deleted["writer"]) == (2, 0,
                                                                                  "outside")
    assert deleted["request_id"] is None
    assert (claimed["used_before"], claimed["used_after"], claimed["writer"]) == (0, 2,
                                                                                  "allotment")
    assert finding["history"]["inventories"] == []
    # The API shows the consumer as holding nothing; deleting its allocations is a 404.
    assert client.get(f"/allocations/{vm}", version=LATEST).json()["allocations"] == {}
    assert client.delete(f"/allocations/{vm}", version=LATEST).status == 404
    # What removes it (doc/source/operating/history.md):
    # empty allocations at the evidence's generation.
    resp = client.put(f"/allocations/{vm}", {
        "allocations": {}, "consumer_generation": evidence["generation"],
        "project_id": "p1", "user_id": "u1", "consumer_type": "INSTANCE"}, version=LATEST)
    assert resp.status == 204, resp
    assert audit(client)["counts"]["empty_consumer"] == 0


def test_old_migration(client, database):
    cn1 = provider_with(client, "cn1", VCPU=16)
    cn2 = provider_with(client, "cn2", VCPU=16)
    mig, young_mig, moving, touched = (str(uuid.uuid4()) for _ in range(4))
    assert claim(client, mig, {cn1: {"VCPU": 2}}, consumer_type="MIGRATION").status == 204
    assert claim(client, young_mig, {cn1: {"VCPU": 2}},
                 consumer_type="MIGRATION").status == 204
    # One consumer on two roots: an old-style move that was never cleaned up.
    assert claim(client, moving, {cn1: {"VCPU": 1}, cn2: {"VCPU": 1}}).status == 204
    assert claim(client, touched, {cn1: {"VCPU": 1}, cn2: {"VCPU": 1}}).status == 204
    assert found(audit(client), "old_migration") == []
    age(database, mig, 2 * DAY)
    age(database, young_mig, datetime.timedelta(hours=23))
    age(database, moving, 3 * DAY)
    # Created long ago, written minutes ago: still being worked on.
    age(database, touched, 3 * DAY, updated=datetime.timedelta(minutes=10))
    body = audit(client)
    assert body["counts"]["old_migration"] == 2
    by_consumer = {f["consumer_uuid"]: f for f in found(body, "old_migration")}
    assert set(by_consumer) == {mig, moving}
    evidence = by_consumer[mig]["evidence"]
    assert evidence["reasons"] == ["consumer type MIGRATION"]
    assert evidence["roots"] == [cn1] and evidence["sharing_providers"] == []
    assert 2 * 86400 <= evidence["age_seconds"] < 2 * 86400 + 60
    assert evidence["consumer_type"] == "MIGRATION"
    assert "unchanged for 2 d 0 h, longer than 1 d 0 h" in by_consumer[mig]["summary"]
    evidence = by_consumer[moving]["evidence"]
    assert evidence["reasons"] == ["allocations on 2 roots"]
    assert evidence["roots"] == sorted([cn1, cn2])
    history = by_consumer[moving]["history"]["allocations"]
    assert {(h["resource_provider_uuid"], h["used_after"], h["writer"]) for h in history} == {
        (cn1, 1, "allotment"), (cn2, 1, "allotment")}
    # A shorter age set by the operator takes the young one in too.
    conf = make_conf(database.url, allotment__audit_migration_age=3600)
    short = PlacementClient(make_app(conf, db=database.db, prepare=False))
    body = audit(short, "kind=old_migration")
    assert body["settings"]["migration_age"] == 3600
    assert {f["consumer_uuid"] for f in body["findings"]} == {mig, young_mig, moving}


def test_allocation_without_inventory(client, database):
    cn = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    vm1, vm2 = str(uuid.uuid4()), str(uuid.uuid4())
    assert claim(client, vm1, {cn: {"VCPU": 1, "DISK_GB": 10}}).status == 204
    assert claim(client, vm2, {cn: {"DISK_GB": 20}}).status == 204
    # The API refuses to delete an inventory in use...
    assert client.delete(f"/resource_providers/{cn}/inventories/DISK_GB",
                         version=LATEST).status == 409
    # ...another writer does not ask.
    with outside(database) as conn:
        disk = conn.execute(sa.select(t.resource_classes.c.id)
                            .where(t.resource_classes.c.name == "DISK_GB")).scalar_one()
        conn.execute(t.inventories.delete().where(t.inventories.c.resource_class_id == disk))
    body = audit(client)
    assert body["counts"] == {**dict.fromkeys(KINDS, 0), "allocation_without_inventory": 1}
    [finding] = body["findings"]
    assert (finding["resource_provider_uuid"], finding["resource_class"]) == (cn, "DISK_GB")
    assert finding["evidence"] == {
        "resource_provider_uuid": cn, "resource_provider_name": "cn",
        "resource_class": "DISK_GB", "used": 30, "consumer_count": 2,
        "consumers": sorted([{"consumer_uuid": vm1, "used": 10},
                             {"consumer_uuid": vm2, "used": 20}],
                            key=lambda c: c["consumer_uuid"])}
    assert "2 consumer(s) hold 30 DISK_GB on provider cn" in finding["summary"]
    deleted = finding["history"]["inventories"][0]
    assert (deleted["total_before"], deleted["total_after"], deleted["writer"]) == (
        100, None, "outside")
    assert {h["resource_class"] for h in finding["history"]["allocations"]} == {"DISK_GB"}


def test_incomplete_consumer(client, database):
    cn = provider_with(client, "cn", VCPU=8)
    old, complete = str(uuid.uuid4()), str(uuid.uuid4())
    # Before 1.8 a claim names no project or user: the placeholders stand in.
    resp = client.put(f"/allocations/{old}", {"allocations": [
        {"resource_provider": {"uuid": cn}, "resources": {"VCPU": 1}}]}, version="1.7")
    assert resp.status == 204, resp
    assert claim(client, complete, {cn: {"VCPU": 1}}).status == 204
    body = audit(client)
    assert body["counts"] == {**dict.fromkeys(KINDS, 0), "incomplete_consumer": 1}
    [finding] = body["findings"]
    assert finding["consumer_uuid"] == old
    assert finding["evidence"]["placeholder"] == ["project", "user"]
    assert finding["evidence"]["project_id"] == PLACEHOLDER
    assert "placeholder project and user id" in finding["summary"]
    [claimed] = finding["history"]["allocations"]
    assert (claimed["project_id"], claimed["user_id"], claimed["writer"]) == (
        PLACEHOLDER, PLACEHOLDER, "allotment")
    # The operator's own placeholders are the ones looked for.
    conf = make_conf(database.url, placement__incomplete_consumer_user_id="nobody")
    other = PlacementClient(make_app(conf, db=database.db, prepare=False))
    assert audit(other, "kind=incomplete_consumer")["findings"][0]["evidence"][
        "placeholder"] == ["project"]



# -- bounds, filters, refusals ----------------------------------------------------

def empty_consumers(client: PlacementClient, database, count: int) -> list[str]:
    cn = provider_with(client, "cn", VCPU=100)
    made = [str(uuid.uuid4()) for _ in range(count)]
    for consumer in made:
        assert claim(client, consumer, {cn: {"VCPU": 1}}).status == 204
    with outside(database) as conn:
        conn.execute(t.allocations.delete())
    return made


def test_limit_bounds_findings_not_counts(client, database):
    made = empty_consumers(client, database, 3)
    body = audit(client, "limit=2")
    assert body["counts"]["empty_consumer"] == 3
    # In the order the consumers were made (their ids).
    assert [f["consumer_uuid"] for f in body["findings"]] == made[:2]


def test_kind_filters_findings_counts_stay_complete(client, database):
    empty_consumers(client, database, 1)
    old = str(uuid.uuid4())
    cn = client.get("/resource_providers", version=LATEST).json()["resource_providers"][0]
    assert client.put(f"/allocations/{old}", {"allocations": [
        {"resource_provider": {"uuid": cn["uuid"]}, "resources": {"VCPU": 1}}]},
        version="1.7").status == 204
    everything = audit(client)
    assert [f["kind"] for f in everything["findings"]] == ["empty_consumer",
                                                           "incomplete_consumer"]
    for query in ("kind=incomplete_consumer", "kind=incomplete_consumer,over_capacity",
                  "kind=over_capacity&kind=incomplete_consumer"):
        body = audit(client, query)
        assert [f["kind"] for f in body["findings"]] == ["incomplete_consumer"], query
        assert body["counts"] == everything["counts"]


@pytest.mark.parametrize("query", [
    "limit=0", "limit=1001", "limit=abc", "limit=-1", "limit=", "limit=1&limit=2",
    "kind=nope", "kind=over_capacity,nope", "kind=", "kind=over_capacity&kind=nope",
    "other=1"])
def test_bad_query_strings_are_400(client, query):
    resp = client.get(f"{PATH}?{query}", version=LATEST)
    assert resp.status == 400, resp
    error = resp.json()["errors"][0]
    assert error["title"] == "Bad Request"
    assert error["code"].startswith("placement.")
    # Before 1.23 the body has no code, as every refusal.
    old = client.get(f"{PATH}?{query}", version="1.22")
    assert old.status == 400 and "code" not in old.json()["errors"][0]


def test_admin_only(client):
    reader = client.get(PATH, version=LATEST, token="someone:p1",
                        headers={"X-Roles": "reader"})
    assert reader.status == 403, reader
    assert "allotment:audit:allocations" in reader.detail
    member = client.get(PATH, version=LATEST, token="someone:p1",
                        headers={"X-Roles": "member,reader"})
    assert member.status == 403
    assert client.get(PATH, token=None).status == 401


# -- every kind at once: described by the document, nothing changed ---------------

def every_kind(client: PlacementClient, database) -> None:
    cn1 = provider_with(client, "cn1", VCPU={"total": 8, "allocation_ratio": 2.0},
                        DISK_GB=100)
    cn2 = provider_with(client, "cn2", VCPU=8)
    vm, empty, mig, old = (str(uuid.uuid4()) for _ in range(4))
    assert claim(client, vm, {cn1: {"VCPU": 12, "DISK_GB": 5}}).status == 204
    assert claim(client, empty, {cn2: {"VCPU": 1}}).status == 204
    assert claim(client, mig, {cn1: {"VCPU": 1}, cn2: {"VCPU": 1}},
                 consumer_type="MIGRATION").status == 204
    assert client.put(f"/allocations/{old}", {"allocations": [
        {"resource_provider": {"uuid": cn2}, "resources": {"VCPU": 1}}]},
        version="1.7").status == 204
    assert client.put(f"/resource_providers/{cn1}/inventories/VCPU", {
        "resource_provider_generation": generation(client, cn1), "total": 8,
        "allocation_ratio": 1.0}, version=LATEST).status == 200
    age(database, mig, 2 * DAY)
    with outside(database) as conn:
        conn.execute(t.allocations.delete().where(t.allocations.c.consumer_id == empty))
        disk = conn.execute(sa.select(t.resource_classes.c.id)
                            .where(t.resource_classes.c.name == "DISK_GB")).scalar_one()
        conn.execute(t.inventories.delete().where(t.inventories.c.resource_class_id == disk))


def test_every_kind_is_described_and_nothing_changes(client, database):
    every_kind(client, database)
    before = fingerprint(database)
    document = openapi.document(ROUTES)
    for minor in (0, 23, 39):
        version = Version(1, minor)
        resp = client.get(PATH, version=str(version))
        assert resp.status == 200, resp
        assert resp.headers["cache-control"] == "no-store"
        check_answer(openapi.document_at(document, version), PATH, "GET", resp, version)
    body = resp.json()
    assert body["counts"] == dict.fromkeys(KINDS, 1)
    assert [f["kind"] for f in body["findings"]] == KINDS
    resp = client.get(f"{PATH}?kind=nope", version=LATEST)
    check_answer(document, PATH, "GET", resp, Version(1, 39))
    assert fingerprint(database) == before, "the audit wrote"


# -- the command line -------------------------------------------------------------

def test_command_line(client, database, capsys):
    url = database.url
    assert cli.main(["audit", "--database-url", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("No findings.")
    assert "over_capacity 0, empty_consumer 0" in out
    every_kind(client, database)
    before = fingerprint(database)
    assert cli.main(["audit", "--database-url", url]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["KIND", "SUBJECT", "SUMMARY"]
    assert [line.split()[0] for line in lines[1:6]] == KINDS
    assert lines[2].split()[1:3] == ["consumer", lines[2].split()[2]]
    assert lines[1].split()[1] == "provider" and lines[1].split()[3] == "VCPU"
    assert lines[6] == ""
    assert lines[7].startswith("Counts at ") and "incomplete_consumer 1" in lines[7]
    assert cli.main(["audit", "--database-url", url, "--format", "json",
                     "--kind", "empty_consumer", "--limit", "5"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["counts"] == dict.fromkeys(KINDS, 1)
    assert [f["kind"] for f in body["findings"]] == ["empty_consumer"]
    assert body["findings"][0]["history"]["allocations"][0]["writer"] == "outside"
    # The same body as the API's (but for the time it was made).
    api = audit(client, "kind=empty_consumer&limit=5")
    assert {**body, "generated_at": None} == {**api, "generated_at": None}
    # Findings of other kinds only: nothing found of the kind asked for.
    with outside(database) as conn:
        conn.execute(t.consumers.delete().where(t.consumers.c.id.in_(
            sa.select(t.consumers.c.id).where(~sa.exists().where(
                t.allocations.c.consumer_id == t.consumers.c.uuid)).scalar_subquery())))
    assert cli.main(["audit", "--database-url", url, "--kind", "empty_consumer"]) == 0
    assert "empty_consumer 0" in capsys.readouterr().out
    assert fingerprint(database) != before  # (the deletion above, not the audit)


def test_command_line_errors(tmp_path, capsys, database):
    # Arguments.
    assert cli.main(["audit", "--database-url", database.url, "--kind", "nope"]) == 2
    assert "unknown finding kind nope" in capsys.readouterr().err
    assert cli.main(["audit", "--database-url", database.url, "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err
    # A database without allotment's schema.
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert cli.main(["audit", "--database-url", f"sqlite:///{empty}"]) == 2
    assert 'run "allotment db upgrade"' in capsys.readouterr().err


# --- what an audit may cost (issue 32, item 5) -------------------------------------------

def test_an_audit_takes_a_large_search_slot_or_is_refused_at_once(client, monkeypatch):
    """Ten admins auditing a large cloud starved everyone: an audit holds one of the
    worker's large-search slots, and one more is refused at once (503, Retry-After)."""
    from allotment.candidates.budget import Slots

    healthy_cloud(client)
    taken = []
    real_take = Slots.take

    def take(self: Slots) -> bool:
        taken.append(1)
        return real_take(self)

    monkeypatch.setattr(Slots, "take", take)
    audit(client)
    assert taken == [1]
    monkeypatch.setattr(Slots, "take", lambda self: False)
    busy = client.get(PATH, version=LATEST)
    assert busy.status == 503, busy
    assert busy.headers["retry-after"] == "1"
    assert busy.error_code == "placement.undefined_code"
    assert "large searches and audits" in busy.detail
    assert "candidates_large_slots" in busy.detail


def test_an_audit_out_of_time_stops_and_says_so(client, monkeypatch):
    from allotment.candidates.budget import Budget
    from allotment.ledger.errors import CandidatesTooSlow

    healthy_cloud(client)
    checks = []

    def out_of_time(self: Budget) -> None:
        checks.append(1)
        if len(checks) > 2:  # a few statements in
            raise CandidatesTooSlow(self.limits.time_limit)

    monkeypatch.setattr(Budget, "check", out_of_time)
    resp = client.get(PATH, version=LATEST)
    assert resp.status == 400, resp
    assert resp.error_code == "placement.query.bad_value"
    assert "This audit could not be finished within 20 seconds" in resp.detail
    assert len(checks) == 3
