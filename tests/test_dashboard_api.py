"""The dashboard: its page without a token, its data endpoints behind auth and policy.

Every number the data endpoints give is checked against what the Placement
API itself answers for the same cloud (inventories, usages, allocations).
"""

from __future__ import annotations

import gzip
import uuid

import falcon.testing
import pytest

from allotment import config
from allotment.dashboard import DashboardPage
from allotment.ledger import capacity, overview
from allotment.schemas.dashboard import MAX_NAMES
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.claims_support import provider_with, put
from tests.support.client import PlacementClient

LATEST = "1.39"
AGG = "5e0a5c1e-7b7b-4a8e-9d39-9f8a8c4bb9a1"


@pytest.fixture
def dash(database) -> PlacementClient:
    """An admin client of an application with the dashboard on."""
    conf = make_conf(database.url, allotment__dashboard=True)
    return PlacementClient(make_app(conf, db=database.db, prepare=False))


def as_roles(client: PlacementClient, roles: str, **headers: str) -> PlacementClient:
    """The same application as a user with these roles."""
    return PlacementClient(client._app, token="someone:some-project",
                           headers={"X-Roles": roles, **headers})


def _cloud(client: PlacementClient) -> dict[str, str]:
    """Two trees and a lone provider, with traits, an aggregate and allocations."""
    cn1 = provider_with(client, "cn1", VCPU={"total": 16, "reserved": 2,
                                             "allocation_ratio": 4.0},
                        MEMORY_MB={"total": 32768, "reserved": 512, "allocation_ratio": 1.5})
    numa0 = provider_with(client, "cn1-numa0", parent=cn1, PCPU=8)
    numa1 = provider_with(client, "cn1-numa1", parent=cn1, PCPU=8)
    cn2 = provider_with(client, "cn2", VCPU=8, DISK_GB={"total": 1000, "reserved": 100})
    shared = provider_with(client, "a-shared-disk", DISK_GB=2000)
    gen = client.get(f"/resource_providers/{cn1}").json()["generation"]
    assert client.put(f"/resource_providers/{cn1}/traits", {
        "resource_provider_generation": gen,
        "traits": ["HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED"]}, version=LATEST).status == 200
    gen = client.get(f"/resource_providers/{cn2}").json()["generation"]
    assert client.put(f"/resource_providers/{cn2}/aggregates", {
        "resource_provider_generation": gen, "aggregates": [AGG]}, version=LATEST).status == 200
    consumers = {"vm1": str(uuid.uuid4()), "vm2": str(uuid.uuid4()),
                 "vm3": str(uuid.uuid4()), "mig": str(uuid.uuid4())}
    assert put(client, consumers["vm1"], {cn1: {"VCPU": 4, "MEMORY_MB": 4096}, numa0: {"PCPU": 2}},
               version=LATEST, project="p1", user="u1",
               consumer_type="INSTANCE").status == 204
    assert put(client, consumers["vm2"], {cn2: {"VCPU": 8, "DISK_GB": 900}},
               version=LATEST, project="p2", user="u1",
               consumer_type="INSTANCE").status == 204
    assert put(client, consumers["vm3"], {cn1: {"VCPU": 1}, shared: {"DISK_GB": 50}},
               version=LATEST, project="p1", user="u2", consumer_type="INSTANCE").status == 204
    assert put(client, consumers["mig"], {numa1: {"PCPU": 1}}, version=LATEST,
               project="p2", user="u2", consumer_type="MIGRATION").status == 204
    return {"cn1": cn1, "numa0": numa0, "numa1": numa1, "cn2": cn2, "shared": shared,
            **consumers}


