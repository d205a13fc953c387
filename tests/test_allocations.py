"""Allocations over HTTP: formats per microversion, capacity rules, generations, errors."""

from __future__ import annotations

import uuid

import pytest

from allotment import errors
from allotment.ledger import allocations as allocations_ledger
from allotment.ledger.errors import Race
from tests.support.claims_support import generation, provider_with, put, state, usages

C1 = "11111111-1111-1111-1111-111111111111"
C2 = "22222222-2222-2222-2222-222222222222"
C3 = "33333333-3333-3333-3333-333333333333"


def _detail_has(resp, status: int, *phrases: str, code: str | None = None) -> None:
    assert resp.status == status, resp
    for phrase in phrases:
        assert phrase in resp.detail, resp
    if code:
        assert resp.error_code == code, resp


# --- formats and microversions -------------------------------------------------

def test_list_format_and_incomplete_consumer_before_1_8(client, conf):
    rp = provider_with(client, "cn", DISK_GB=100)
    body = {"allocations": [{"resource_provider": {"uuid": rp}, "resources": {"DISK_GB": 10}}]}
    assert client.put(f"/allocations/{C1}", body, version="1.7").status == 204
    shown = client.get(f"/allocations/{C1}", version="1.12").json()
    placeholder = conf.placement.incomplete_consumer_project_id
    assert shown == {"allocations": {rp: {"resources": {"DISK_GB": 10}, "generation": 2}},
                     "project_id": placeholder, "user_id": placeholder}
    # Before 1.12 the answer has no owner; from 1.28 the generation, 1.38 the type.
    assert client.get(f"/allocations/{C1}", version="1.11").json() == {
        "allocations": {rp: {"resources": {"DISK_GB": 10}, "generation": 2}}}
    shown = client.get(f"/allocations/{C1}", version="1.38").json()
    assert shown["consumer_generation"] == 1 and shown["consumer_type"] == "unknown"


def test_project_and_user_required_from_1_8(client, database):
    rp = provider_with(client, "cn", DISK_GB=100)
    body = {"allocations": [{"resource_provider": {"uuid": rp}, "resources": {"DISK_GB": 10}}]}
    before = state(database)
    _detail_has(client.put(f"/allocations/{C1}", body, version="1.8"), 400,
                "'project_id' is a required property")
    _detail_has(client.put(f"/allocations/{C1}", {**body, "project_id": "", "user_id": "u"},
                           version="1.8"), 400, "Failed validating 'minLength'")
    assert state(database) == before
    body.update(project_id="p", user_id="u")
    assert client.put(f"/allocations/{C1}", body, version="1.8").status == 204


def test_dict_format_from_1_12(client, database):
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    listish = {"allocations": [{"resource_provider": {"uuid": rp}, "resources": {"VCPU": 1}}],
               "project_id": "p", "user_id": "u"}
    before = state(database)
    _detail_has(client.put(f"/allocations/{C1}", listish, version="1.12"), 400,
                "JSON does not validate")
    _detail_has(put(client, C1, {}, version="1.12"), 400, "JSON does not validate")
    _detail_has(put(client, C1, {rp: {"vcpu": 1}}, version="1.12"), 400,
                "does not match any of the regexes")
    _detail_has(put(client, C1, {rp: {"VCPU": 0}}, version="1.12"), 400,
                "0 is less than the minimum of 1")
    assert state(database) == before
    assert put(client, C1, {rp: {"VCPU": 2, "DISK_GB": 20}}, version="1.12").status == 204
    # What GET shows can be PUT back as it is.
    shown = client.get(f"/allocations/{C1}", version="1.12").json()
    assert put(client, C1, {rp: shown["allocations"][rp]["resources"]},
               version="1.12").status == 204


