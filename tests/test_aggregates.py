"""Provider aggregates over HTTP: the 1.1 list form and the 1.19 form with generation."""

import uuid

import pytest
import sqlalchemy as sa

from allotment.db import tables as t

AGG_1 = "f918801a-5e54-4bee-9095-09a9d0c786b8"
AGG_2 = "a893eb5c-e2a0-4251-ab26-f71d3b0cfc0b"


@pytest.fixture
def rp(client):
    return client.create_provider("cn")["uuid"]


def url(rp_uuid):
    return f"/resource_providers/{rp_uuid}/aggregates"


def generation(client, rp_uuid):
    return client.get(f"/resource_providers/{rp_uuid}").json()["generation"]


def test_hidden_in_1_0(client, rp):
    assert client.get(url(rp), version="1.0").status == 404
    assert client.put(url(rp), [], version="1.0").status == 404


def test_missing_provider_before_body_checks(client):
    missing = str(uuid.uuid4())
    assert client.get(url(missing), version="1.1").status == 404
    # A body of the wrong form for this version still gets the 404.
    resp = client.put(url(missing), [], version="1.19")
    assert resp.status == 404
    assert f"No resource provider with uuid {missing} found" in resp.detail
    # So does a body that is no JSON at all (upstream looks the provider up first).
    resp = client.request("PUT", url(missing), raw='{"bad", "not json"}', version="1.19",
                          headers={"Content-Type": "application/json"})
    assert resp.status == 404, resp
    assert "vary" not in resp.headers


def test_list_form_leaves_generation(client, rp):
    resp = client.put(url(rp), [AGG_1, AGG_2], version="1.1")
    assert resp.status == 200
    assert resp.json() == {"aggregates": [AGG_1, AGG_2]}
    assert "last-modified" not in resp.headers
    assert sorted(client.get(url(rp), version="1.1").json()["aggregates"]) == \
        sorted([AGG_1, AGG_2])
    resp = client.put(url(rp), [AGG_2], version="1.18")
    assert resp.json() == {"aggregates": [AGG_2]}
    assert resp.headers["cache-control"] == "no-cache"
    assert client.get(url(rp), version="1.18").json() == {"aggregates": [AGG_2]}
    assert generation(client, rp) == 0


def test_generation_form(client, rp):
    resp = client.put(url(rp), {"aggregates": [AGG_1, AGG_2],
                                "resource_provider_generation": 0}, version="1.19")
    assert resp.status == 200
    assert resp.json() == {"aggregates": [AGG_1, AGG_2], "resource_provider_generation": 1}
    assert resp.headers["last-modified"].endswith(" GMT")
    resp = client.get(url(rp), version="1.19")
    assert resp.json()["resource_provider_generation"] == 1
    assert len(resp.json()["aggregates"]) == 2
    resp = client.put(url(rp), {"aggregates": [], "resource_provider_generation": 0},
                      version="1.23")
    assert resp.status == 409
    assert resp.error_code == "placement.concurrent_update"
    assert "Resource provider's generation already changed" in resp.detail
    # The same set again still bumps, as upstream.
    resp = client.put(url(rp), {"aggregates": [AGG_2, AGG_1],
                                "resource_provider_generation": 1}, version="1.19")
    assert resp.json()["resource_provider_generation"] == 2
    resp = client.put(url(rp), {"aggregates": [], "resource_provider_generation": 2},
                      version="1.19")
    assert resp.json() == {"aggregates": [], "resource_provider_generation": 3}


@pytest.mark.parametrize("version, body, text", [
    ("1.19", [AGG_1], "JSON does not validate"),
    ("1.18", {"aggregates": [AGG_1], "resource_provider_generation": 0},
     "JSON does not validate"),
    ("1.19", {"aggregates": [AGG_1]}, "'resource_provider_generation' is a required"),
    ("1.19", {"aggregates": ["harry"], "resource_provider_generation": 0},
     "is not a 'uuid'"),
    ("1.19", {"aggregates": [AGG_1, AGG_1], "resource_provider_generation": 0},
     "has non-unique elements"),
])
def test_refusals_change_nothing(client, database, rp, version, body, text):
    resp = client.put(url(rp), body, version=version)
    assert resp.status == 400
    assert text in resp.detail
    assert client.get(url(rp), version="1.19").json() == {
        "aggregates": [], "resource_provider_generation": 0}
    with database.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(
            t.placement_aggregates)).scalar() == 0


def test_malformed_json(client, rp):
    resp = client.request("PUT", url(rp), raw='{"bad", "not json"}', version="1.19",
                          headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert "Malformed JSON" in resp.detail


def test_aggregates_shared_between_providers(client, database, rp):
    other = client.create_provider("other")["uuid"]
    client.put(url(rp), [AGG_1], version="1.1")
    client.put(url(other), [AGG_1, AGG_2], version="1.1")
    client.put(url(rp), [], version="1.1")
    # Aggregate rows outlive their last association (as upstream's do).
    with database.engine.connect() as conn:
        rows = conn.execute(sa.select(t.placement_aggregates.c.uuid)).scalars().all()
    assert sorted(rows) == sorted([AGG_1, AGG_2])
    assert client.get(f"/resource_providers?member_of={AGG_1}", version="1.3").json()[
        "resource_providers"][0]["uuid"] == other
