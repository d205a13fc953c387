"""Resource providers over HTTP: create, show, update (and tree moves), delete.

The list filters are in test_providers_filters.py.
"""

import uuid

import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from tests.support.client import PlacementClient, Response


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



# --- trees: creating, moving, deleting ------------------------------------------

UNKNOWN = "5b0f2b40-9d3c-4c3e-a3a8-0e5e5b2d6a8e"  # no provider has it
DUPLICATE = "placement.duplicate_name"


def tree_state(client: PlacementClient) -> dict[str, tuple[str | None, str, int]]:
    """name -> (parent's name, root's name, generation) of every provider."""
    found = client.get("/resource_providers", version="1.14").json()["resource_providers"]
    name_of = {rp["uuid"]: rp["name"] for rp in found}
    return {rp["name"]: (name_of.get(rp["parent_provider_uuid"]),
                         name_of[rp["root_provider_uuid"]], rp["generation"]) for rp in found}


def refused(resp: Response, status: int, phrase: str, code: str | None = None) -> None:
    assert resp.status == status, resp
    assert phrase in resp.detail, resp
    if code:
        assert resp.error_code == code, resp


@pytest.fixture
def tree(client) -> dict[str, str]:
    """r1 > ch > gc, and r2 alone; name -> uuid."""
    r1 = client.create_provider("r1")["uuid"]
    ch = client.create_provider("ch", parent=r1)["uuid"]
    gc = client.create_provider("gc", parent=ch)["uuid"]
    r2 = client.create_provider("r2")["uuid"]
    return {"r1": r1, "ch": ch, "gc": gc, "r2": r2}


def test_create_under_a_parent(client, tree):
    assert tree_state(client) == {"r1": (None, "r1", 0), "ch": ("r1", "r1", 0),
                                  "gc": ("ch", "r1", 0), "r2": (None, "r2", 0)}
    # The parent's uuid is taken in any spelling.
    resp = client.post("/resource_providers", {"name": "gc2",
                                               "parent_provider_uuid": tree["ch"].upper()},
                       version="1.20")
    assert resp.status == 200, resp
    assert resp.json()["parent_provider_uuid"] == tree["ch"]
    assert resp.json()["root_provider_uuid"] == tree["r1"]


def test_create_refusals_change_nothing(client, tree):
    before = tree_state(client)
    new = str(uuid.uuid4())
    r1 = tree["r1"]
    for body, status, phrase, code in [
        ({"name": "me", "uuid": new, "parent_provider_uuid": new}, 400,
         f'Unable to create resource provider "me", {new}: Object action create failed '
         "because: parent provider UUID cannot be same as UUID. Please set parent provider "
         "UUID to None if there is no parent.", None),
        ({"name": "", "uuid": new}, 400,
         f'Unable to create resource provider "", {new}: Object action create failed '
         "because: name is required", None),
        ({"name": "me", "uuid": new, "parent_provider_uuid": new.upper()}, 400,
         "parent provider UUID cannot be same as UUID", None),
        ({"name": "orphan", "parent_provider_uuid": UNKNOWN}, 400,
         "parent provider UUID does not exist.", None),
        ({"name": "other", "uuid": r1}, 409,
         f"Conflicting resource provider uuid: {r1} already exists.", DUPLICATE),
        ({"name": "other", "uuid": r1.upper()}, 409,
         f"Conflicting resource provider uuid: {r1} already exists.", DUPLICATE),
        ({"name": "r1", "uuid": new}, 409,
         "Conflicting resource provider name: r1 already exists.", DUPLICATE),
        ({"name": "ch", "parent_provider_uuid": r1}, 409,
         "Conflicting resource provider name: ch already exists.", DUPLICATE),
    ]:
        refused(client.post("/resource_providers", body, version="1.23"), status, phrase, code)
    # No parents before 1.14.
    refused(client.post("/resource_providers", {"name": "x", "parent_provider_uuid": r1},
                        version="1.13"), 400, "Additional properties are not allowed")
    assert tree_state(client) == before