def test_consumer_generation_from_1_28(client, database):
    rp = provider_with(client, "cn", VCPU=8)
    before = state(database)
    _detail_has(client.put(f"/allocations/{C1}", {
        "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"},
        version="1.28"), 400, "'consumer_generation' is a required property")
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, generation=5), 409,
                "consumer generation conflict - expected null but got 5",
                code=errors.CONCURRENT_UPDATE)
    assert state(database) == before
    assert put(client, C1, {rp: {"VCPU": 1}}, generation=None).status == 204
    _detail_has(put(client, C1, {rp: {"VCPU": 2}}, generation=None), 409,
                "consumer generation conflict - expected 1 but got None",
                code=errors.CONCURRENT_UPDATE)
    _detail_has(put(client, C1, {rp: {"VCPU": 2}}, generation=7), 409,
                "consumer generation conflict - expected 1 but got 7")
    assert put(client, C1, {rp: {"VCPU": 2}}, generation=1).status == 204
    assert client.get(f"/allocations/{C1}", version="1.28").json()["consumer_generation"] == 2
    # Below 1.28 no generation is sent and none is checked.
    assert put(client, C1, {rp: {"VCPU": 3}}, version="1.27").status == 204
    # An empty allocations dict releases everything and the consumer with it.
    assert put(client, C1, {}, generation=3).status == 204
    assert client.get(f"/allocations/{C1}", version="1.28").json() == {"allocations": {}}
    assert usages(client, rp) == {"VCPU": 0}
    assert put(client, C1, {rp: {"VCPU": 1}}, generation=None).status == 204


def test_mappings_from_1_34(client):
    rp = provider_with(client, "cn", VCPU=8)
    mappings = {"": [rp]}
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.33", mappings=mappings), 400,
                "Additional properties are not allowed")
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.34", mappings={"a": "b"}), 400,
                "'b' is not of type 'array'")
    assert put(client, C1, {rp: {"VCPU": 1}}, version="1.34", mappings=mappings).status == 204


def test_consumer_type_from_1_38(client, database):
    rp = provider_with(client, "cn", VCPU=8)
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.38"), 400,
                "'consumer_type' is a required property")
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.37", consumer_type="INSTANCE"),
                400, "Additional properties are not allowed")
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.38", consumer_type="vm"),
                400, "'vm' does not match")
    assert put(client, C1, {rp: {"VCPU": 1}}, version="1.38",
               consumer_type="INSTANCE").status == 204
    assert client.get(f"/allocations/{C1}", version="1.38").json()["consumer_type"] == "INSTANCE"
    # A request below 1.38 leaves the type alone; a later one may change it.
    assert put(client, C1, {rp: {"VCPU": 2}}, generation=1, version="1.37").status == 204
    assert client.get(f"/allocations/{C1}", version="1.38").json()["consumer_type"] == "INSTANCE"
    assert put(client, C1, {rp: {"VCPU": 2}}, generation=2, version="1.38",
               consumer_type="MIGRATION").status == 204
    assert client.get(f"/allocations/{C1}", version="1.38").json()["consumer_type"] == "MIGRATION"


def test_get_unknown_consumer_and_cache_headers(client):
    assert client.get(f"/allocations/{C1}", version="1.38").json() == {"allocations": {}}
    rp = provider_with(client, "cn", VCPU=8)
    put(client, C1, {rp: {"VCPU": 1}})
    resp = client.get(f"/allocations/{C1}", version="1.15")
    assert resp.headers["cache-control"] == "no-cache" and "last-modified" in resp.headers
    assert "last-modified" not in client.get(f"/allocations/{C1}", version="1.14").headers
    assert client.get("/allocations").status == 405


def test_owner_changes_with_the_request(client):
    rp = provider_with(client, "cn", VCPU=8)
    put(client, C1, {rp: {"VCPU": 1}}, project="p1", user="u1")
    assert put(client, C1, {rp: {"VCPU": 1}}, generation=1, project="p2",
               user="u1").status == 204
    shown = client.get(f"/allocations/{C1}", version="1.28").json()
    assert (shown["project_id"], shown["user_id"]) == ("p2", "u1")


# --- refusals -------------------------------------------------------------------

