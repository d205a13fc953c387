"""Resource classes over HTTP: list, show, create (POST, PUT from 1.7), rename, delete."""


import os_resource_classes as orc
import pytest

from tests.support.threads import race


def names(client, version="1.2"):
    return [rc["name"] for rc in client.get("/resource_classes", version=version)
            .json()["resource_classes"]]


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
def test_hidden_before_1_2(client, method):
    path = "/resource_classes" if method in ("GET", "POST") else "/resource_classes/CUSTOM_X"
    body = {"name": "CUSTOM_X"} if method in ("POST", "PUT") else None
    resp = client.request(method, path, body, version="1.1")
    assert resp.status == 404


def test_list_show_and_cache_headers(client):
    assert names(client) == list(orc.STANDARDS)
    resp = client.get("/resource_classes/VCPU", version="1.2")
    assert resp.json() == {"name": "VCPU",
                           "links": [{"rel": "self", "href": "/resource_classes/VCPU"}]}
    assert "last-modified" not in resp.headers
    for path in ("/resource_classes", "/resource_classes/VCPU"):
        resp = client.get(path, version="1.15")
        assert resp.headers["cache-control"] == "no-cache"
        assert resp.headers["last-modified"].endswith(" GMT")
    resp = client.get("/resource_classes/CUSTOM_NOPE", version="1.2")
    assert resp.status == 404
    assert "No such resource class CUSTOM_NOPE" in resp.detail


def test_post_create_and_ids(client, database):
    resp = client.post("/resource_classes", {"name": "CUSTOM_GOLD"}, version="1.2")
    assert resp.status == 201
    assert resp.headers["location"].endswith("/resource_classes/CUSTOM_GOLD")
    assert "content-type" not in resp.headers
    client.post("/resource_classes", {"name": "CUSTOM_SILVER"}, version="1.2")
    assert names(client)[-2:] == ["CUSTOM_GOLD", "CUSTOM_SILVER"]
    with database.engine.connect() as conn:
        ids = dict(conn.exec_driver_sql(
            "SELECT name, id FROM resource_classes WHERE id >= 10000").all())
    assert ids == {"CUSTOM_GOLD": 10000, "CUSTOM_SILVER": 10001}
    resp = client.post("/resource_classes", {"name": "CUSTOM_GOLD"}, version="1.2")
    assert resp.status == 409
    assert "Conflicting resource class already exists: CUSTOM_GOLD" in resp.detail


@pytest.mark.parametrize("body, text", [
    ({"name": "IRON_NFV"}, "JSON does not validate"),
    ({"name": "VCPU"}, "JSON does not validate"),
    ({"name": "CUSTOM_Illegal&@!Name?"}, "Failed validating 'pattern'"),
    ({"name": "CUSTOM_" + "S" * 249}, "Failed validating 'maxLength'"),
    ({"name": "CUSTOM_X", "extra": 1}, "Additional properties are not allowed"),
])
def test_post_refusals_change_nothing(client, body, text):
    resp = client.post("/resource_classes", body, version="1.2")
    assert resp.status == 400
    assert text in resp.detail
    assert names(client) == list(orc.STANDARDS)


def test_post_wrong_content_type(client):
    resp = client.request("POST", "/resource_classes", raw="data", version="1.2",
                          headers={"Content-Type": "text/plain"})
    assert resp.status == 415


