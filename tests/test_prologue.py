"""The order of refusals before a responder runs, for every route and method.

Every operation of the route table (``allotment.wsgi.ROUTES``, each handler
class's ``operations``) is asked the requests that can be refused in more than
one way at once, and must answer the refusal upstream Placement 16.0.0 gives
first:

- a URI that is not served (the dashboard, /metrics with their option off):
  404, before policy;
- an ``Accept`` that rules JSON out: 406 where the operation negotiates it,
  after the version gate except where upstream negotiates it first;
- a microversion before the operation's first one: 404 (405 for a method the
  URI gained later), even for a caller the policy refuses and a body of the
  wrong media type, except where upstream checks the media type first;
- a body that is not declared JSON, at a version that reads one: 415, before
  policy;
- a caller the policy refuses: 403, before the body and the query string are
  read or validated (a 400), except for GET /usages, whose policy target is
  the queried project: a query string that cannot be read is its 400 first;
- then the body: a 400 when it is bad, except where upstream looks the
  provider up first (its 404 when it is gone).

The expectations are this module's own table (what upstream answers, which
conformance holds allotment to), not read from the operations they check.
Policy and the prologue run before any SQL: SQLite runs the module.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pytest

from allotment.http.microversion import GATES, MAX_VERSION, Version
from allotment.http.operations import PROLOGUE, Operation
from allotment.wsgi import ROUTES
from tests.conftest import _backends
from tests.support.client import PlacementClient, Response
from tests.test_policy import PROJECT, policy_app

LATEST = f"{MAX_VERSION[0]}.{MAX_VERSION[1]}"
# A project caller with no role any rule admits (not even reader): refused by
# every rule, with or without a target.
NOBODY = {"X-Roles": "observer", "X-Project-Id": PROJECT}
TEXT = {"Content-Type": "text/plain"}
XML = {"Accept": "application/xml"}
# Valid JSON that no body schema of any version accepts.
BAD_BODY = {"bogus": [1]}

# Upstream checks the media type of a provider's aggregates PUT before its
# version gate (``require_content`` wraps the versioned handler): 415 at 1.0.
CONTENT_TYPE_BEFORE_GATE = {("PUT", "/resource_providers/{uuid}/aggregates")}
# Upstream looks the provider up before it reads these bodies: a bad body for
# a provider that is gone is the provider's 404.
PROVIDER_BEFORE_BODY = {
    ("PUT", "/resource_providers/{uuid}"),
    ("POST", "/resource_providers/{uuid}/inventories"),
    ("PUT", "/resource_providers/{uuid}/inventories"),
    ("PUT", "/resource_providers/{uuid}/inventories/{resource_class}"),
    ("PUT", "/resource_providers/{uuid}/aggregates"),
}
# The policy target is read from the query string: a query string that is no
# UTF-8 is a 400 before the policy's 403.
QUERY_BEFORE_POLICY = {("GET", "/usages")}
# Served only with an option on (404 as an unknown path otherwise, before policy).
OPTIONAL = {"/dashboard/api/", "/metrics"}

_FIELDS = {"uuid": lambda: str(uuid.uuid4()), "consumer_uuid": lambda: str(uuid.uuid4()),
           "resource_class": lambda: "VCPU", "name": lambda: "CUSTOM_PROLOGUE"}


@dataclass(frozen=True)
class Case:
    template: str
    method: str
    op: Operation

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.template)

    @property
    def id(self) -> str:
        return f"{self.method} {self.template}"

    def path(self) -> str:
        return re.sub(r"\{([^}]*)\}", lambda m: _FIELDS[m.group(1)](), self.template)

    @property
    def first(self) -> int:
        return 0 if self.op.since is None else GATES[self.op.since][1]

    def versions(self) -> list[str]:
        """Every version the operation exists at."""
        return [f"1.{minor}" for minor in range(self.first, MAX_VERSION[1] + 1)]

    def reads_body(self, version: str) -> bool:
        if self.op.body is None:
            return False
        return self.op.body(Version(*map(int, version.split(".")))) is not None

    @property
    def ever_reads_body(self) -> bool:
        return any(self.reads_body(v) for v in self.versions())

    @property
    def optional(self) -> bool:
        return any(self.template.startswith(prefix) for prefix in OPTIONAL)


CASES = [Case(template, method, op) for template, resource in ROUTES
         for method, op in resource.operations.items()]
GUARDED = [case for case in CASES if case.op.rule is not None]
GATED = [case for case in GUARDED if case.op.since is not None]


def _ask(client: PlacementClient, case: Case, version: str, *, query: str = "",
         body: object = None, raw: str | None = None,
         headers: dict[str, str] | None = None) -> Response:
    path = case.path() + (f"?{query}" if query else "")
    if body is None and raw is None and case.ever_reads_body:
        # Without a body a request has no media type: the 415 would come first.
        body = BAD_BODY
    return client.request(case.method, path, body, version=version, raw=raw,
                          headers=headers)


@pytest.fixture(scope="module")
def apps(backend_databases, tmp_path_factory):
    if "sqlite" not in _backends():
        pytest.skip("the prologue runs before any SQL: SQLite runs it")
    database = backend_databases("sqlite")
    database.reset()
    on = policy_app(database, tmp_path_factory.mktemp("on"),
                    extra_ini="[allotment]\ndashboard = True\nmetrics = True\n")
    off = policy_app(database, tmp_path_factory.mktemp("off"))
    return {"on": on, "off": off}


@pytest.fixture(scope="module")
def nobody(apps) -> PlacementClient:
    return PlacementClient(apps["on"], token="user", headers=NOBODY)


@pytest.fixture(scope="module")
def admin(apps) -> PlacementClient:
    # Admin and service: every rule admits it (the reshaper's is service only).
    return PlacementClient(apps["on"], token="user",
                           headers={"X-Roles": "admin,service", "X-Project-Id": PROJECT})


def test_the_table_names_routes_that_exist():
    keys = {case.key for case in CASES}
    for table in (CONTENT_TYPE_BEFORE_GATE, PROVIDER_BEFORE_BODY, QUERY_BEFORE_POLICY):
        assert table <= keys
    assert all(case.op.rule is None for case in CASES if case.template in ("/", "/openapi.json"))


def test_operations_declare_upstreams_other_orders_and_no_more():
    """Where upstream's order differs, the operation says so, and nowhere else."""
    assert {case.key for case in CASES if case.op.prologue != PROLOGUE} == \
        CONTENT_TYPE_BEFORE_GATE
    assert {case.key for case in CASES if case.op.body_after_provider} == \
        PROVIDER_BEFORE_BODY