def test_refusals_change_nothing(client, database):
    rp = provider_with(client, "cn", VCPU=8,
                       DISK_GB={"total": 100, "min_unit": 10, "max_unit": 50, "step_size": 5})
    bare = provider_with(client, "bare")
    assert put(client, C1, {rp: {"VCPU": 2}}).status == 204
    before = state(database)
    _detail_has(client.put("/allocations/not-a-uuid", {"allocations": []}), 400,
                "Malformed consumer_uuid: not-a-uuid")
    missing = str(uuid.uuid4())
    _detail_has(put(client, C2, {missing: {"VCPU": 1}}), 400,
                f"Allocation for resource provider '{missing}' that does not exist.")
    _detail_has(put(client, C2, {rp: {"CUSTOM_NOPE": 1}}), 400,
                f"Unable to allocate inventory for consumer {C2}: "
                "No such resource class CUSTOM_NOPE.")
    _detail_has(put(client, C2, {bare: {"VCPU": 1}}), 409, "Unable to allocate inventory",
                f"Inventory for 'VCPU' on resource provider '{bare}' invalid.")
    _detail_has(put(client, C2, {rp: {"VCPU": 1, "MEMORY_MB": 1}}), 409,
                f"Inventory for 'MEMORY_MB' on resource provider '{rp}' invalid.")
    for amount in (5, 55, 12):  # below min_unit, above max_unit, off step_size
        _detail_has(put(client, C2, {rp: {"DISK_GB": amount}}), 409,
                    "Unable to allocate inventory",
                    f"Unable to create allocation for 'DISK_GB' on resource provider '{rp}'. "
                    "The requested amount would violate inventory constraints.")
    _detail_has(put(client, C2, {rp: {"VCPU": 7}}), 409, "Unable to allocate inventory",
                f"Unable to create allocation for 'VCPU' on resource provider '{rp}'. "
                "The requested amount would exceed the capacity.")
    # A consumer's own old allocation does not count against its new one.
    assert state(database) == before
    assert put(client, C1, {rp: {"VCPU": 8}}, generation=1).status == 204


def test_capacity_uses_reserved_and_allocation_ratio(client):
    rp = provider_with(client, "cn", VCPU={"total": 4, "reserved": 1, "allocation_ratio": 2.5})
    assert put(client, C1, {rp: {"VCPU": 7}}).status == 204  # (4 - 1) * 2.5 = 7.5
    _detail_has(put(client, C2, {rp: {"VCPU": 1}}), 409, "would exceed the capacity")


def test_over_capacity_claim_allowed_only_if_no_worse(client):
    rp = provider_with(client, "cn", VCPU=8)
    put(client, C1, {rp: {"VCPU": 4}})
    put(client, C2, {rp: {"VCPU": 4}})
    gen = generation(client, rp)
    resp = client.put(f"/resource_providers/{rp}/inventories",
                      {"resource_provider_generation": gen, "inventories": {"VCPU": {"total": 4}}})
    assert resp.status == 200, resp  # shrinking below usage is allowed
    assert put(client, C1, {rp: {"VCPU": 4}}, generation=1).status == 204  # same: allowed
    assert put(client, C1, {rp: {"VCPU": 2}}, generation=2).status == 204  # better: allowed
    _detail_has(put(client, C1, {rp: {"VCPU": 3}}, generation=3), 409,
                "would exceed the capacity")  # worse than now (6 -> 7): refused
    _detail_has(put(client, C3, {rp: {"VCPU": 1}}), 409, "would exceed the capacity")
    assert usages(client, rp) == {"VCPU": 6}


# --- generations -----------------------------------------------------------------

def test_generations_bumped_for_the_providers_of_the_new_allocations(client):
    rp1 = provider_with(client, "cn1", VCPU=8)
    rp2 = provider_with(client, "cn2", VCPU=8)
    g1, g2 = generation(client, rp1), generation(client, rp2)
    put(client, C1, {rp1: {"VCPU": 1}})
    assert (generation(client, rp1), generation(client, rp2)) == (g1 + 1, g2)
    # Moving to rp2: only rp2 is in the new allocations; rp1, which the
    # consumer leaves, keeps its generation (as upstream, and as DELETE).
    put(client, C1, {rp2: {"VCPU": 1}}, generation=1)
    assert (generation(client, rp1), generation(client, rp2)) == (g1 + 1, g2 + 1)
    # The same through POST /allocations: a move to rp1 bumps rp1 only.
    resp = client.post("/allocations", {C1: {
        "allocations": {rp1: {"resources": {"VCPU": 1}}}, "consumer_generation": 2,
        "project_id": "p", "user_id": "u"}}, version="1.28")
    assert resp.status == 204, resp
    assert (generation(client, rp1), generation(client, rp2)) == (g1 + 2, g2 + 1)
    put(client, C1, {rp2: {"VCPU": 1}}, generation=3)
    assert (generation(client, rp1), generation(client, rp2)) == (g1 + 2, g2 + 2)
    shown = client.get(f"/allocations/{C1}", version="1.28").json()
    assert shown["allocations"][rp2]["generation"] == g2 + 2
    assert shown["consumer_generation"] == 4
    # Releasing (DELETE) only lowers usage: provider generations stay, as upstream.
    assert client.delete(f"/allocations/{C1}").status == 204
    assert generation(client, rp2) == g2 + 2