def test_rename_before_1_7(client):
    client.post("/resource_classes", {"name": "CUSTOM_A"}, version="1.2")
    client.post("/resource_classes", {"name": "CUSTOM_B"}, version="1.2")
    resp = client.put("/resource_classes/CUSTOM_A", {"name": "CUSTOM_C"}, version="1.6")
    assert resp.status == 200
    assert resp.json()["name"] == "CUSTOM_C"
    assert resp.json()["links"][0]["href"] == "/resource_classes/CUSTOM_C"
    assert "last-modified" not in resp.headers
    # Renaming to the name it has is no conflict.
    resp = client.put("/resource_classes/CUSTOM_B", {"name": "CUSTOM_B"}, version="1.6")
    assert resp.status == 200 and resp.json()["name"] == "CUSTOM_B"
    resp = client.put("/resource_classes/CUSTOM_B", {"name": "CUSTOM_C"}, version="1.6")
    assert resp.status == 409
    assert "Resource class already exists: CUSTOM_C" in resp.detail
    resp = client.put("/resource_classes/VCPU", {"name": "CUSTOM_D"}, version="1.6")
    assert resp.status == 400
    assert "Cannot update standard resource class VCPU" in resp.detail
    resp = client.put("/resource_classes/CUSTOM_NOPE", {"name": "CUSTOM_D"}, version="1.6")
    assert resp.status == 404
    resp = client.request("PUT", "/resource_classes/CUSTOM_B", version="1.6",
                          headers={"Content-Type": "application/json"})
    assert resp.status == 400 and "Malformed JSON" in resp.detail
    assert names(client)[-2:] == ["CUSTOM_C", "CUSTOM_B"]


def test_put_creates_from_1_7(client):
    resp = client.put("/resource_classes/CUSTOM_COW", version="1.7")
    assert resp.status == 201
    assert resp.headers["location"].endswith("/resource_classes/CUSTOM_COW")
    resp = client.put("/resource_classes/CUSTOM_COW", version="1.15")
    assert resp.status == 204
    assert "last-modified" not in resp.headers
    for bad, text in (("COW", "Failed validating 'pattern'"),
                      ("VCPU", "Failed validating 'pattern'"),
                      ("CUSTOM_" + "S" * 249, "Failed validating 'maxLength'")):
        resp = client.put(f"/resource_classes/{bad}", version="1.7")
        assert resp.status == 400
        assert text in resp.detail
    assert names(client)[-1] == "CUSTOM_COW"
    assert len(names(client)) == len(orc.STANDARDS) + 1


def test_delete(client):
    client.put("/resource_classes/CUSTOM_GOLD", version="1.7")
    rp = client.create_provider("cn")["uuid"]
    client.post(f"/resource_providers/{rp}/inventories",
                {"resource_class": "CUSTOM_GOLD", "total": 5})
    resp = client.delete("/resource_classes/CUSTOM_GOLD", version="1.2")
    assert resp.status == 409
    assert ("Error in delete resource class: Cannot delete resource class CUSTOM_GOLD. "
            "Class is in use in inventory.") in resp.detail
    resp = client.delete("/resource_classes/VCPU", version="1.2")
    assert resp.status == 400
    assert "Cannot delete standard resource class VCPU" in resp.detail
    client.delete(f"/resource_providers/{rp}/inventories/CUSTOM_GOLD")
    assert client.delete("/resource_classes/CUSTOM_GOLD", version="1.2").status == 204
    assert client.delete("/resource_classes/CUSTOM_GOLD", version="1.2").status == 404
    assert names(client) == list(orc.STANDARDS)


def test_ids_continue_after_the_largest(client):
    for name in ("CUSTOM_A", "CUSTOM_B"):
        client.put(f"/resource_classes/{name}", version="1.7")
    client.delete("/resource_classes/CUSTOM_A", version="1.7")
    client.put("/resource_classes/CUSTOM_C", version="1.7")
    rp = client.create_provider("cn")["uuid"]
    # Ids are internal; their effect shows in the order of listings.
    client.put(f"/resource_providers/{rp}/inventories",
               {"resource_provider_generation": 0,
                "inventories": {"CUSTOM_C": {"total": 1}, "CUSTOM_B": {"total": 1}}})
    inventories = client.get(f"/resource_providers/{rp}/inventories").json()["inventories"]
    assert list(inventories) == ["CUSTOM_B", "CUSTOM_C"]




def test_concurrent_creates_get_distinct_ids(client, database):
    statuses = race(4, lambda n: client.post("/resource_classes", {"name": f"CUSTOM_R{n}"},
                                             version="1.2").status)
    assert statuses == [201] * 4
    with database.engine.connect() as conn:
        ids = sorted(conn.exec_driver_sql(
            "SELECT id FROM resource_classes WHERE id >= 10000").scalars())
    assert ids == [10000, 10001, 10002, 10003]
