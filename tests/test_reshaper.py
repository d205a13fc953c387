"""POST /reshaper over HTTP: inventories and allocations move together, or not at all."""

from __future__ import annotations

import uuid

import pytest

from allotment import errors
from tests.support.claims_support import generation, provider_with, put, state, usages

C1 = "11111111-1111-1111-1111-111111111111"
C2 = "22222222-2222-2222-2222-222222222222"
# The reshaper's default rule is service-only (admin too under legacy defaults).
SERVICE = {"X-Roles": "admin,service"}


@pytest.fixture
def tree(client):
    """A compute node with VCPU and DISK_GB in use by two consumers, and a child."""
    cn = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    put(client, C1, {cn: {"VCPU": 2, "DISK_GB": 10}})
    put(client, C2, {cn: {"VCPU": 4}})
    numa = client.create_provider("numa", parent=cn)["uuid"]
    return cn, numa


def _entry(allocations: dict, generation: int | None, **extra) -> dict:
    return {"allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": "proj", "user_id": "user", "consumer_generation": generation,
            **extra}


def _move_vcpu(cn: str, numa: str, cn_generation: int = 3, numa_generation: int = 0,
               **kw) -> dict:
    return {
        "inventories": {
            cn: {"resource_provider_generation": cn_generation,
                 "inventories": {"DISK_GB": {"total": 100}}},
            numa: {"resource_provider_generation": numa_generation,
                   "inventories": {"VCPU": {"total": 8}}},
        },
        "allocations": {
            C1: _entry({cn: {"DISK_GB": 10}, numa: {"VCPU": 2}}, 1, **kw),
            C2: _entry({numa: {"VCPU": 4}}, 1, **kw),
        },
    }


def test_move_inventory_and_allocations_to_child(client, tree):
    cn, numa = tree
    resp = client.post("/reshaper", _move_vcpu(cn, numa), version="1.30", headers=SERVICE)
    assert resp.status == 204, resp
    assert usages(client, cn) == {"DISK_GB": 10}
    assert usages(client, numa) == {"VCPU": 6}
    # As upstream: interim inventory, allocations, final inventory: three bumps each.
    assert (generation(client, cn), generation(client, numa)) == (6, 3)
    shown = client.get(f"/allocations/{C1}", version="1.28").json()
    assert shown["allocations"][numa]["resources"] == {"VCPU": 2}
    assert shown["consumer_generation"] == 2


def test_gates_and_policy(client, tree):
    cn, numa = tree
    assert client.get("/reshaper", version="1.30", headers=SERVICE).status == 405
    resp = client.post("/reshaper", _move_vcpu(cn, numa), version="1.29", headers=SERVICE)
    assert resp.status == 404
    resp = client.post("/reshaper", _move_vcpu(cn, numa), version="1.30", token="user")
    assert resp.status == 403
    resp = client.post("/reshaper", _move_vcpu(cn, numa, mappings={"": [numa]}),
                       version="1.33", headers=SERVICE)
    assert resp.status == 400 and "Additional properties are not allowed" in resp.detail
    resp = client.post("/reshaper", _move_vcpu(cn, numa), version="1.38", headers=SERVICE)
    assert resp.status == 400 and "'consumer_type' is a required" in resp.detail
    resp = client.post("/reshaper", _move_vcpu(cn, numa, consumer_type="INSTANCE",
                                               mappings={"": [numa]}), version="1.38",
                       headers=SERVICE)
    assert resp.status == 204, resp
    assert client.get(f"/allocations/{C2}", version="1.38").json()["consumer_type"] == "INSTANCE"