def test_delete(client, database):
    rp = provider_with(client, "cn", VCPU=8)
    put(client, C1, {rp: {"VCPU": 3}})
    assert client.delete(f"/allocations/{C1}").status == 204
    assert usages(client, rp) == {"VCPU": 0}
    before = state(database)
    assert before["consumers"] == []
    _detail_has(client.delete(f"/allocations/{C1}"), 404, f"No allocations for consumer '{C1}'")
    assert state(database) == before


def test_provider_race_is_retried_in_a_fresh_transaction(client, monkeypatch):
    """A lost compare-and-set is retried; the retry does not count the first attempt."""
    rp = provider_with(client, "cn", VCPU=8)
    put(client, C1, {rp: {"VCPU": 6}})
    real_bump = allocations_ledger._bump_generations
    failures = {"left": 2}

    def flaky_bump(conn, locked, changed):
        if failures["left"]:
            failures["left"] -= 1
            raise Race("simulated race")
        return real_bump(conn, locked, changed)

    monkeypatch.setattr(allocations_ledger, "_bump_generations", flaky_bump)
    # 6 of 8 in use; replacing C1's 6 with 8 fits only if the retry does not
    # count its own first attempt.
    assert put(client, C1, {rp: {"VCPU": 8}}, generation=1).status == 204
    assert failures["left"] == 0
    assert usages(client, rp) == {"VCPU": 8}
    assert client.get(f"/allocations/{C1}", version="1.28").json()["consumer_generation"] == 2


def test_retries_exhausted_is_409_concurrent_update(client, database, monkeypatch, conf):
    rp = provider_with(client, "cn", VCPU=8)
    conf.set_override("allocation_conflict_retry_count", 1, group="placement")

    def lost(conn, locked, changed):
        raise Race("simulated race")

    monkeypatch.setattr(allocations_ledger, "_bump_generations", lost)
    before = state(database)
    _detail_has(put(client, C1, {rp: {"VCPU": 1}}, version="1.23"), 409,
                "Inventory and/or allocations changed while attempting to allocate",
                code=errors.CONCURRENT_UPDATE)
    assert state(database) == before


# --- POST /allocations --------------------------------------------------------------

def _post_entry(allocations: dict, generation: int | None = None, **extra) -> dict:
    return {"allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": "proj", "user_id": "user", "consumer_generation": generation,
            **extra}


def test_post_gate_and_swap(client):
    rp1 = provider_with(client, "cn1", VCPU=4)
    rp2 = provider_with(client, "cn2", VCPU=4)
    entry = _post_entry({rp1: {"VCPU": 1}})
    del entry["consumer_generation"]
    assert client.post("/allocations", {C1: entry}, version="1.12").status == 404
    assert client.post("/allocations", {C1: entry}, version="1.13").status == 204
    # Migration: the instance moves to rp2, the migration record holds rp1.
    resp = client.post("/allocations", {
        C1: _post_entry({rp2: {"VCPU": 4}}, generation=1),
        C2: _post_entry({rp1: {"VCPU": 4}}),
    }, version="1.28")
    assert resp.status == 204, resp
    assert usages(client, rp1) == {"VCPU": 4} and usages(client, rp2) == {"VCPU": 4}
    # Confirm the move: the migration's allocations go away.
    resp = client.post("/allocations", {C2: _post_entry({}, generation=1)}, version="1.28")
    assert resp.status == 204, resp
    assert client.get(f"/allocations/{C2}").json() == {"allocations": {}}
    assert usages(client, rp1) == {"VCPU": 0}


