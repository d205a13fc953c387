"""Who may read allotment's own data: never more than upstream's rule for the same data.

Each identity kind sends every allotment-only read (the dashboard's JSON API,
/metrics, the history, the audit) and the upstream request that guards the
same data (``allotment.policy.mirrored_routes()``: route -> upstream rule;
``PROBES`` below: upstream rule -> a request of upstream's API), to the same
application. A dashboard route answers exactly as its upstream request does
(403 vs 200); the admin-only routes never allow an identity that upstream
refuses. Where the answer is filtered (usage per project), each reader gets its
own project alone, the numbers ``GET /usages`` gives it.

In-process with noauth2 identity headers, on every backend; the same through
keystonemiddleware and a fake Keystone is in tests/test_auth_keystone.py.
"""

from __future__ import annotations

import uuid

import pytest

from allotment import config
from allotment.policy import API_RULES, mirrored_routes
from allotment.wsgi import make_app
from tests.support.claims_support import provider_with, put
from tests.support.client import PlacementClient, Response

LATEST = "1.39"
A, B, C = "p1", "p2", "p3"  # projects: A and B hold allocations, C none

# Identity kind -> the headers of a noauth2 request (None: no token at all).
IDENTITIES: dict[str, dict[str, str] | None] = {
    "no_token": None,
    "project_reader_a": {"X-Roles": "reader", "X-Project-Id": A},
    "project_member_a": {"X-Roles": "member,reader", "X-Project-Id": A},
    "project_admin_a": {"X-Roles": "admin,member,reader", "X-Project-Id": A},
    "project_reader_b": {"X-Roles": "reader", "X-Project-Id": B},
    "project_reader_c": {"X-Roles": "reader", "X-Project-Id": C},
    "system_reader": {"X-Roles": "reader", "OpenStack-System-Scope": "all"},
    "system_admin": {"X-Roles": "admin,member,reader", "OpenStack-System-Scope": "all"},
    "service": {"X-Roles": "service", "X-Project-Id": "service"},
}
ADMIN_AND_SERVICE = {"project_admin_a", "service"}
PROJECT_READERS = {"project_reader_a", "project_member_a", "project_reader_b",
                   "project_reader_c"}

# Upstream rule -> the request of upstream's API it guards ({own}: the caller's
# project; {consumer}, {rp}: what the cloud below holds).
PROBES: dict[str, str] = {
    "placement:resource_providers:list": "/resource_providers",
    "placement:allocations:list": "/allocations/{consumer}",
    "placement:resource_providers:inventories:list": "/resource_providers/{rp}/inventories",
    # Checked for the caller's own project, and for one it is not in (every project).
    "placement:usages": "/usages?project_id={own}",
    "placement:usages@every_project": "/usages?project_id=not-the-callers-project",
}

# Allotment route (the path this test sends) -> (method, URI template), the
# key of mirrored_routes(); and the upstream probe key where it is not the rule.
ROUTES: dict[str, tuple[str, str]] = {
    "/dashboard/api/providers": ("GET", "/dashboard/api/providers"),
    "/dashboard/api/providers/{rp}/children":
        ("GET", "/dashboard/api/providers/{uuid}/children"),
    "/dashboard/api/provider_names?uuids={rp}": ("GET", "/dashboard/api/provider_names"),
    "/dashboard/api/summary": ("GET", "/dashboard/api/summary"),
    "/dashboard/api/projects": ("GET", "/dashboard/api/projects"),
    "/dashboard/api/consumer_types": ("GET", "/dashboard/api/consumer_types"),
    "/dashboard/api/consumers/{consumer}":
        ("GET", "/dashboard/api/consumers/{consumer_uuid}"),
    "/history/allocations": ("GET", "/history/allocations"),
    "/history/inventories": ("GET", "/history/inventories"),
    "/audit/allocations": ("GET", "/audit/allocations"),
    "/metrics": ("GET", "/metrics"),
}
EVERY_PROJECT = {"/dashboard/api/consumer_types"}
# The routes whose default is narrower than the upstream rule (admin only).
ADMIN_ONLY = {"/history/allocations", "/history/inventories", "/audit/allocations",
              "/metrics"}

# What each identity gets by default: the allowed ones, per route.
EXPECTED_ALLOWED: dict[str, set[str]] = {
    **{path: ADMIN_AND_SERVICE for path in ROUTES if path not in ADMIN_ONLY},
    "/dashboard/api/projects": ADMIN_AND_SERVICE | PROJECT_READERS,
    **{path: {"project_admin_a"} for path in ADMIN_ONLY},
}


