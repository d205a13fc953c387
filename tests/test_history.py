"""History over HTTP on each database: allotment's writes, writes behind its back, paging,
refusals and retention.

Writes "behind allotment's back" go through an engine of their own (another
session, as an operator's SQL client or upstream Placement would be): the
database's triggers must record them as ``outside``, with the right amounts.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from oslo_context import context as oslo_context

from allotment.db import tables as t
from allotment.db.engine import create_engine
from allotment.db.writer import RequestIds
from allotment.ledger import history, retry
from tests.support.claims_support import provider_with, put, state
from tests.support.client import PlacementClient

GLOBAL_ID = "req-0f0f0f0f-1111-2222-3333-444444444444"


@pytest.fixture
def outside(database: Any) -> Iterator[sa.Engine]:
    """Another session on the same database: writes there are not allotment's."""
    engine = create_engine(database.url)
    yield engine
    engine.dispose()


def _entries(client: PlacementClient, path: str, **query: str) -> list[dict[str, Any]]:
    resp = client.get(path + "?" + "&".join(f"{k}={v}" for k, v in query.items()))
    assert resp.status == 200, resp
    return resp.json()["entries"]


def _amounts(entries: list[dict[str, Any]]) -> list[tuple[str, int, int, str]]:
    return [(e["resource_class"], e["used_before"], e["used_after"], e["writer"])
            for e in entries]


def test_claims_are_recorded_once_per_key_with_request_ids(client, database):
    rp = provider_with(client, "cn1", VCPU=16, MEMORY_MB=4096)
    consumer = str(uuid.uuid4())
    created = put(client, consumer, {rp: {"VCPU": 2, "MEMORY_MB": 512}}, None,
                  version="1.38", consumer_type="INSTANCE", project="p1", user="u1")
    assert created.status == 204, created
    # The caller's global request id, as nova sends it.
    resp = client.put(f"/allocations/{consumer}", {
        "allocations": {rp: {"resources": {"VCPU": 4, "MEMORY_MB": 512}}},
        "project_id": "p1", "user_id": "u1", "consumer_generation": 1,
        "consumer_type": "INSTANCE"}, version="1.38",
        headers={"X-Openstack-Request-Id": GLOBAL_ID})
    assert resp.status == 204, resp

    entries = _entries(client, "/history/allocations", consumer_uuid=consumer)
    # Newest first; the replacement's delete and insert are one entry per class.
    assert sorted(_amounts(entries[:2])) == [("MEMORY_MB", 512, 512, "allotment"),
                                             ("VCPU", 2, 4, "allotment")]
    assert sorted(_amounts(entries[2:])) == [("MEMORY_MB", 0, 512, "allotment"),
                                             ("VCPU", 0, 2, "allotment")]
    replaced = entries[0]
    assert replaced["request_id"] == resp.headers["x-openstack-request-id"]
    assert replaced["global_request_id"] == GLOBAL_ID
    assert entries[3]["request_id"] == created.headers["x-openstack-request-id"]
    assert entries[3]["global_request_id"] is None
    assert {(e["consumer_type"], e["project_id"], e["user_id"], e["resource_provider_uuid"])
            for e in entries} == {("INSTANCE", "p1", "u1", rp)}

    # Released: what it held goes to zero, by the DELETE's request.
    deleted = client.delete(f"/allocations/{consumer}")
    assert deleted.status == 204
    released = _entries(client, "/history/allocations", consumer_uuid=consumer, limit="2")
    assert sorted(_amounts(released)) == [("MEMORY_MB", 512, 0, "allotment"),
                                          ("VCPU", 4, 0, "allotment")]
    assert released[0]["request_id"] == deleted.headers["x-openstack-request-id"]