def _flatten(trees: list[dict]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    stack = list(trees)
    while stack:
        node = stack.pop()
        found[node["uuid"]] = node
        stack.extend(node["children"])
    return found


# -- off by default, the page, the assets ---------------------------------------

def test_off_by_default_is_an_unknown_path(client):
    unknown = client.get("/no-such-path")
    for path in ("/dashboard", "/dashboard/", "/dashboard/static/dashboard.js",
                 "/dashboard/api/providers", "/dashboard/api/summary",
                 f"/dashboard/api/consumers/{uuid.uuid4()}"):
        resp = client.get(path)
        assert resp.status == 404, (path, resp)
        assert resp.headers.get("vary") == unknown.headers.get("vary")
        error, expected = resp.json()["errors"][0], unknown.json()["errors"][0]
        assert {k: v for k, v in error.items() if k != "request_id"} == {
            k: v for k, v in expected.items() if k != "request_id"}
        # Without a token: what any unknown path answers without one.
        assert client.get(path, token=None).status == 401


def test_page_and_assets_need_no_token(dash):
    page = dash.get("/dashboard", token=None, headers={"Accept": "text/html"})
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert 'src="/dashboard/static/dashboard.js"' in page.text
    assert 'data-auth="noauth2"' in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "http" not in page.text.split("<body", 1)[0].replace("http-equiv", "")
    script = dash.get("/dashboard/static/dashboard.js", token=None)
    assert script.status == 200 and script.headers["content-type"].startswith("text/javascript")
    # The page's module imports the others; they are served the same way.
    assert 'type="module"' in page.text
    for module in ("common.js", "history.js"):
        assert f'from "./{module}"' in script.text
        served = dash.get(f"/dashboard/static/{module}", token=None)
        assert served.status == 200, (module, served)
        assert served.headers["content-type"].startswith("text/javascript")
    style = dash.get("/dashboard/static/dashboard.css", token=None)
    assert style.status == 200 and style.headers["content-type"].startswith("text/css")
    assert dash.get("/dashboard/static/dashboard.css", token=None,
                    headers={"If-None-Match": style.headers["etag"]}).status == 304
    # Compressed when asked (the test client decodes text, so the app is called directly).
    env = falcon.testing.create_environ(path="/dashboard/static/dashboard.js",
                                        headers={"Accept-Encoding": "gzip"})
    start = falcon.testing.StartResponseMock()
    zipped = b"".join(dash._app(env, start))
    assert dict(start.headers)["content-encoding"] == "gzip"
    assert gzip.decompress(zipped).decode() == script.text
    head = dash.request("HEAD", "/dashboard", token=None)
    assert head.status == 200 and head.text == ""
    # Under a prefix (SCRIPT_NAME), the page asks for its assets and data there.
    env = falcon.testing.create_environ(path="/dashboard", root_path="/placement")
    start = falcon.testing.StartResponseMock()
    prefixed = b"".join(dash._app(env, start)).decode()
    assert 'src="/placement/dashboard/static/dashboard.js"' in prefixed
    assert 'data-root="/placement"' in prefixed
    # Nothing else is served without a token: other names go on to authentication.
    assert dash.get("/dashboard/static/../policy.py", token=None).status == 401
    assert dash.get("/dashboard/static/index.html", token=None).status == 401
    assert dash.post("/dashboard", {}, token=None).status == 401


def test_page_names_the_auth_strategy(database):
    """With Keystone the page asks for a Keystone token (the page, not the data)."""
    conf = make_conf(database.url, allotment__dashboard=True, api__auth_strategy="keystone")
    page = DashboardPage(lambda environ, start: [], conf)
    start = falcon.testing.StartResponseMock()
    body = b"".join(page(falcon.testing.create_environ(path="/dashboard"), start)).decode()
    assert start.status == "200 OK" and 'data-auth="keystone"' in body


# -- the numbers ----------------------------------------------------------------

def test_provider_trees_match_the_api(dash):
    cloud = _cloud(dash)
    resp = dash.get("/dashboard/api/providers")
    assert resp.status == 200 and resp.headers["cache-control"] == "no-store"
    body = resp.json()
    assert body["total"] == 3 and body["offset"] == 0
    assert [tree["name"] for tree in body["trees"]] == ["a-shared-disk", "cn1", "cn2"]
    cn1 = body["trees"][1]
    assert [child["name"] for child in cn1["children"]] == ["cn1-numa0", "cn1-numa1"]
    nodes = _flatten(body["trees"])
    assert set(nodes) == {cloud[k] for k in ("cn1", "numa0", "numa1", "cn2", "shared")}
    for rp_uuid, node in nodes.items():
        api_provider = dash.get(f"/resource_providers/{rp_uuid}", version=LATEST).json()
        assert node["name"] == api_provider["name"]
        assert node["generation"] == api_provider["generation"]
        assert node["parent_provider_uuid"] == api_provider["parent_provider_uuid"]
        assert node["root_provider_uuid"] == api_provider["root_provider_uuid"]
        inventories = dash.get(f"/resource_providers/{rp_uuid}/inventories").json()
        used = dash.get(f"/resource_providers/{rp_uuid}/usages").json()["usages"]
        assert set(node["inventories"]) == set(inventories["inventories"])
        for rc, record in inventories["inventories"].items():
            shown = node["inventories"][rc]
            assert {k: shown[k] for k in record} == record
            assert shown["used"] == used[rc]
            assert shown["capacity"] == capacity.capacity(
                record["total"], record["reserved"], record["allocation_ratio"])
        traits = dash.get(f"/resource_providers/{rp_uuid}/traits",
                          version=LATEST).json()["traits"]
        assert node["traits"] == sorted(traits)
        aggregates = dash.get(f"/resource_providers/{rp_uuid}/aggregates",
                              version=LATEST).json()["aggregates"]
        assert node["aggregates"] == sorted(aggregates)
    assert nodes[cloud["cn1"]]["inventories"]["VCPU"]["capacity"] == 56  # (16-2)*4
    assert nodes[cloud["cn1"]]["inventories"]["VCPU"]["used"] == 5


def test_provider_paging_and_search(dash):
    names = [f"host-{n:02d}" for n in range(7)]
    for name in reversed(names):
        provider_with(dash, name, VCPU=4)
    child_parent = dash.get("/resource_providers?name=host-03").json()["resource_providers"][0]
    dash.create_provider("host-03-gpu_x", parent=child_parent["uuid"])
    seen = []
    for offset in (0, 3, 6):
        body = dash.get(f"/dashboard/api/providers?limit=3&offset={offset}").json()
        assert body["total"] == 7 and body["limit"] == 3 and body["offset"] == offset
        seen += [tree["name"] for tree in body["trees"]]
    assert seen == names
    assert dash.get("/dashboard/api/providers?limit=3&offset=9").json()["trees"] == []
    # A provider's name part (any case, wildcards literal) finds its tree.
    found = dash.get("/dashboard/api/providers?q=GPU_X").json()
    assert found["total"] == 1 and found["trees"][0]["name"] == "host-03"
    assert dash.get("/dashboard/api/providers?q=gpu%25").json()["total"] == 0
    by_uuid = dash.get(f"/dashboard/api/providers?q={child_parent['uuid'].upper()}").json()
    assert [tree["uuid"] for tree in by_uuid["trees"]] == [child_parent["uuid"]]
    assert dash.get("/dashboard/api/providers?q=host-0").json()["total"] == 7
    roots = dash.get(f"/dashboard/api/providers?roots={child_parent['uuid']},"
                     f"{uuid.uuid4()}").json()
    assert [tree["name"] for tree in roots["trees"]] == ["host-03"]
    for bad in ("limit=-1", "limit=x", "limit=501", "offset=1.5", "limit=%C2%B2"):
        resp = dash.get(f"/dashboard/api/providers?{bad}")
        assert resp.status == 400, (bad, resp)


def test_wide_trees_come_a_part_at_a_time(dash, monkeypatch):
    monkeypatch.setattr(overview, "CHILDREN_SHOWN", 3)
    root = provider_with(dash, "wide", VCPU=8)
    kids = {f"wide-{n}": provider_with(dash, f"wide-{n}", parent=root, PCPU=n + 1)
            for n in reversed(range(7))}
    for name in ("g1", "g0"):
        dash.create_provider(f"wide-0-{name}", parent=kids["wide-0"])
    tree = dash.get("/dashboard/api/providers").json()["trees"][0]
    assert tree["child_count"] == 7
    assert [c["name"] for c in tree["children"]] == ["wide-0", "wide-1", "wide-2"]
    assert [g["name"] for g in tree["children"][0]["children"]] == ["wide-0-g0", "wide-0-g1"]
    assert tree["children"][0]["child_count"] == 2
    assert tree["children"][2]["inventories"]["PCPU"]["capacity"] == 3
    names = []
    for offset in (3, 6):
        page = dash.get(f"/dashboard/api/providers/{root}/children?limit=3&offset={offset}")
        assert page.status == 200
        assert page.json()["total"] == 7
        names += [c["name"] for c in page.json()["children"]]
    assert names == ["wide-3", "wide-4", "wide-5", "wide-6"]
    grand = dash.get(f"/dashboard/api/providers/{kids['wide-0']}/children").json()
    assert [g["name"] for g in grand["children"]] == ["wide-0-g0", "wide-0-g1"]
    assert grand["children"][0]["child_count"] == 0
    # An answer holds at most MOST_NODES providers; child_count says what is left out.
    monkeypatch.setattr(overview, "MOST_NODES", 5)
    tree = dash.get("/dashboard/api/providers").json()["trees"][0]
    assert len(_flatten([tree])) == 5
    assert [len(c["children"]) for c in tree["children"]] == [1, 0, 0]
    missing = str(uuid.uuid4())
    resp = dash.get(f"/dashboard/api/providers/{missing}/children")
    assert resp.status == 404 and missing in resp.detail


def test_summary_matches_the_api(dash):
    cloud = _cloud(dash)
    body = dash.get("/dashboard/api/summary").json()
    assert (body["providers"], body["trees"], body["consumers"]) == (5, 3, 4)
    expected: dict[str, dict[str, int]] = {}
    for rp in dash.get("/resource_providers").json()["resource_providers"]:
        inventories = dash.get(f"/resource_providers/{rp['uuid']}/inventories").json()
        used = dash.get(f"/resource_providers/{rp['uuid']}/usages").json()["usages"]
        for rc, record in inventories["inventories"].items():
            entry = expected.setdefault(rc, {"total": 0, "reserved": 0, "capacity": 0,
                                             "used": 0, "providers": 0})
            entry["total"] += record["total"]
            entry["reserved"] += record["reserved"]
            entry["capacity"] += capacity.capacity(record["total"], record["reserved"],
                                                   record["allocation_ratio"])
            entry["used"] += used[rc]
            entry["providers"] += 1
    assert body["totals"] == expected
    # cn2 is full on VCPU (8 of 8); the shared disk the emptiest (50 of 2000).
    assert body["fullest"][0]["uuid"] == cloud["cn2"]
    assert body["fullest"][0]["fullness"] == 1.0
    assert body["fullest"][0]["resource_class"] == "VCPU"
    assert body["emptiest"][0]["uuid"] == cloud["shared"]
    assert (body["emptiest"][0]["used"], body["emptiest"][0]["capacity"]) == (50, 2000)
    numa0 = next(e for e in body["fullest"] if e["uuid"] == cloud["numa0"])
    assert numa0["root_provider_name"] == "cn1" and numa0["name"] == "cn1-numa0"
    # By one class only, and a limit.
    disk = dash.get("/dashboard/api/summary?limit=1&resource_class=DISK_GB").json()
    assert [e["uuid"] for e in disk["fullest"]] == [cloud["cn2"]]
    assert [e["uuid"] for e in disk["emptiest"]] == [cloud["shared"]]
    assert dash.get("/dashboard/api/summary?resource_class=NOPE").json()["fullest"] == []


def test_usage_per_project_and_type_match_the_api(dash):
    _cloud(dash)
    body = dash.get("/dashboard/api/projects").json()
    assert body["total"] == 2
    assert [p["project_id"] for p in body["projects"]] == ["p1", "p2"]
    for entry in body["projects"]:
        api = dash.get(f"/usages?project_id={entry['project_id']}&consumer_type=all",
                       version=LATEST).json()["usages"]["all"]
        assert entry["consumer_count"] == api.pop("consumer_count")
        assert entry["usages"] == api
    page = dash.get("/dashboard/api/projects?limit=1&offset=1").json()
    assert page["total"] == 2 and [p["project_id"] for p in page["projects"]] == ["p2"]

    types = dash.get("/dashboard/api/consumer_types").json()["consumer_types"]
    expected: dict[str, dict[str, int]] = {}
    for project in ("p1", "p2"):
        per_type = dash.get(f"/usages?project_id={project}", version=LATEST).json()["usages"]
        for type_name, amounts in per_type.items():
            entry = expected.setdefault(type_name, {})
            for key, value in amounts.items():
                entry[key] = entry.get(key, 0) + value
    assert types == expected
    assert types["MIGRATION"] == {"PCPU": 1, "consumer_count": 1}


def test_consumer_matches_the_api(dash):
    cloud = _cloud(dash)
    body = dash.get(f"/dashboard/api/consumers/{cloud['vm1']}").json()
    api = dash.get(f"/allocations/{cloud['vm1']}", version=LATEST).json()
    assert body["consumer_generation"] == api["consumer_generation"]
    assert (body["project_id"], body["user_id"], body["consumer_type"]) == (
        api["project_id"], api["user_id"], api["consumer_type"])
    assert {rp: entry["resources"] for rp, entry in body["allocations"].items()} == {
        rp: entry["resources"] for rp, entry in api["allocations"].items()}
    numa0 = body["allocations"][cloud["numa0"]]
    assert (numa0["name"], numa0["root_provider_name"]) == ("cn1-numa0", "cn1")
    missing = str(uuid.uuid4())
    assert dash.get(f"/dashboard/api/consumers/{missing}").json() == {
        "consumer_uuid": missing, "allocations": {}}


def test_provider_names(dash):
    cloud = _cloud(dash)
    gone = str(uuid.uuid4())
    # Any case, spaces and repeats; a uuid no provider has is left out.
    asked = f"{cloud['numa0'].upper()}, {cloud['cn2']},{cloud['cn2']},{gone},"
    body = dash.get(f"/dashboard/api/provider_names?uuids={asked}").json()
    assert body == {"providers": {
        cloud["numa0"]: {"name": "cn1-numa0", "root_provider_uuid": cloud["cn1"],
                         "root_provider_name": "cn1"},
        cloud["cn2"]: {"name": "cn2", "root_provider_uuid": cloud["cn2"],
                       "root_provider_name": "cn2"}}}
    assert dash.get("/dashboard/api/provider_names").json() == {"providers": {}}
    many = ",".join(str(uuid.uuid4()) for _ in range(MAX_NAMES + 1))
    resp = dash.get(f"/dashboard/api/provider_names?uuids={many}")
    assert resp.status == 400, resp
    assert "at most" in resp.json()["errors"][0]["detail"]


# -- policy -----------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/dashboard/api/providers", "/dashboard/api/summary",
                                  "/dashboard/api/providers/{rp}/children",
                                  "/dashboard/api/projects", "/dashboard/api/consumer_types",
                                  f"/dashboard/api/consumers/{uuid.uuid4()}",
                                  "/dashboard/api/provider_names?uuids={rp}"])