def as_identity(app, identity: str) -> PlacementClient:
    headers = IDENTITIES[identity]
    return PlacementClient(app, token=None if headers is None else "someone",
                           version=LATEST, headers=headers)


def _app(database, tmp_path, mode: str = "secure", policy_yaml: str = "{}\n"):
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy_yaml)
    ini = tmp_path / "placement.conf"
    ini.write_text(f"[api]\nauth_strategy = noauth2\n"
                   f"[allotment]\ndashboard = True\nmetrics = True\n"
                   f"[placement_database]\nconnection = {database.url}\n"
                   f"[oslo_policy]\nenforce_new_defaults = {mode == 'secure'}\n"
                   f"policy_file = {policy_file}\n")
    return make_app(config.load([str(ini)]), db=database.db, prepare=False)


def _cloud(admin: PlacementClient) -> dict[str, str]:
    """A tree and a lone provider; consumers of projects A and B."""
    cn1 = provider_with(admin, "secret-cn1", VCPU=16, MEMORY_MB=4096)
    numa = provider_with(admin, "secret-cn1-numa0", parent=cn1, PCPU=8)
    cn2 = provider_with(admin, "secret-cn2", VCPU=8)
    consumers = {"vm_a": str(uuid.uuid4()), "vm_b": str(uuid.uuid4())}
    assert put(admin, consumers["vm_a"], {cn1: {"VCPU": 2}, numa: {"PCPU": 1}},
               version=LATEST, project=A, user="ua", consumer_type="INSTANCE").status == 204
    assert put(admin, consumers["vm_b"], {cn2: {"VCPU": 4}}, version=LATEST, project=B,
               user="ub", consumer_type="INSTANCE").status == 204
    return {"rp": cn1, "consumer": consumers["vm_b"], **consumers}


def _own_project(identity: str) -> str:
    headers = IDENTITIES[identity] or {}
    return headers.get("X-Project-Id", "none")


def _decision(resp: Response) -> str:
    assert resp.status in (200, 401, 403), resp
    return {200: "allowed", 401: "no token", 403: "refused"}[resp.status]


def _leaks(resp: Response) -> bool:
    return resp.status != 200 and "secret-" in resp.text


@pytest.fixture
def app(database, tmp_path):
    return _app(database, tmp_path)


def test_every_allotment_read_names_its_upstream_rule():
    """The table tests, docs and the Keystone test read: every allotment-only GET."""
    mirrored = mirrored_routes()
    assert set(mirrored) == set(ROUTES.values())
    assert set(mirrored.values()) <= {key.split("@")[0] for key in PROBES}
    upstream_names = {rule.name for rule in API_RULES if rule.upstream is None}
    assert set(mirrored.values()) <= upstream_names
    # A dashboard rule's default is the upstream rule itself.
    for rule in API_RULES:
        if rule.name.startswith("allotment:dashboard:"):
            assert rule.check_str == f"rule:{rule.upstream}"


@pytest.mark.parametrize("mode", ["secure", "legacy"])
def test_each_identity_reads_no_more_than_upstream_allows(database, tmp_path, mode):
    app = _app(database, tmp_path, mode)
    cloud = _cloud(PlacementClient(app, version=LATEST))
    mirrored = mirrored_routes()
    got: dict[tuple[str, str], str] = {}
    for identity in IDENTITIES:
        client = as_identity(app, identity)
        ctx = {**cloud, "own": _own_project(identity)}
        for path, key in ROUTES.items():
            probe = mirrored[key] + ("@every_project" if path in EVERY_PROJECT else "")
            ours = client.get(path.format(**ctx))
            theirs = client.get(PROBES[probe].format(**ctx))
            assert not _leaks(ours), (identity, path, ours)
            decision, upstream = _decision(ours), _decision(theirs)
            got[(identity, path)] = decision
            if path in ADMIN_ONLY:
                assert decision != "allowed" or upstream == "allowed", (identity, path)
            else:
                assert decision == upstream, (identity, path, decision, upstream)
    expected = {(identity, path): "no token" if IDENTITIES[identity] is None
                else "allowed" if identity in EXPECTED_ALLOWED[path] else "refused"
                for identity in IDENTITIES for path in ROUTES}
    assert got == expected