def test_refusals_change_nothing(client, database, tree):
    cn, numa = tree
    before = state(database)

    def refused(body: dict, status: int, phrase: str, code: str | None = None) -> None:
        resp = client.post("/reshaper", body, version="1.30", headers=SERVICE)
        assert resp.status == status and phrase in resp.detail, resp
        if code:
            assert resp.error_code == code
        assert state(database) == before

    refused({"cows": "moo"}, 400, "JSON does not validate")
    body = _move_vcpu(cn, numa)
    del body["allocations"]
    refused(body, 400, "'allocations' is a required property")
    refused(_move_vcpu(cn, numa, cn_generation=2), 409,
            "resource provider generation conflict for provider", errors.CONCURRENT_UPDATE)
    missing = str(uuid.uuid4())
    body = _move_vcpu(cn, numa)
    body["inventories"][missing] = body["inventories"].pop(numa)
    refused(body, 400, f"Resource provider {missing} in inventories not found",
            errors.RESOURCE_PROVIDER_NOT_FOUND)
    body = _move_vcpu(cn, numa)
    body["allocations"][C2]["allocations"][missing] = {"resources": {"VCPU": 1}}
    refused(body, 400, f"Allocation for resource provider '{missing}' that does not exist")
    body = _move_vcpu(cn, numa)
    body["allocations"][C2]["consumer_generation"] = 7
    refused(body, 409, "consumer generation conflict", errors.CONCURRENT_UPDATE)
    body = _move_vcpu(cn, numa)
    body["inventories"][numa]["inventories"] = {"CUSTOM_STEEL": {"total": 8}}
    refused(body, 400, "malformed reshaper data: No such resource class CUSTOM_STEEL.")
    body = _move_vcpu(cn, numa)
    body["inventories"][numa]["inventories"]["VCPU"]["max_unit"] = 3
    refused(body, 409, "Unable to allocate inventory")  # C2's 4 VCPU > max_unit
    # The VCPU leaves cn but one consumer's VCPU stays there.
    body = _move_vcpu(cn, numa)
    body["allocations"][C2] = _entry({cn: {"VCPU": 4}}, 1)
    refused(body, 409, "update conflict: Inventory for 'VCPU' on resource provider",
            errors.INVENTORY_INUSE)


def test_a_provider_may_give_away_all_its_inventory(client, tree):
    cn, numa = tree
    body = {
        "inventories": {
            cn: {"resource_provider_generation": 3, "inventories": {}},
            numa: {"resource_provider_generation": 0,
                   "inventories": {"VCPU": {"total": 8}, "DISK_GB": {"total": 100}}},
        },
        "allocations": {
            C1: _entry({numa: {"VCPU": 2, "DISK_GB": 10}}, 1),
            C2: _entry({numa: {"VCPU": 4}}, 1),
        },
    }
    resp = client.post("/reshaper", body, version="1.30", headers=SERVICE)
    assert resp.status == 204, resp
    assert client.get(f"/resource_providers/{cn}/inventories").json() == {
        "resource_provider_generation": 4, "inventories": {}}
    assert usages(client, cn) == {}
    assert usages(client, numa) == {"VCPU": 6, "DISK_GB": 10}
    # No interim step for cn (nothing to add), and the allocations leave it
    # (no bump, as upstream): only its final inventory bumps it.
    assert (generation(client, cn), generation(client, numa)) == (4, 3)


@pytest.mark.parametrize("records, text", [
    ({"house": [1]}, "No such resource class house"),
    ({"house": {}}, "No such resource class house"),
])
def test_a_record_under_a_key_that_is_no_class_is_refused(client, tree, records, text):
    """Found by tests/test_fuzz.py: these answered 500."""
    cn, _numa = tree
    body = {"inventories": {cn: {"resource_provider_generation": generation(client, cn),
                                 "inventories": records}},
            "allocations": {}}
    resp = client.post("/reshaper", body, version="1.30", headers=SERVICE)
    assert resp.status == 400, resp
    assert text in resp.detail


def test_every_generation_is_checked_before_any_record(client, database, tree):
    """As upstream: a stale generation anywhere is a 409, even when an earlier
    provider's records would be refused (here reserved > total)."""
    cn, numa = tree
    before = state(database)
    body = _move_vcpu(cn, numa, numa_generation=5)
    body["inventories"][cn]["inventories"]["DISK_GB"]["reserved"] = 200
    resp = client.post("/reshaper", body, version="1.30", headers=SERVICE)
    assert resp.status == 409, resp
    assert resp.error_code == errors.CONCURRENT_UPDATE
    assert f"generation conflict for provider {numa}: actual: 0, given: 5" in resp.detail
    # With every generation current, the record is judged: reserved > total.
    body["inventories"][numa]["resource_provider_generation"] = 0
    resp = client.post("/reshaper", body, version="1.30", headers=SERVICE)
    assert resp.status == 400, resp
    assert "reserved value is greater than total" in resp.detail
    assert state(database) == before