@pytest.mark.parametrize("case", GATED, ids=lambda c: c.id)
def test_before_its_first_version_an_operation_is_not_there(case: Case, nobody, admin):
    """404 (405 for a method gate) for any caller, whatever the body and Accept say."""
    before = f"1.{case.first - 1}"
    gate = 405 if case.op.gated_by_method else 404
    for client in (nobody, admin):
        assert _ask(client, case, before).status == gate
        assert _ask(client, case, before, query="bad=%FF").status == gate
        if case.method == "GET":
            expected = 406 if case.op.accept == "before_gate" else gate
            assert _ask(client, case, before, headers=XML).status == expected
        if case.ever_reads_body:
            expected = 415 if case.key in CONTENT_TYPE_BEFORE_GATE else gate
            assert _ask(client, case, before, raw="x", headers=TEXT).status == expected
            assert _ask(client, case, before, body=BAD_BODY).status == gate
    if gate == 405:
        allow = _ask(admin, case, before).headers["allow"].split(", ")
        assert case.method not in allow


@pytest.mark.parametrize("case", GUARDED, ids=lambda c: c.id)
def test_a_refused_caller_learns_nothing_of_the_body_or_query(case: Case, nobody):
    """At every version the operation exists: 415 for a body that is not JSON
    where one is read, else 403, before any validation."""
    for version in case.versions():
        assert _ask(nobody, case, version).status == 403, version
        assert _ask(nobody, case, version, query="bogus=1&limit=-1").status == 403, version
        unreadable = _ask(nobody, case, version, query="bad=%FF")
        assert unreadable.status == (400 if case.key in QUERY_BEFORE_POLICY else 403), version
        if case.method == "GET":
            expected = 403 if case.op.accept is None else 406
            assert _ask(nobody, case, version, headers=XML).status == expected, version
        if case.ever_reads_body:
            wrong_type = _ask(nobody, case, version, raw="x", headers=TEXT)
            assert wrong_type.status == (415 if case.reads_body(version) else 403), version
            assert _ask(nobody, case, version, raw="", headers=TEXT).status == (
                415 if case.reads_body(version) else 403), version
            assert _ask(nobody, case, version, raw="{", headers={
                "Content-Type": "application/json"}).status == 403, version


@pytest.mark.parametrize("case", [c for c in GUARDED if c.ever_reads_body],
                         ids=lambda c: c.id)
def test_an_allowed_caller_gets_the_body_refusals(case: Case, admin):
    """415 for a body that is not JSON, then a bad body's 400 (the provider's 404
    first where upstream looks it up before reading)."""
    for version in sorted({f"1.{case.first}", "1.6", "1.7", LATEST},
                          key=lambda v: int(v.split(".")[1])):
        if int(version.split(".")[1]) < case.first:
            continue
        if not case.reads_body(version):
            assert _ask(admin, case, version, raw="x", headers=TEXT).status != 415
            continue
        assert _ask(admin, case, version, raw="x", headers=TEXT).status == 415, version
        bad = _ask(admin, case, version, body=BAD_BODY)
        assert bad.status == (404 if case.key in PROVIDER_BEFORE_BODY else 400), (version, bad)


@pytest.mark.parametrize("case", [c for c in GUARDED if c.optional], ids=lambda c: c.id)
def test_a_route_off_is_an_unknown_path_before_policy(case: Case, apps):
    nobody = PlacementClient(apps["off"], token="user", headers=NOBODY)
    resp = _ask(nobody, case, LATEST)
    assert resp.status == 404
    assert "vary" not in resp.headers


@pytest.mark.parametrize("case", [c for c in CASES if c.op.rule is None], ids=lambda c: c.id)
def test_routes_without_a_rule_answer_anyone(case: Case, nobody):
    assert _ask(nobody, case, LATEST).status == 200
