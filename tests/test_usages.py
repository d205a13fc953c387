"""Usage reports over HTTP: per provider, and per project/user (with 1.38 consumer types)."""

from __future__ import annotations

import uuid

from tests.support.claims_support import provider_with, put

C1 = "11111111-1111-1111-1111-111111111111"
C2 = "22222222-2222-2222-2222-222222222222"
C3 = "33333333-3333-3333-3333-333333333333"


def test_provider_usages(client):
    missing = str(uuid.uuid4())
    resp = client.get(f"/resource_providers/{missing}/usages")
    assert resp.status == 404 and f"No resource provider with uuid {missing} found" in resp.detail
    bare = client.create_provider("bare")["uuid"]
    assert client.get(f"/resource_providers/{bare}/usages").json() == {
        "resource_provider_generation": 0, "usages": {}}
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    put(client, C1, {rp: {"VCPU": 2}})
    put(client, C2, {rp: {"VCPU": 3}})
    resp = client.get(f"/resource_providers/{rp}/usages", version="1.15")
    assert resp.json() == {"resource_provider_generation": 3,
                           "usages": {"VCPU": 5, "DISK_GB": 0}}
    assert resp.headers["cache-control"] == "no-cache" and "last-modified" in resp.headers
    assert "cache-control" not in client.get(f"/resource_providers/{rp}/usages").headers


def test_project_usages(client):
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    put(client, C1, {rp: {"VCPU": 2, "DISK_GB": 10}}, project="p1", user="u1")
    put(client, C2, {rp: {"VCPU": 3}}, project="p1", user="u2")
    put(client, C3, {rp: {"VCPU": 1}}, project="p2", user="u1")
    assert client.get("/usages?project_id=p1", version="1.8").status == 404
    assert client.get("/usages?project_id=p1", version="1.9").json() == {
        "usages": {"VCPU": 5, "DISK_GB": 10}}
    # In class id order on every database, whatever order it grouped in.
    assert list(client.get("/usages?project_id=p1", version="1.9").json()["usages"]) == [
        "VCPU", "DISK_GB"]
    assert client.get("/usages?project_id=p1&user_id=u2", version="1.9").json() == {
        "usages": {"VCPU": 3}}
    assert client.get("/usages?project_id=nobody", version="1.9").json() == {"usages": {}}
    for query, phrase in (("", "'project_id' is a required property"),
                          ("?project_id=", "Failed validating 'minLength'"),
                          ("?project_id=p1&user_id=", "Failed validating 'minLength'"),
                          ("?project_id=p1&cow=1", "Additional properties are not allowed"),
                          ("?project_id=p1&consumer_type=all", "Additional properties")):
        resp = client.get(f"/usages{query}", version="1.37")
        assert resp.status == 400 and phrase in resp.detail, (query, resp)


def test_project_usages_by_consumer_type(client):
    rp = provider_with(client, "cn", VCPU=8, DISK_GB=100)
    put(client, C1, {rp: {"VCPU": 2, "DISK_GB": 10}}, version="1.38", consumer_type="INSTANCE")
    put(client, C2, {rp: {"VCPU": 1}}, version="1.38", consumer_type="INSTANCE")
    put(client, C3, {rp: {"DISK_GB": 5}}, version="1.37")

    def usages(query: str = "") -> dict:
        resp = client.get(f"/usages?project_id=proj{query}", version="1.38")
        assert resp.status == 200, resp
        return resp.json()["usages"]

    assert usages() == {
        "INSTANCE": {"VCPU": 3, "DISK_GB": 10, "consumer_count": 2},
        "unknown": {"DISK_GB": 5, "consumer_count": 1},
    }
    # Type names, then class ids in order (a group's count after its first
    # class, as the answer was always built), on every database.
    assert [(group, list(amounts)) for group, amounts in usages().items()] == [
        ("INSTANCE", ["VCPU", "consumer_count", "DISK_GB"]), ("unknown", ["DISK_GB",
                                                                         "consumer_count"])]
    assert usages("&consumer_type=INSTANCE") == {
        "INSTANCE": {"VCPU": 3, "DISK_GB": 10, "consumer_count": 2}}
    assert usages("&consumer_type=all") == {
        "all": {"VCPU": 3, "DISK_GB": 15, "consumer_count": 3}}
    assert usages("&consumer_type=unknown") == {"unknown": {"DISK_GB": 5, "consumer_count": 1}}
    assert usages("&consumer_type=ALL") == {}
    assert usages("&consumer_type=UNKNOWN") == {}
    assert usages("&user_id=nobody&consumer_type=all") == {}
    resp = client.get("/usages?project_id=proj&consumer_type=vm", version="1.38")
    assert resp.status == 400 and "does not match" in resp.detail