def test_a_move_records_both_consumers(client):
    source = provider_with(client, "src", VCPU=8)
    dest = provider_with(client, "dst", VCPU=8)
    instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
    assert put(client, instance, {source: {"VCPU": 2}}, None).status == 204
    body = {
        migration: {"allocations": {source: {"resources": {"VCPU": 2}}},
                    "project_id": "proj", "user_id": "user", "consumer_generation": None,
                    "consumer_type": "MIGRATION"},
        instance: {"allocations": {dest: {"resources": {"VCPU": 2}}},
                   "project_id": "proj", "user_id": "user", "consumer_generation": 1,
                   "consumer_type": "INSTANCE"},
    }
    resp = client.post("/allocations", body, version="1.38")
    assert resp.status == 204, resp
    moved = _entries(client, "/history/allocations", consumer_uuid=instance, limit="2")
    assert sorted((e["resource_provider_uuid"], e["used_before"], e["used_after"])
                  for e in moved) == sorted([(source, 2, 0), (dest, 0, 2)])
    held = _entries(client, "/history/allocations", consumer_uuid=migration)
    assert [(e["resource_provider_uuid"], e["used_before"], e["used_after"],
             e["consumer_type"]) for e in held] == [(source, 0, 2, "MIGRATION")]
    # One request wrote all three.
    assert {e["request_id"] for e in moved + held} == {resp.headers["x-openstack-request-id"]}
    on_source = _entries(client, "/history/allocations", resource_provider_uuid=source)
    assert {e["consumer_uuid"] for e in on_source} == {instance, migration}


def test_a_refused_claim_records_nothing(client, database):
    rp = provider_with(client, "cn", VCPU=4)
    consumer = str(uuid.uuid4())
    assert put(client, consumer, {rp: {"VCPU": 2}}, None).status == 204
    before = _entries(client, "/history/allocations", consumer_uuid=consumer)
    assert put(client, consumer, {rp: {"VCPU": 40}}, 1).status == 409
    assert put(client, consumer, {rp: {"VCPU": 1}}, 0).status == 409  # stale generation
    assert _entries(client, "/history/allocations", consumer_uuid=consumer) == before


def test_writes_behind_allotments_back_are_outside_writes(client, database, outside):
    rp = provider_with(client, "cn", VCPU=16, DISK_GB=100)
    consumer = str(uuid.uuid4())
    assert put(client, consumer, {rp: {"VCPU": 2, "DISK_GB": 10}}, None).status == 204
    with outside.begin() as conn:
        rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                             .where(t.resource_providers.c.uuid == rp)).scalar_one()
        a = t.allocations
        # An operator's fix: more VCPU, the disk allocation removed, and a new
        # consumer's row inserted (as upstream leaves them, no consumer record).
        conn.execute(a.update().where(a.c.consumer_id == consumer,
                                      a.c.resource_class_id == 0).values(used=3))
        conn.execute(a.delete().where(a.c.consumer_id == consumer,
                                      a.c.resource_class_id == 2))
        stray = str(uuid.uuid4())
        conn.execute(a.insert().values(resource_provider_id=rp_id, consumer_id=stray,
                                       resource_class_id=0, used=1))
    entries = _entries(client, "/history/allocations", resource_provider_uuid=rp)
    outside_entries = [e for e in entries if e["writer"] == "outside"]
    assert sorted((e["consumer_uuid"], e["resource_class"], e["used_before"], e["used_after"])
                  for e in outside_entries) == sorted([
                      (consumer, "VCPU", 2, 3), (consumer, "DISK_GB", 10, 0),
                      (stray, "VCPU", 0, 1)])
    assert all(e["request_id"] is None and e["global_request_id"] is None
               for e in outside_entries)
    # The consumer's project was known then; the stray row's consumer has none.
    by_consumer = {e["consumer_uuid"]: e for e in outside_entries}
    assert by_consumer[consumer]["project_id"] == "proj"
    assert by_consumer[stray]["project_id"] is None
    # allotment's own next write is allotment's again.
    assert put(client, consumer, {rp: {"VCPU": 1}}, 1).status == 204
    assert _entries(client, "/history/allocations", consumer_uuid=consumer,
                    limit="1")[0]["writer"] == "allotment"