@pytest.mark.parametrize("target, change, version, status, phrase, code", [
    ("ch", {"parent_provider_uuid": UNKNOWN}, "1.37", 400,
     "Object action create failed because: parent provider UUID does not exist.", None),
    ("ch", {"parent_provider_uuid": "r2"}, "1.36", 400,
     "re-parenting a provider is not currently allowed.", None),
    ("ch", {"parent_provider_uuid": None}, "1.36", 400,
     "un-parenting a provider is not currently allowed.", None),
    # A root may get a parent before 1.37, but not from its own tree.
    ("r1", {"parent_provider_uuid": "gc"}, "1.14", 400,
     "creating loop in the provider tree is not allowed.", None),
    ("r1", {"parent_provider_uuid": "r1"}, "1.37", 400,
     "creating loop in the provider tree is not allowed.", None),
    ("ch", {"parent_provider_uuid": "gc"}, "1.37", 400,
     "creating loop in the provider tree is not allowed.", None),
    ("ch", {"name": "r2"}, "1.37", 409,
     "Conflicting resource provider r2 already exists.", DUPLICATE),
    ("ch", {"parent_provider_uuid": "r2"}, "1.13", 400,
     "Additional properties are not allowed", None),
])
def test_update_refusals_change_nothing(client, tree, target, change, version, status,
                                        phrase, code):
    before = tree_state(client)
    body = {"name": target, **change}
    if body.get("parent_provider_uuid") in tree:  # a name in the tree: its uuid
        body["parent_provider_uuid"] = tree[body["parent_provider_uuid"]]
    resp = client.put(f"/resource_providers/{tree[target]}", body, version=version)
    refused(resp, status, phrase, code)
    if status == 400 and version != "1.13":
        assert f"Unable to save resource provider {tree[target]}" in resp.detail
    assert tree_state(client) == before


def test_update_missing_provider(client):
    refused(client.put(f"/resource_providers/{UNKNOWN}", {"name": "x"}, version="1.37"), 404,
            f"No resource provider with uuid {UNKNOWN} found")


@pytest.mark.parametrize("body, version", [
    ({}, "1.39"),
    ({"name": "x", "parent_provider_uuid": UNKNOWN}, "1.2"),
    ("{not json", "1.39"),
])
def test_update_missing_provider_before_its_body(client, body, version):
    """As upstream: the provider is looked up before the body is read, so a
    body that would be refused is the provider's 404 when it is gone (without
    Vary, as upstream's uncaught not-found)."""
    path = f"/resource_providers/{UNKNOWN}"
    if isinstance(body, str):
        resp = client.put(path, raw=body, version=version,
                          headers={"Content-Type": "application/json"})
    else:
        resp = client.put(path, body, version=version)
    # Error codes are in the body from 1.23.
    refused(resp, 404, f"No resource provider with uuid {UNKNOWN} found",
            "placement.undefined_code" if version == "1.39" else None)
    assert "vary" not in resp.headers
    assert resp.headers["openstack-api-version"] == f"placement {version}"
    # The same body to a provider that exists: the body's 400.
    known = client.create_provider("known")["uuid"]
    path = f"/resource_providers/{known}"
    resp = client.put(path, raw=body, version=version,
                      headers={"Content-Type": "application/json"}) \
        if isinstance(body, str) else client.put(path, body, version=version)
    assert resp.status == 400, resp