def test_post_that_fails_halfway_changes_nothing(client, database):
    rp1 = provider_with(client, "cn1", VCPU=4)
    rp2 = provider_with(client, "cn2", VCPU=4)
    put(client, C1, {rp1: {"VCPU": 2}})
    put(client, C2, {rp2: {"VCPU": 2}})
    before = state(database)
    shown = {c: client.get(f"/allocations/{c}", version="1.38").json() for c in (C1, C2, C3)}
    # C1 and C2 would be fine; C3 does not fit on rp2 once C2 grows.
    body = {C1: _post_entry({rp1: {"VCPU": 1}}, generation=1),
            C2: _post_entry({rp2: {"VCPU": 3}}, generation=1),
            C3: {**_post_entry({rp2: {"VCPU": 2}}), "project_id": "other"}}
    _detail_has(client.post("/allocations", body, version="1.28"), 409,
                "would exceed the capacity", rp2)
    # Unknown class in the last consumer: 400, and still nothing changed.
    body[C3] = _post_entry({rp2: {"CUSTOM_X": 1}})
    _detail_has(client.post("/allocations", body, version="1.28"), 400,
                "Unable to allocate inventory No such resource class CUSTOM_X.")
    # A stale generation on the second consumer.
    body[C2] = _post_entry({rp2: {"VCPU": 1}}, generation=9)
    _detail_has(client.post("/allocations", body, version="1.28"), 409,
                "consumer generation conflict - expected 1 but got 9")
    assert state(database) == before
    assert {c: client.get(f"/allocations/{c}", version="1.38").json()
            for c in (C1, C2, C3)} == shown


def test_post_schema_per_version(client, database):
    rp = provider_with(client, "cn", VCPU=4)
    before = state(database)
    _detail_has(client.post("/allocations", {C1: {"cow": "moo"}}, version="1.13"), 400,
                "JSON does not validate")
    _detail_has(client.post("/allocations", {}, version="1.13"), 400, "JSON does not validate")
    no_gen = _post_entry({rp: {"VCPU": 1}})
    del no_gen["consumer_generation"]
    _detail_has(client.post("/allocations", {C1: no_gen}, version="1.28"), 400,
                "'consumer_generation' is a required property")
    _detail_has(client.post("/allocations", {C1: _post_entry({rp: {"VCPU": 1}})},
                            version="1.38"), 400, "'consumer_type' is a required property")
    assert state(database) == before
    resp = client.post("/allocations", {C1: _post_entry({rp: {"VCPU": 1}},
                                                        consumer_type="INSTANCE",
                                                        mappings={"": [rp]})},
                       version="1.38")
    assert resp.status == 204, resp


# --- provider side rules that depend on allocations ----------------------------------

def test_provider_and_inventory_in_use(client):
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=10)
    put(client, C1, {rp: {"VCPU": 1}})
    _detail_has(client.delete(f"/resource_providers/{rp}", version="1.23"), 409,
                f"Unable to delete resource provider {rp}: Resource provider has allocations.",
                code=errors.PROVIDER_IN_USE)
    gen = generation(client, rp)
    _detail_has(client.put(f"/resource_providers/{rp}/inventories",
                           {"resource_provider_generation": gen,
                            "inventories": {"DISK_GB": {"total": 10}}}, version="1.23"),
                409, "Inventory for 'VCPU' on resource provider", code=errors.INVENTORY_INUSE)
    client.delete(f"/allocations/{C1}")
    assert client.delete(f"/resource_providers/{rp}").status == 204


# --- GET /resource_providers/{uuid}/allocations ---------------------------------------

@pytest.mark.parametrize("version,with_generation", [("1.27", False), ("1.28", True)])
def test_provider_allocations(client, version, with_generation):
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    put(client, C1, {rp: {"VCPU": 1, "DISK_GB": 10}})
    put(client, C2, {rp: {"VCPU": 2}})
    body = client.get(f"/resource_providers/{rp}/allocations", version=version).json()
    expected = {C1: {"resources": {"VCPU": 1, "DISK_GB": 10}},
                C2: {"resources": {"VCPU": 2}}}
    if with_generation:
        for entry in expected.values():
            entry["consumer_generation"] = 1
    assert body == {"allocations": expected, "resource_provider_generation": 3}
    missing = str(uuid.uuid4())
    _detail_has(client.get(f"/resource_providers/{missing}/allocations"), 404,
                f"No resource provider with uuid {missing} found")