def test_policy(dash, path):
    """Upstream's rules for the same data (every identity kind: test_who_may_read.py):
    admin and service; a project reader only its own project's usage."""
    path = path.format(rp=dash.create_provider("rp")["uuid"])
    assert dash.get(path, token=None).status == 401
    assert dash.get(path).status == 200  # admin
    assert as_roles(dash, "service").get(path).status == 200
    own_usage = path == "/dashboard/api/projects"
    for roles in ("reader", "member,reader"):
        assert as_roles(dash, roles).get(path).status == (200 if own_usage else 403)
    refused = as_roles(dash, "member").get(path)
    assert refused.status == 403
    assert "allotment:dashboard:" in refused.detail
    # A system-scoped token is refused, as by every API rule.
    assert as_roles(dash, "reader", **{"OpenStack-System-Scope": "all"}).get(path).status == 403


def test_policy_file_can_narrow_the_dashboard(database, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text('"allotment:dashboard:usages": "role:admin"\n')
    ini = tmp_path / "placement.conf"
    ini.write_text(f"[api]\nauth_strategy = noauth2\n[allotment]\ndashboard = True\n"
                   f"[placement_database]\nconnection = {database.url}\n"
                   f"[oslo_policy]\npolicy_file = {policy}\n")
    conf = config.load([str(ini)])
    app = PlacementClient(make_app(conf, db=database.db, prepare=False))
    assert as_roles(app, "service").get("/dashboard/api/projects").status == 403
    assert as_roles(app, "reader").get("/dashboard/api/projects").status == 403
    assert as_roles(app, "service").get("/dashboard/api/providers").status == 200
    assert app.get("/dashboard/api/projects").status == 200


@pytest.mark.parametrize("path", ["/dashboard/api/providers?q=%00",
                                  "/dashboard/api/providers?roots=%00",
                                  "/dashboard/api/provider_names?uuids=%00",
                                  "/dashboard/api/summary?resource_class=%00"])
def test_a_nul_in_text_is_a_400(dash, path):
    # PostgreSQL refuses NUL in a string: this was a 500 there. Every query
    # string is checked once, in http.request.Query.
    resp = dash.get(path)
    assert resp.status == 400, resp
    assert "NUL character" in resp.json()["errors"][0]["detail"]