def test_tree_changes_allowed_before_1_37(client, tree):
    def update(name: str, **change: str | None) -> None:
        resp = client.put(f"/resource_providers/{tree[name]}", {"name": name, **change},
                          version="1.14")
        assert resp.status == 200, resp

    update("ch")  # no parent given: the parent stays
    update("ch", parent_provider_uuid=tree["r1"])  # the same parent again
    update("r2", parent_provider_uuid=None)  # a root stays a root
    assert tree_state(client) == {"r1": (None, "r1", 0), "ch": ("r1", "r1", 0),
                                  "gc": ("ch", "r1", 0), "r2": (None, "r2", 0)}
    # A root (and its subtree) may join another tree.
    client.create_provider("r2c", parent=tree["r2"])
    update("r2", parent_provider_uuid=tree["gc"])
    state = tree_state(client)
    assert state["r2"] == ("gc", "r1", 0) and state["r2c"] == ("r2", "r1", 0)


def test_moves_from_1_37_carry_the_subtree(client, tree):
    def move(name: str, parent: str | None) -> dict:
        resp = client.put(f"/resource_providers/{tree[name]}",
                          {"name": name, "parent_provider_uuid": parent and tree[parent]},
                          version="1.37")
        assert resp.status == 200, resp
        return resp.json()

    def in_tree(name: str) -> list[str]:
        resp = client.get(f"/resource_providers?in_tree={tree[name]}", version="1.37")
        return [rp["name"] for rp in resp.json()["resource_providers"]]

    body = move("ch", "r2")
    assert (body["parent_provider_uuid"], body["root_provider_uuid"]) == (tree["r2"], tree["r2"])
    assert tree_state(client) == {"r1": (None, "r1", 0), "ch": ("r2", "r2", 0),
                                  "gc": ("ch", "r2", 0), "r2": (None, "r2", 0)}
    assert in_tree("r1") == ["r1"] and in_tree("gc") == ["ch", "gc", "r2"]
    body = move("ch", None)
    assert (body["parent_provider_uuid"], body["root_provider_uuid"]) == (None, tree["ch"])
    assert tree_state(client)["gc"] == ("ch", "ch", 0)
    move("gc", "r1")
    move("r2", "ch")
    assert tree_state(client) == {"r1": (None, "r1", 0), "ch": (None, "ch", 0),
                                  "gc": ("r1", "r1", 0), "r2": ("ch", "ch", 0)}


def test_delete_rules(client, database, tree):
    for name in ("r1", "ch"):
        refused(client.delete(f"/resource_providers/{tree[name]}", version="1.23"), 409,
                f"Unable to delete parent resource provider {tree[name]}: It has child "
                "resource providers.", "placement.resource_provider.cannot_delete_parent")
    refused(client.delete(f"/resource_providers/{UNKNOWN}", version="1.23"), 404,
            f"No resource provider with uuid {UNKNOWN} found for delete")
    assert len(tree_state(client)) == 4
    # What a provider has goes with it; the aggregate itself stays.
    gc = tree["gc"]
    client.put("/traits/CUSTOM_GONE", version="1.6")
    assert client.put(f"/resource_providers/{gc}/traits",
                      {"traits": ["CUSTOM_GONE"], "resource_provider_generation": 0},
                      version="1.6").status == 200
    assert client.put(f"/resource_providers/{gc}/aggregates", [UNKNOWN],
                      version="1.1").status == 200
    assert client.post(f"/resource_providers/{gc}/inventories",
                       {"resource_class": "VCPU", "total": 4}).status == 201
    assert client.delete(f"/resource_providers/{gc}").status == 204
    assert client.get(f"/resource_providers/{gc}").status == 404
    with database.engine.connect() as conn:
        for table in (t.inventories, t.resource_provider_traits,
                      t.resource_provider_aggregates):
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
        assert conn.execute(sa.select(t.placement_aggregates.c.uuid)).scalars().all() == [
            UNKNOWN]
    assert client.delete("/traits/CUSTOM_GONE", version="1.6").status == 204
    # Children first, then their parents.
    assert client.delete(f"/resource_providers/{tree['ch']}").status == 204
    assert client.delete(f"/resource_providers/{tree['r1']}").status == 204
    assert list(tree_state(client)) == ["r2"]