def test_inventory_changes_by_allotment_and_outside(client, database, outside):
    rp = provider_with(client, "cn", VCPU=8, MEMORY_MB=1024)
    resp = client.put(f"/resource_providers/{rp}/inventories/VCPU", {
        "resource_provider_generation": 1, "total": 16, "reserved": 2,
        "allocation_ratio": 4.0})
    assert resp.status == 200, resp
    assert client.delete(f"/resource_providers/{rp}/inventories/MEMORY_MB").status == 204
    with outside.begin() as conn:
        conn.execute(t.inventories.update().where(t.inventories.c.resource_class_id == 0)
                     .values(allocation_ratio=1.5))
    entries = _entries(client, "/history/inventories", resource_provider_uuid=rp)
    shown = [(e["resource_class"], e["total_before"], e["total_after"], e["reserved_before"],
              e["reserved_after"], e["allocation_ratio_before"], e["allocation_ratio_after"],
              e["writer"]) for e in entries]
    assert shown[:3] == [
        ("VCPU", 16, 16, 2, 2, 4.0, 1.5, "outside"),
        ("MEMORY_MB", 1024, None, 0, None, 1.0, None, "allotment"),
        ("VCPU", 8, 16, 0, 2, 1.0, 4.0, "allotment"),
    ]
    assert sorted(shown[3:]) == [("MEMORY_MB", None, 1024, None, 0, None, 1.0, "allotment"),
                                 ("VCPU", None, 8, None, 0, None, 1.0, "allotment")]
    # The generation the change was made against.
    assert entries[2]["resource_provider_generation"] == 1
    assert entries[2]["request_id"] == resp.headers["x-openstack-request-id"]
    assert entries[0]["request_id"] is None


def test_filters_and_paging(client, database):
    rp1 = provider_with(client, "cn1", VCPU=100)
    rp2 = provider_with(client, "cn2", VCPU=100)
    consumers = [str(uuid.uuid4()) for _ in range(5)]
    for index, consumer in enumerate(consumers):
        target = rp1 if index % 2 == 0 else rp2
        resp = put(client, consumer, {target: {"VCPU": 1 + index}}, None,
                   project="even" if index % 2 == 0 else "odd")
        assert resp.status == 204, resp
    assert [e["consumer_uuid"] for e in _entries(client, "/history/allocations",
                                                 project_id="odd")] == consumers[3::-2]
    assert {e["resource_provider_uuid"] for e in _entries(
        client, "/history/allocations", resource_provider_uuid=rp1)} == {rp1}
    # A uuid without dashes, in capitals, names the same provider.
    assert _entries(client, "/history/allocations",
                    resource_provider_uuid=rp2.replace("-", "").upper()) == _entries(
        client, "/history/allocations", resource_provider_uuid=rp2)

    # Pages of two: every entry once, newest first, then no next_marker.
    seen: list[int] = []
    marker = None
    while True:
        query = "limit=2" + (f"&marker={marker}" if marker else "")
        page = client.get(f"/history/allocations?{query}").json()
        seen += [e["id"] for e in page["entries"]]
        marker = page["next_marker"]
        if marker is None:
            break
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)

    # since/until: everything is recorded "now".
    now = datetime.datetime.now(datetime.timezone.utc)
    hour = datetime.timedelta(hours=1)
    stamp = lambda at: at.strftime("%Y-%m-%dT%H:%M:%S") + "Z"  # noqa: E731
    assert len(_entries(client, "/history/allocations", since=stamp(now - hour))) == 5
    assert _entries(client, "/history/allocations", since=stamp(now + hour)) == []
    assert _entries(client, "/history/allocations", until=stamp(now - hour)) == []
    # An offset is applied: 02:00+02:00 is midnight UTC.
    day = (now - datetime.timedelta(days=1)).date().isoformat()
    assert len(_entries(client, "/history/allocations", since=f"{day}T02:00:00%2B02:00")) == 5


@pytest.mark.parametrize("query", [
    "limit=0", "limit=1001", "limit=-1", "limit=x", "marker=abc", "marker=99999999999999999999",
    "since=yesterday", "since=0001-01-01", "until=2026-13-01", "since=9999-12-31T23:59:59-05:00",
    "consumer_uuid=not-a-uuid", "resource_provider_uuid=%00", "project_id=", "project_id=%00",
    "project_id=" + "x" * 256, "since=%ED%A0%80", "colour=blue",
])
def test_bad_queries_are_400(client, database, query):
    before = state(database)
    resp = client.get(f"/history/allocations?{query}")
    assert resp.status == 400, resp
    assert resp.json()["errors"][0]["status"] == 400
    assert state(database) == before


