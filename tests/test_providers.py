"""Resource providers over HTTP: create, show, update, delete, list filters."""

import uuid


def test_create_show_delete(client):
    rp_uuid = str(uuid.uuid4())
    resp = client.post("/resource_providers", {"name": "cn1", "uuid": rp_uuid})
    assert resp.status == 201
    assert resp.headers["location"].endswith(f"/resource_providers/{rp_uuid}")
    assert resp.text == ""
    resp = client.get(f"/resource_providers/{rp_uuid}", version="1.14")
    assert resp.status == 200
    body = resp.json()
    assert body["name"] == "cn1" and body["generation"] == 0
    assert body["root_provider_uuid"] == rp_uuid and body["parent_provider_uuid"] is None
    assert client.delete(f"/resource_providers/{rp_uuid}").status == 204
    resp = client.get(f"/resource_providers/{rp_uuid}")
    assert resp.status == 404
    assert f"No resource provider with uuid {rp_uuid} found" in resp.detail


def test_duplicate_name_conflict_has_code(client):
    client.create_provider("dup")
    resp = client.post("/resource_providers", {"name": "dup"}, version="1.23")
    assert resp.status == 409
    assert resp.error_code == "placement.duplicate_name"


def test_bad_body_changes_nothing(client):
    resp = client.post("/resource_providers", {"name": "x", "color": "blue"})
    assert resp.status == 400
    assert "JSON does not validate" in resp.detail
    assert client.get("/resource_providers").json() == {"resource_providers": []}


def test_reparenting_gate(client):
    root1 = client.create_provider("root1")
    root2 = client.create_provider("root2")
    child = client.create_provider("child", parent=root1["uuid"])
    body = {"name": "child", "parent_provider_uuid": root2["uuid"]}
    resp = client.put(f"/resource_providers/{child['uuid']}", body, version="1.36")
    assert resp.status == 400
    resp = client.put(f"/resource_providers/{child['uuid']}", body, version="1.37")
    assert resp.status == 200, resp
    assert resp.json()["root_provider_uuid"] == root2["uuid"]
