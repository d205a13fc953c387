"""Policy: every endpoint and method, for every persona, in both policy modes.

Each row of ``ROWS`` is one endpoint and method with the rule guarding it;
``ALLOWED`` says which personas each rule admits in each mode (derived from
the published defaults, ``DEFAULTS`` below). A row runs once its route is in
``allotment.wsgi.ROUTES`` (and the routes its set-up needs), so endpoints
join the table as they are built.

Policy is decided before any SQL, so the table runs on SQLite only; the
other tests of the module use every backend.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa

from allotment import config
from allotment.db import tables as t
from allotment.policy import API_RULES, BASE_RULES, Policy, list_rules
from allotment.wsgi import ROUTES, make_app
from tests.conftest import _backends
from tests.support.client import PlacementClient

LATEST = "1.39"
PROJECT = "9520f97991e94f30a8dd205ef3ce735a"
OTHER_PROJECT = "b1f1c4de8a5e4d8a9c3f0f6fb3a3d7e2"
USER = "6d3b1c0e2a7f4c1d9e8b7a6f5e4d3c2b"

# Rule name -> default check string: upstream's published policy defaults.
DEFAULTS = {
    "admin_api": "role:admin",
    "service_api": "role:service",
    "admin_or_service_api": "role:admin or role:service",
    "project_reader_api": "role:reader and project_id:%(project_id)s",
    "admin_or_project_reader_or_service_api":
        "role:admin or rule:project_reader_api or role:service",
    **{name: "rule:admin_or_service_api" for name in (
        "placement:resource_providers:list",
        "placement:resource_providers:create",
        "placement:resource_providers:show",
        "placement:resource_providers:update",
        "placement:resource_providers:delete",
        "placement:resource_classes:list",
        "placement:resource_classes:create",
        "placement:resource_classes:show",
        "placement:resource_classes:update",
        "placement:resource_classes:delete",
        "placement:resource_providers:inventories:list",
        "placement:resource_providers:inventories:create",
        "placement:resource_providers:inventories:show",
        "placement:resource_providers:inventories:update",
        "placement:resource_providers:inventories:delete",
        "placement:resource_providers:aggregates:list",
        "placement:resource_providers:aggregates:update",
        "placement:resource_providers:usages",
        "placement:traits:list",
        "placement:traits:show",
        "placement:traits:update",
        "placement:traits:delete",
        "placement:resource_providers:traits:list",
        "placement:resource_providers:traits:update",
        "placement:resource_providers:traits:delete",
        "placement:allocations:manage",
        "placement:allocations:list",
        "placement:allocations:update",
        "placement:allocations:delete",
        "placement:resource_providers:allocations:list",
        "placement:allocation_candidates:list",
    )},
    "placement:usages": "rule:admin_or_project_reader_or_service_api",
    "placement:reshaper:reshape": "rule:service_api",
    # Ours, not upstream's: the dashboard's read-only views, each the upstream
    # rule guarding the same data.
    "allotment:dashboard:providers": "rule:placement:resource_providers:list",
    "allotment:dashboard:usages": "rule:placement:usages",
    "allotment:dashboard:consumers": "rule:placement:allocations:list",
    # Ours: the history, admins only.
    "allotment:history:allocations": "role:admin",
    "allotment:history:inventories": "role:admin",
    # Ours: the audit, admin only.
    "allotment:audit:allocations": "role:admin",
    # Ours: /metrics on the API's address, admin only.
    "allotment:metrics": "role:admin",
}

# The personas of upstream's RBAC tests: (X-Roles, X-Project-Id, system scope).
PERSONAS: dict[str, dict[str, str] | None] = {
    "admin": {"X-Roles": "admin", "X-Project-Id": "admin_project_id"},
    "service": {"X-Roles": "service", "X-Project-Id": "service_project_id"},
    "system_admin": {"X-Roles": "admin,member,reader", "OpenStack-System-Scope": "all"},
    "system_reader": {"X-Roles": "reader", "OpenStack-System-Scope": "all"},
    "project_admin": {"X-Roles": "admin,member,reader", "X-Project-Id": PROJECT},
    "project_member": {"X-Roles": "member,reader", "X-Project-Id": PROJECT},
    "project_reader": {"X-Roles": "reader", "X-Project-Id": PROJECT},
    "other_project_reader": {"X-Roles": "reader", "X-Project-Id": OTHER_PROJECT},
    "no_token": None,
}

ADMINS_AND_SERVICE = {"admin", "service", "project_admin"}
# rule -> mode -> personas allowed. System-scoped personas never pass: every
# API rule is scoped to projects. Legacy mode ORs "role:admin" into the base
# rules, which only changes the service-only reshaper.
ALLOWED: dict[str, dict[str, set[str]]] = {
    "rule:admin_or_service_api": {"secure": ADMINS_AND_SERVICE,
                                  "legacy": ADMINS_AND_SERVICE},
    "rule:service_api": {"secure": {"service"}, "legacy": ADMINS_AND_SERVICE},
    # The row's target project is PROJECT.
    "rule:admin_or_project_reader_or_service_api": {
        "secure": ADMINS_AND_SERVICE | {"project_member", "project_reader"},
        "legacy": ADMINS_AND_SERVICE | {"project_member", "project_reader"},
    },
    # The dashboard: the upstream rules, through "rule:<name>".
    "rule:placement:resource_providers:list": {"secure": ADMINS_AND_SERVICE,
                                               "legacy": ADMINS_AND_SERVICE},
    "rule:placement:allocations:list": {"secure": ADMINS_AND_SERVICE,
                                        "legacy": ADMINS_AND_SERVICE},
    # Checked for the caller's own project (each reader sees its own alone) ...
    "rule:placement:usages": {
        mode: ADMINS_AND_SERVICE | {"project_member", "project_reader",
                                    "other_project_reader"}
        for mode in ("secure", "legacy")},
    # ... or for every project at once: no reader.
    "rule:placement:usages@every_project": {"secure": ADMINS_AND_SERVICE,
                                            "legacy": ADMINS_AND_SERVICE},
    # The history and the audit: an admin of any project, in both modes; never a
    # service or a reader.
    "role:admin": {mode: {"admin", "project_admin"} for mode in ("secure", "legacy")},
}


def expected_status(rule: str, mode: str, persona: str, success: int,
                    target: str = "") -> int:
    if PERSONAS[persona] is None:
        return 401
    return success if persona in ALLOWED[DEFAULTS[rule] + target][mode] else 403


# -- set-up of what a row acts on (through the API, as the admin) ----------

def _custom(prefix: str = "CUSTOM_") -> str:
    return prefix + uuid.uuid4().hex.upper()


def _provider(admin: PlacementClient) -> dict:
    rp = admin.create_provider(_custom("rp-"))
    return {"rp": rp["uuid"], "generation": rp["generation"]}


def _inventory(admin: PlacementClient) -> dict:
    ctx = _provider(admin)
    resp = admin.put(f"/resource_providers/{ctx['rp']}/inventories",
                     {"resource_provider_generation": ctx["generation"],
                      "inventories": {"VCPU": {"total": 1000}}}, version=LATEST)
    assert resp.status == 200, resp
    ctx["generation"] = resp.json()["resource_provider_generation"]
    return ctx


def _claim(rp: str) -> dict:
    return {"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": PROJECT,
            "user_id": USER, "consumer_generation": None, "consumer_type": "INSTANCE"}


def _allocation(admin: PlacementClient) -> dict:
    ctx = _inventory(admin)
    ctx["consumer"] = str(uuid.uuid4())
    resp = admin.put(f"/allocations/{ctx['consumer']}", _claim(ctx["rp"]), version=LATEST)
    assert resp.status == 204, resp
    return ctx


def _resource_class(admin: PlacementClient) -> dict:
    name = _custom()
    assert admin.put(f"/resource_classes/{name}", version=LATEST).status == 201
    return {"rc": name}


def _trait(admin: PlacementClient) -> dict:
    name = _custom()
    assert admin.put(f"/traits/{name}", version=LATEST).status == 201
    return {"trait": name}


def _provider_and_trait(admin: PlacementClient) -> dict:
    return {**_provider(admin), **_trait(admin)}


def _nothing(_admin: PlacementClient) -> dict:
    return {"rc": _custom(), "trait": _custom(), "consumer": str(uuid.uuid4()),
            "std_rc": "VCPU"}


PREPARE_ROUTES: dict[Callable, list[str]] = {
    _nothing: [],
    _provider: ["/resource_providers"],
    _inventory: ["/resource_providers", "/resource_providers/{}/inventories"],
    _allocation: ["/resource_providers", "/resource_providers/{}/inventories",
                  "/allocations/{}"],
    _resource_class: ["/resource_classes/{}"],
    _trait: ["/traits/{}"],
    _provider_and_trait: ["/resource_providers", "/traits/{}"],
}


@dataclass
class Row:
    method: str
    path: str                      # str.format() with the prepared context
    rule: str
    success: int
    prepare: Callable[[PlacementClient], dict] = _nothing
    body: Callable[[dict], object] | None = None
    # The request uses up what was prepared (deletes it, moves a generation):
    # prepare again for each persona that may do it.
    fresh: bool = False
    # "@every_project": the rule is checked for every project at once.
    target: str = ""
    route: str = field(init=False)

    def __post_init__(self) -> None:
        self.route = re.sub(r"\{[^}]*\}", "{}", self.path.split("?")[0])

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


RP = "/resource_providers/{rp}"
ROWS = [
    Row("GET", "/resource_providers", "placement:resource_providers:list", 200),
    Row("POST", "/resource_providers", "placement:resource_providers:create", 200,
        body=lambda c: {"name": _custom("rp-")}),
    Row("GET", RP, "placement:resource_providers:show", 200, _provider),
    Row("PUT", RP, "placement:resource_providers:update", 200, _provider,
        body=lambda c: {"name": _custom("rp-")}),
    Row("DELETE", RP, "placement:resource_providers:delete", 204, _provider, fresh=True),
    Row("GET", "/resource_classes", "placement:resource_classes:list", 200),
    Row("POST", "/resource_classes", "placement:resource_classes:create", 201,
        body=lambda c: {"name": c["rc"]}),
    Row("GET", "/resource_classes/{rc}", "placement:resource_classes:show", 200,
        _resource_class),
    Row("PUT", "/resource_classes/{rc}", "placement:resource_classes:update", 201),
    Row("DELETE", "/resource_classes/{rc}", "placement:resource_classes:delete", 204,
        _resource_class, fresh=True),
    Row("GET", RP + "/inventories", "placement:resource_providers:inventories:list", 200,
        _inventory),
    Row("POST", RP + "/inventories", "placement:resource_providers:inventories:create",
        201, _provider, body=lambda c: {"resource_class": "VCPU", "total": 8}, fresh=True),
    Row("GET", RP + "/inventories/{std_rc}", "placement:resource_providers:inventories:show",
        200, _inventory),
    Row("PUT", RP + "/inventories", "placement:resource_providers:inventories:update",
        200, _inventory,
        body=lambda c: {"resource_provider_generation": c["generation"],
                        "inventories": {"VCPU": {"total": 500}}}, fresh=True),
    Row("PUT", RP + "/inventories/{std_rc}",
        "placement:resource_providers:inventories:update", 200, _inventory,
        body=lambda c: {"resource_provider_generation": c["generation"], "total": 500}, fresh=True),
    Row("DELETE", RP + "/inventories",
        "placement:resource_providers:inventories:delete", 204, _inventory, fresh=True),
    Row("DELETE", RP + "/inventories/{std_rc}",
        "placement:resource_providers:inventories:delete", 204, _inventory, fresh=True),
    Row("GET", RP + "/aggregates", "placement:resource_providers:aggregates:list", 200,
        _provider),
    Row("PUT", RP + "/aggregates", "placement:resource_providers:aggregates:update", 200,
        _provider,
        body=lambda c: {"aggregates": [str(uuid.uuid4())],
                        "resource_provider_generation": c["generation"]}, fresh=True),
    Row("GET", RP + "/usages", "placement:resource_providers:usages", 200, _provider),
    Row("GET", "/usages?project_id=" + PROJECT, "placement:usages", 200),
    Row("GET", "/traits", "placement:traits:list", 200),
    Row("GET", "/traits/{trait}", "placement:traits:show", 204, _trait),
    Row("PUT", "/traits/{trait}", "placement:traits:update", 201),
    Row("DELETE", "/traits/{trait}", "placement:traits:delete", 204, _trait, fresh=True),
    Row("GET", RP + "/traits", "placement:resource_providers:traits:list", 200,
        _provider),
    Row("PUT", RP + "/traits", "placement:resource_providers:traits:update", 200,
        _provider_and_trait,
        body=lambda c: {"traits": [c["trait"]],
                        "resource_provider_generation": c["generation"]}, fresh=True),
    Row("DELETE", RP + "/traits", "placement:resource_providers:traits:delete", 204,
        _provider),
    Row("POST", "/allocations", "placement:allocations:manage", 204, _inventory,
        body=lambda c: {str(uuid.uuid4()): _claim(c["rp"])}),
    Row("GET", "/allocations/{consumer}", "placement:allocations:list", 200, _allocation),
    Row("PUT", "/allocations/{consumer}", "placement:allocations:update", 204, _inventory,
        body=lambda c: _claim(c["rp"])),
    Row("DELETE", "/allocations/{consumer}", "placement:allocations:delete", 204,
        _allocation, fresh=True),
    Row("GET", RP + "/allocations", "placement:resource_providers:allocations:list", 200,
        _allocation),
    Row("GET", "/allocation_candidates?resources=VCPU:1",
        "placement:allocation_candidates:list", 200, _inventory),
    Row("POST", "/reshaper", "placement:reshaper:reshape", 204, _inventory,
        body=lambda c: {"inventories": {c["rp"]: {
            "resource_provider_generation": c["generation"],
            "inventories": {"VCPU": {"total": 900}}}}, "allocations": {}}, fresh=True),
    Row("GET", "/dashboard/api/providers", "allotment:dashboard:providers", 200, _inventory),
    Row("GET", "/dashboard/api/providers/{rp}/children", "allotment:dashboard:providers", 200,
        _provider),
    Row("GET", "/dashboard/api/provider_names?uuids={rp}", "allotment:dashboard:providers",
        200, _provider),
    Row("GET", "/dashboard/api/summary", "allotment:dashboard:providers", 200, _allocation),
    Row("GET", "/dashboard/api/projects", "allotment:dashboard:usages", 200, _allocation),
    Row("GET", "/dashboard/api/consumer_types", "allotment:dashboard:usages", 200,
        target="@every_project"),
    Row("GET", "/dashboard/api/consumers/{consumer}", "allotment:dashboard:consumers", 200,
        _allocation),
    Row("GET", "/history/allocations", "allotment:history:allocations", 200, _allocation),
    Row("GET", "/history/inventories", "allotment:history:inventories", 200, _inventory),
    Row("GET", "/audit/allocations", "allotment:audit:allocations", 200, _allocation),
    Row("GET", "/metrics", "allotment:metrics", 200, _inventory),
]

BUILT_ROUTES = {re.sub(r"\{[^}]*\}", "{}", template) for template, _ in ROUTES}


def _missing_routes(row: Row) -> list[str]:
    needed = [row.route, *PREPARE_ROUTES[row.prepare]]
    return [route for route in needed if route not in BUILT_ROUTES]


# -- applications under test --------------------------------------------------

def conf_from_ini(tmp_path, database_url: str, ini: str = ""):
    """A ConfigOpts read from a placement.conf, as an operator writes it."""
    path = tmp_path / "placement.conf"
    path.write_text(f"[api]\nauth_strategy = noauth2\n"
                    f"[placement_database]\nconnection = {database_url}\n{ini}")
    return config.load([str(path)])


def policy_app(database, tmp_path, mode: str = "secure",
               policy_yaml: str = "{}\n", extra_ini: str = "", clock=None):
    """The app with ``policy_yaml`` as its policy file (``clock``: what the
    policy's recheck interval is counted on, the real one when None)."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy_yaml)
    conf = conf_from_ini(tmp_path, database.url, (
        "[oslo_policy]\n"
        f"enforce_new_defaults = {mode == 'secure'}\n"
        f"policy_file = {policy_file}\n{extra_ini}"))
    policy = None if clock is None else Policy(conf, clock=clock)
    return make_app(conf, db=database.db, prepare=False, policy=policy)


def as_persona(app, persona: str) -> PlacementClient:
    headers = PERSONAS[persona]
    return PlacementClient(app, token=None if headers is None else "user", version=LATEST,
                           headers=headers)


def fingerprint(engine) -> dict:
    """Every row of every table, to prove a refused request changed nothing."""
    with engine.connect() as conn:
        return {table.name: sorted((tuple(r) for r in conn.execute(sa.select(table))),
                                   key=repr)
                for table in t.metadata.sorted_tables}


@pytest.fixture
def sqlite_database(backend_databases):
    if "sqlite" not in _backends():
        pytest.skip("policy decisions do not depend on the database: SQLite runs them")
    database = backend_databases("sqlite")
    database.reset()
    return database


@pytest.fixture(scope="module")
def mode_apps(backend_databases, tmp_path_factory) -> dict:
    """One application per policy mode, shared by the rows (the data is reset)."""
    database = backend_databases("sqlite")
    return {mode: policy_app(database, tmp_path_factory.mktemp(mode), mode,
                             extra_ini="[allotment]\ndashboard = True\nmetrics = True\n")
            for mode in ("secure", "legacy")}


@pytest.mark.parametrize("mode", ["secure", "legacy"])
@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_persona_table(row: Row, mode: str, sqlite_database, mode_apps):
    assert not _missing_routes(row), "every row's route must be served"
    app = mode_apps[mode]
    admin = PlacementClient(app, token="admin", version=LATEST)
    expected = {p: expected_status(row.rule, mode, p, row.success, row.target)
                for p in PERSONAS}
    refused = [p for p, status in expected.items() if status in (401, 403)]
    allowed = [p for p, status in expected.items() if status not in (401, 403)]

    ctx = {**_nothing(admin), **row.prepare(admin)}
    before = fingerprint(sqlite_database.engine)
    for persona in refused:
        body = row.body(ctx) if row.body else None
        resp = as_persona(app, persona).request(row.method, row.path.format(**ctx), body)
        assert resp.status == expected[persona], (persona, resp)
        if resp.status == 403:
            # Upstream gives a token of the wrong scope the bare rule name.
            reason = (row.rule if persona.startswith("system_")
                      else f"Policy does not allow {row.rule} to be performed.")
            error = resp.json()["errors"][0]
            assert error["title"] == "Forbidden"
            assert error["code"] == "placement.undefined_code"
            assert error["detail"] == f"Access was denied to this resource.\n\n {reason}  "
    assert fingerprint(sqlite_database.engine) == before, "a refused request wrote"

    prepared = row.prepare(admin)
    for persona in allowed:
        again = row.fresh or row.prepare is _nothing
        ctx = {**_nothing(admin), **(row.prepare(admin) if again else prepared)}
        body = row.body(ctx) if row.body else None
        resp = as_persona(app, persona).request(row.method, row.path.format(**ctx), body)
        assert resp.status == expected[persona], (persona, resp)


def test_every_rule_is_in_the_table():
    assert {row.rule for row in ROWS} == {r.name for r in API_RULES}


def test_handlers_check_the_rules_policy_documents():
    """The rule each handler declares (``operations``) is the one ``API_RULES``
    lists for that method and URI; explain and headroom (allotment's own URIs, not
    in the documented operations) check the candidates' rule."""
    declared = {(method, template): op.rule for template, resource in ROUTES
                for method, op in resource.operations.items() if op.rule is not None}
    documented = {(method, path): rule.name for rule in API_RULES
                  for method, path in rule.operations}
    assert {key: declared.get(key) for key in documented} == documented
    assert {key: rule for key, rule in declared.items() if key not in documented} == {
        ("GET", "/explain/allocation_candidates"): "placement:allocation_candidates:list",
        ("GET", "/headroom"): "placement:allocation_candidates:list"}


def test_registered_defaults_are_upstreams():
    rules = {rule.name: rule for rule in list_rules()}
    assert {name: rule.check_str for name, rule in rules.items()} == DEFAULTS
    for name, rule in rules.items():
        # project_reader_api is only ever used inside a scoped rule.
        expected_scope = None if name == "project_reader_api" else ["project"]
        assert rule.scope_types == expected_scope, name
    legacy = {rule.name: rule.deprecated_rule for rule in BASE_RULES}
    assert legacy["admin_api"] is None
    for name in ("service_api", "admin_or_service_api", "project_reader_api",
                 "admin_or_project_reader_or_service_api"):
        assert legacy[name].check_str == "role:admin", name


# -- an operator's policy file ----------------------------------------------------

def test_policy_file_overrides_a_rule(sqlite_database, tmp_path):
    app = policy_app(sqlite_database, tmp_path, policy_yaml=(
        '"placement:resource_providers:list": "role:reader"\n'
        '"placement:resource_providers:create": "!"\n'))
    reader = as_persona(app, "project_reader")
    admin = as_persona(app, "admin")
    assert reader.get("/resource_providers").status == 200
    assert admin.get("/resource_providers").status == 403
    resp = admin.post("/resource_providers", {"name": "x"})
    assert resp.status == 403
    assert "placement:resource_providers:create" in resp.detail
    # Rules the file leaves alone keep their defaults.
    assert reader.get(f"/resource_providers/{uuid.uuid4()}").status == 403
    assert admin.get(f"/resource_providers/{uuid.uuid4()}").status == 404


def test_policy_file_overrides_a_base_rule(sqlite_database, tmp_path):
    app = policy_app(sqlite_database, tmp_path,
                     policy_yaml='"admin_or_service_api": "role:member"\n')
    assert as_persona(app, "project_member").get("/resource_providers").status == 200
    assert as_persona(app, "admin").get("/resource_providers").status == 403


def test_policy_file_may_use_any_credential(sqlite_database, tmp_path):
    # Check strings may name the user, the project or the service token roles.
    app = policy_app(sqlite_database, tmp_path, policy_yaml=(
        '"placement:resource_providers:list": "user_id:alice"\n'
        '"placement:traits:list": "service_roles:service"\n'))
    alice = PlacementClient(app, token="alice", version=LATEST)
    bob = PlacementClient(app, token="bob", version=LATEST)
    assert alice.get("/resource_providers").status == 200
    assert bob.get("/resource_providers").status == 403
    if "/traits" in BUILT_ROUTES:
        assert bob.get("/traits", headers={"X-Service-Roles": "service"}).status == 200
        assert bob.get("/traits").status == 403


def test_policy_file_change_is_picked_up(sqlite_database, tmp_path):
    import os

    from allotment import policy

    clock = [1000.0]
    app = policy_app(sqlite_database, tmp_path, clock=lambda: clock[0])
    reader = as_persona(app, "project_reader")
    assert reader.get("/resource_providers").status == 403
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"placement:resource_providers:list": "role:reader"\n')
    # oslo.policy notices a new modification time; do not depend on the clock.
    stat = policy_file.stat()
    os.utime(policy_file, (stat.st_atime + 10, stat.st_mtime + 10))
    # The file is looked at again once per POLICY_RECHECK_SECONDS, not on every check.
    clock[0] += policy.POLICY_RECHECK_SECONDS / 2
    assert reader.get("/resource_providers").status == 403
    clock[0] += policy.POLICY_RECHECK_SECONDS
    assert reader.get("/resource_providers").status == 200


def test_policy_dirs_are_read(sqlite_database, tmp_path):
    policy_dir = tmp_path / "policy.d"
    policy_dir.mkdir()
    (policy_dir / "open.yaml").write_text('"placement:resource_providers:list": "@"\n')
    app = policy_app(sqlite_database, tmp_path, extra_ini=f"policy_dirs = {policy_dir}\n")
    assert as_persona(app, "project_member").get("/resource_providers").status == 200


def test_broken_policy_file_stops_the_service(sqlite_database, tmp_path):
    with pytest.raises(Exception):  # noqa: B017 - oslo.policy's parse error
        policy_app(sqlite_database, tmp_path, policy_yaml='"a": [unclosed\n')


def test_enforce_scope_false_is_ignored_as_upstream(sqlite_database, tmp_path):
    # oslo.policy 6 dropped the option; scope is always checked.
    app = policy_app(sqlite_database, tmp_path, extra_ini="enforce_scope = False\n")
    assert as_persona(app, "system_admin").get("/resource_providers").status == 403


def test_unregistered_rule_is_a_programming_error(sqlite_database, tmp_path):
    from oslo_policy.policy import PolicyNotRegistered

    from allotment.auth import Identity

    conf = conf_from_ini(tmp_path, sqlite_database.url)
    policy = Policy(conf)
    with pytest.raises(PolicyNotRegistered):
        policy.authorize(Identity(user_id="u", project_id="p", roles=["admin"]),
                         "placement:no_such_rule")


# -- GET /usages: a reader sees its own project only (every backend) -------

def test_usages_target_is_the_queried_project(client):
    reader = {"X-Roles": "reader", "X-Project-Id": PROJECT}
    ok = client.get(f"/usages?project_id={PROJECT}", version="1.9", token="user",
                    headers=reader)
    assert ok.status == 200, ok
    assert ok.json() == {"usages": {}}
    other = client.get(f"/usages?project_id={OTHER_PROJECT}", version="1.9", token="user",
                       headers=reader)
    assert other.status == 403
    assert "placement:usages" in other.detail


def test_usages_policy_comes_before_query_validation(client):
    # Without project_id a reader is refused (no project of its own is asked
    # for), while an admin learns the query is incomplete.
    reader = {"X-Roles": "reader", "X-Project-Id": PROJECT}
    assert client.get("/usages", version="1.9", token="user",
                      headers=reader).status == 403
    assert client.get("/usages", version="1.9").status == 400


def test_legacy_admin_may_reshape_but_not_in_secure_mode(sqlite_database, tmp_path):
    assert "/reshaper" in BUILT_ROUTES
    body = {"inventories": {str(uuid.uuid4()): {"resource_provider_generation": 0,
                                                "inventories": {}}},
            "allocations": {}}
    secure = as_persona(policy_app(sqlite_database, tmp_path, "secure"), "admin")
    assert secure.post("/reshaper", body).status == 403
    legacy = as_persona(policy_app(sqlite_database, tmp_path, "legacy"), "admin")
    # Past policy: the provider does not exist.
    assert legacy.post("/reshaper", body).status not in (401, 403)


def test_new_defaults_are_the_default(sqlite_database, tmp_path):
    # oslo.policy 6 (as upstream requires) enforces the new defaults unless told not to.
    assert "/reshaper" in BUILT_ROUTES
    app = make_app(conf_from_ini(tmp_path, sqlite_database.url), db=sqlite_database.db,
                   prepare=False)
    body = {"inventories": {str(uuid.uuid4()): {"resource_provider_generation": 0,
                                                "inventories": {}}},
            "allocations": {}}
    assert as_persona(app, "admin").post("/reshaper", body).status == 403


def test_get_enforcer_reads_placement_conf(tmp_path, monkeypatch):
    # The entry point oslo.policy's command-line tools call.
    from allotment.policy import get_enforcer

    (tmp_path / "policy.yaml").write_text('"placement:traits:list": "role:reader"\n')
    (tmp_path / "placement.conf").write_text(
        f"[oslo_policy]\npolicy_file = {tmp_path / 'policy.yaml'}\n")
    monkeypatch.setenv("OS_PLACEMENT_CONFIG_DIR", str(tmp_path))
    enforcer = get_enforcer()
    assert set(enforcer.registered_rules) == set(DEFAULTS)
    assert str(enforcer.rules["placement:traits:list"]) == "role:reader"


def _reader(project: str):
    from allotment.http.environ import Identity

    return Identity(user_id="u", project_id=project, roles=["reader"])


def test_remembered_answers_follow_credentials_and_target(tmp_path, sqlite_database):
    policy = Policy(conf_from_ini(tmp_path, sqlite_database.url))
    assert policy.enforcer.pure
    for _ in range(2):  # the second round answers from what the first remembered
        assert policy.allows(_reader("p1"), "placement:usages", {"project_id": "p1"})
        assert not policy.allows(_reader("p1"), "placement:usages", {"project_id": "p2"})
        assert not policy.allows(_reader("p2"), "placement:usages", {"project_id": "p1"})
        assert not policy.allows(_reader("p1"), "placement:traits:list")


def test_http_checks_are_asked_every_time(tmp_path, sqlite_database):
    # An http: check's answer is another server's to give: never remembered.
    import http.server
    import threading

    asked = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"True" if len(asked) == 1 else b"False")

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        policy_file = tmp_path / "policy.yaml"
        policy_file.write_text(
            f'"placement:traits:list": "http://127.0.0.1:{server.server_port}/check"\n')
        policy = Policy(conf_from_ini(tmp_path, sqlite_database.url,
                                      f"[oslo_policy]\npolicy_file = {policy_file}\n"))
        assert not policy.enforcer.pure
        assert policy.allows(_reader("p1"), "placement:traits:list")
        assert not policy.allows(_reader("p1"), "placement:traits:list")
        assert asked == ["/check", "/check"]
    finally:
        server.shutdown()
        server.server_close()