def test_inventory_history_refuses_allocation_filters(client):
    assert client.get("/history/inventories?consumer_uuid="
                      + str(uuid.uuid4())).status == 400


def test_admin_only(app):
    for token, roles, status in (("someone:proj", "reader", 403), ("someone:proj", "member", 403),
                                 (None, "admin", 401), ("someone:proj", "admin", 200)):
        reader = PlacementClient(app, token=token)
        for path in ("/history/allocations", "/history/inventories"):
            resp = reader.request("GET", path, headers={"X-Roles": roles})
            assert resp.status == status, (path, roles, resp)


def _age(database: Any, table: sa.Table, days: int) -> None:
    with database.engine.begin() as conn:
        conn.execute(table.update().values(
            created_at=datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
            - datetime.timedelta(days=days)))


def test_retention_trims_only_old_entries(client, database):
    rp = provider_with(client, "cn", VCPU=8)
    old = str(uuid.uuid4())
    assert put(client, old, {rp: {"VCPU": 1}}, None).status == 204
    _age(database, t.allocation_history, 100)
    _age(database, t.inventory_history, 100)
    recent = str(uuid.uuid4())
    assert put(client, recent, {rp: {"VCPU": 1}}, None).status == 204
    retention = history.Retention(database.db, days=90)
    assert retention.trim_now() == 2  # one allocation entry, one inventory entry
    assert [e["consumer_uuid"] for e in _entries(client, "/history/allocations")] == [recent]
    assert _entries(client, "/history/inventories") == []
    assert retention.trim_now() == 0


def test_retention_runs_in_the_background_after_writes(client, database, app):
    rp = provider_with(client, "cn", VCPU=8)
    assert put(client, str(uuid.uuid4()), {rp: {"VCPU": 1}}, None).status == 204
    _age(database, t.allocation_history, 100)
    retention = history.Retention(database.db, days=90, interval=0.0)
    retention.due()
    deadline = time.monotonic() + 30
    while _entries(client, "/history/allocations") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _entries(client, "/history/allocations") == []


def test_history_survives_the_provider_and_the_class(client, database):
    """Names are kept as they were: the provider and custom class may be gone."""
    assert client.put("/resource_classes/CUSTOM_GONE", version="1.7").status == 201
    rp = provider_with(client, "cn", CUSTOM_GONE=4)
    consumer = str(uuid.uuid4())
    assert put(client, consumer, {rp: {"CUSTOM_GONE": 1}}, None).status == 204
    assert client.delete(f"/allocations/{consumer}").status == 204
    assert client.delete(f"/resource_providers/{rp}").status == 204
    assert client.delete("/resource_classes/CUSTOM_GONE", version="1.7").status == 204
    entries = _entries(client, "/history/allocations", consumer_uuid=consumer)
    assert [(e["resource_provider_uuid"], e["resource_class"], e["used_after"])
            for e in entries] == [(rp, "CUSTOM_GONE", 0), (rp, "CUSTOM_GONE", 1)]
    deleted = _entries(client, "/history/inventories", resource_provider_uuid=rp)[0]
    assert (deleted["resource_class"], deleted["total_before"], deleted["total_after"]) == (
        "CUSTOM_GONE", 4, None)


def test_a_transaction_that_retries_within_itself_shows_what_it_left(client, database,
                                                                      outside):
    """Upstream retries a claim inside one transaction: insert, delete, insert again.

    In one of allotment's transactions the three merge into one entry (0 -> 4);
    an outside writer's merge by transaction is PostgreSQL's alone (elsewhere
    each statement is its own entry, each with the right amounts).
    """
    rp = provider_with(client, "cn", VCPU=8)
    with outside.connect() as conn:
        rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                             .where(t.resource_providers.c.uuid == rp)).scalar_one()
    a = t.allocations

    def retry_within(conn: sa.Connection, consumer: str) -> None:
        row = {"resource_provider_id": rp_id, "consumer_id": consumer, "resource_class_id": 0,
               "used": 4}
        conn.execute(a.insert().values(**row))
        conn.execute(a.delete().where(a.c.consumer_id == consumer))
        conn.execute(a.insert().values(**row))

    ours, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    with database.db.write() as conn:
        retry_within(conn, ours)
    with outside.begin() as conn:
        retry_within(conn, theirs)
    assert _amounts(_entries(client, "/history/allocations", consumer_uuid=ours)) == [
        ("VCPU", 0, 4, "allotment")]
    shown = _amounts(_entries(client, "/history/allocations", consumer_uuid=theirs))
    if database.backend == "postgresql":
        assert shown == [("VCPU", 0, 4, "outside")]
    else:
        assert shown == [("VCPU", 0, 4, "outside"), ("VCPU", 4, 0, "outside"),
                         ("VCPU", 0, 4, "outside")]