def test_a_project_reader_sees_its_own_projects_usage_alone(app):
    admin = PlacementClient(app, version=LATEST)
    _cloud(admin)
    every = admin.get("/dashboard/api/projects").json()
    assert [p["project_id"] for p in every["projects"]] == [A, B] and every["total"] == 2
    for identity, project in (("project_reader_a", A), ("project_member_a", A),
                              ("project_reader_b", B)):
        client = as_identity(app, identity)
        body = client.get("/dashboard/api/projects").json()
        assert body["total"] == 1 and [p["project_id"] for p in body["projects"]] == [project]
        api = client.get(f"/usages?project_id={project}&consumer_type=all").json()[
            "usages"]["all"]
        assert body["projects"][0]["consumer_count"] == api.pop("consumer_count")
        assert body["projects"][0]["usages"] == api
        assert client.get("/dashboard/api/projects?offset=1").json() == {
            "total": 1, "limit": body["limit"], "offset": 1, "projects": []}
    # A reader of a project holding nothing: nothing, and no other project.
    assert as_identity(app, "project_reader_c").get("/dashboard/api/projects").json()[
        "projects"] == []
    # The cloud-wide views stay refused to them.
    for path in ("/dashboard/api/consumer_types", "/dashboard/api/summary",
                 "/dashboard/api/providers"):
        assert as_identity(app, "project_reader_a").get(path).status == 403


def test_widening_the_upstream_rule_widens_the_dashboard(database, tmp_path):
    """The dashboard's defaults are the upstream rules: an operator's change to one
    (here: readers may list providers) is the dashboard's change too."""
    app = _app(database, tmp_path, policy_yaml=(
        '"placement:resource_providers:list": "role:admin or role:service or role:reader"\n'))
    cloud = _cloud(PlacementClient(app, version=LATEST))
    reader = as_identity(app, "project_reader_a")
    assert reader.get("/resource_providers").status == 200
    assert reader.get("/dashboard/api/providers").status == 200
    assert reader.get(f"/dashboard/api/providers/{cloud['rp']}/children").status == 200
    assert reader.get("/dashboard/api/consumers/" + cloud["vm_b"]).status == 403


# The worked example of doc/source/operating/access.md, as an operator writes it.
OPERATIONS_READER_POLICY = """\
"ops_reader": "role:ops_reader"
"allotment:dashboard:providers": "rule:placement:resource_providers:list or rule:ops_reader"
"allotment:dashboard:usages": "rule:placement:usages or rule:ops_reader"
"allotment:dashboard:consumers": "rule:placement:allocations:list or rule:ops_reader"
"allotment:metrics": "role:admin or rule:ops_reader"
"""


def test_an_operations_read_role_in_policy_yaml(database, tmp_path):
    app = _app(database, tmp_path, policy_yaml=OPERATIONS_READER_POLICY)
    cloud = _cloud(PlacementClient(app, version=LATEST))
    ops = PlacementClient(app, token="ops:ops-project", version=LATEST)
    headers = {"X-Roles": "ops_reader,reader"}
    for path in ("/dashboard/api/providers", "/dashboard/api/summary",
                 "/dashboard/api/consumer_types", f"/dashboard/api/consumers/{cloud['vm_a']}",
                 "/metrics"):
        assert ops.get(path, headers=headers).status == 200, path
    projects = ops.get("/dashboard/api/projects", headers=headers).json()["projects"]
    assert [p["project_id"] for p in projects] == [A, B]
    # Only the dashboard: upstream's API and the history stay as they were.
    for path in ("/resource_providers", f"/allocations/{cloud['vm_a']}",
                 "/history/allocations", "/audit/allocations"):
        assert ops.get(path, headers=headers).status == 403, path
    # And a plain reader is still a plain reader.
    assert as_identity(app, "project_reader_a").get("/dashboard/api/providers").status == 403


def test_the_docs_name_every_rule_and_carry_the_worked_example():
    from pathlib import Path

    text = (Path(__file__).parent.parent / "doc" / "source" / "operating" / "access.md").read_text()
    assert OPERATIONS_READER_POLICY in text
    for rule in API_RULES:
        if rule.upstream is not None:
            assert f"`{rule.name}`" in text and f"`{rule.upstream}`" in text, rule.name
            for _method, path in rule.operations:
                assert path.rsplit("/", 1)[-1] in text, path