def test_a_claim_that_changes_the_owner_records_the_new_one(client):
    rp = provider_with(client, "cn", VCPU=8)
    consumer = str(uuid.uuid4())
    assert put(client, consumer, {rp: {"VCPU": 1}}, None, version="1.38",
               consumer_type="INSTANCE", project="p1", user="u1").status == 204
    assert put(client, consumer, {rp: {"VCPU": 2}}, 1, version="1.38",
               consumer_type="MIGRATION", project="p2", user="u2").status == 204
    entries = _entries(client, "/history/allocations", consumer_uuid=consumer)
    assert [(e["project_id"], e["user_id"], e["consumer_type"], e["used_before"],
             e["used_after"]) for e in entries] == [("p2", "u2", "MIGRATION", 1, 2),
                                                    ("p1", "u1", "INSTANCE", 0, 1)]
    assert [e["consumer_uuid"] for e in _entries(client, "/history/allocations",
                                                 project_id="p2")] == [consumer]


def test_request_ids_travel_with_the_write_not_the_thread(client, database):
    """The ids a transaction records are the ones handed to it (``run_write``'s
    ``ids``), whatever request the thread's log context holds, and none for a
    write no request made."""
    rp = provider_with(client, "cn1", VCPU=8)
    with database.db.read() as conn:
        rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                             .where(t.resource_providers.c.uuid == rp)).scalar_one()
    a = t.allocations
    ours, unstamped = str(uuid.uuid4()), str(uuid.uuid4())
    # Another request's context on this thread, as a log line would see it.
    oslo_context.RequestContext(request_id="req-elsewhere", global_request_id=GLOBAL_ID,
                                overwrite=True)
    try:
        retry.run_write(database.db, lambda conn: conn.execute(a.insert().values(
            resource_provider_id=rp_id, consumer_id=ours, resource_class_id=0, used=1)),
            ids=RequestIds("req-handed", "req-caller"))
        with database.db.write() as conn:
            conn.execute(a.insert().values(resource_provider_id=rp_id, consumer_id=unstamped,
                                           resource_class_id=0, used=1))
    finally:
        oslo_context.RequestContext(overwrite=True)  # the thread's context emptied again
    [entry] = _entries(client, "/history/allocations", consumer_uuid=ours)
    assert (entry["writer"], entry["request_id"], entry["global_request_id"]) == (
        "allotment", "req-handed", "req-caller")
    [entry] = _entries(client, "/history/allocations", consumer_uuid=unstamped)
    assert (entry["writer"], entry["request_id"], entry["global_request_id"]) == (
        "allotment", None, None)


def test_request_ids_are_recorded_as_they_are_whatever_they_hold(client, database):
    """PostgreSQL sends the ids written into its BEGIN's statement (one round
    trip): quotes, backslashes and statement breaks stay data."""
    rp = provider_with(client, "cn1", VCPU=8)
    with database.db.read() as conn:
        rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                             .where(t.resource_providers.c.uuid == rp)).scalar_one()
    consumer = str(uuid.uuid4())
    ids = RequestIds("req-'); SELECT pg_sleep(1); --", "it's \\'%s\\0")
    retry.run_write(database.db, lambda conn: conn.execute(t.allocations.insert().values(
        resource_provider_id=rp_id, consumer_id=consumer, resource_class_id=0, used=1)),
        ids=ids)
    [entry] = _entries(client, "/history/allocations", consumer_uuid=consumer)
    assert (entry["request_id"], entry["global_request_id"]) == (
        ids.request_id, ids.global_request_id)
