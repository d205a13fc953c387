"""GET /openapi.json: a valid OpenAPI 3.1 document that describes the answers we give.

Real answers of a scenario that touches every resource (and some refusals)
are checked, at several microversions, against the response schema the
document gives for that URI, method, status and microversion.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_openapi

from allotment import openapi
from allotment.http.microversion import Version
from allotment.wsgi import ROUTES, make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient, Response

RP = "7d4e3f7a-0c4b-4f2e-9a51-111111111111"
CHILD = "7d4e3f7a-0c4b-4f2e-9a51-222222222222"
CONSUMER = "7d4e3f7a-0c4b-4f2e-9a51-333333333333"
OTHER = "7d4e3f7a-0c4b-4f2e-9a51-444444444444"
AGG = "7d4e3f7a-0c4b-4f2e-9a51-555555555555"
# The reshaper's rule is service-only.
ROLES = {"X-Roles": "admin,service"}


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi.document(ROUTES)


@pytest.fixture
def conf(database):
    """The dashboard on, so that the scenario reaches its data routes too."""
    return make_conf(database.url, allotment__dashboard=True)


def test_served_without_a_token(client, document):
    resp = client.get("/openapi.json", token=None)
    assert resp.status == 200, resp
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == json.loads(json.dumps(document))


def test_valid_openapi_3_1(document):
    """Once, not per backend: the validator takes seconds per document."""
    assert document["openapi"] == "3.1.0"
    validate_openapi(document)
    # A microversion's own view of it is valid too.
    for minor in (0, 39):
        validate_openapi(openapi.document_at(document, Version(1, minor)))


def test_every_route_and_method_is_described(document):
    described = {(path, method.upper()) for path, methods in document["paths"].items()
                 for method in methods}
    routed = {(template, method) for template, resource in ROUTES
              for method in resource(_Bare()).allowed_methods()}  # type: ignore[arg-type]
    assert described == routed
    for path, methods in document["paths"].items():
        for method, spec in methods.items():
            names = [p["name"] for p in spec["parameters"] if p["in"] == "path"]
            assert names == re.findall(r"{(\w+)}", path), (path, method)
            assert not spec.get("x-undescribed"), (path, method)
            assert "x-microversions" in spec, (path, method)
            assert method.upper() in dict(ROUTES)[path].operations


class _Bare:
    """Enough of the Services to build a resource and ask for its methods."""

    db = conf = policy = None


def test_bodies_and_queries_are_the_handlers_schemas(document):
    """The variants come from the schema modules, each with the versions it holds for."""
    from allotment.schemas import allocations, providers

    body = document["paths"]["/allocations/{consumer_uuid}"]["put"]["requestBody"]
    variants = body["content"]["application/json"]["schema"]["anyOf"]
    ranges = [(v["x-microversions"]["min"], v["x-microversions"]["max"]) for v in variants]
    assert ranges == [("1.0", "1.7"), ("1.8", "1.11"), ("1.12", "1.27"), ("1.28", "1.33"),
                      ("1.34", "1.37"), ("1.38", "1.39")]
    assert {k: v for k, v in variants[-1].items() if k != "x-microversions"} == \
        allocations.PUT_1_38
    at_1_14 = openapi.document_at(document, Version(1, 14))
    params = at_1_14["paths"]["/resource_providers"]["get"]["parameters"]
    assert {p["name"] for p in params if p["in"] == "query"} == \
        set(providers.list_schema(Version(1, 14))["properties"])
    # Operations appear from their first microversion on.
    assert "/reshaper" not in openapi.document_at(document, Version(1, 29))["paths"]
    assert "/reshaper" in openapi.document_at(document, Version(1, 30))["paths"]


def test_at_version_requires_and_refuses_versioned_fields(document):
    spec = document["paths"]["/resource_providers/{uuid}"]["get"]["responses"]["200"]
    schema = spec["content"]["application/json"]["schema"]
    old = openapi.at_version(schema, Version(1, 13))
    new = openapi.at_version(schema, Version(1, 14))
    assert "root_provider_uuid" not in old["properties"]
    assert "root_provider_uuid" in new["required"]


class Checker:
    """Calls the API at one microversion; every answer must match the document."""

    def __init__(self, client, document: dict, minor: int) -> None:
        self.client = client
        self.version = Version(1, minor)
        self.minor = minor
        self.generic = document
        self.doc = openapi.document_at(document, self.version)
        self.checked: list[tuple[str, str, int]] = []

    def call(self, method: str, template: str, body: Any = None, query: str = "",
             expect: int | None = None, **params: str) -> Response:
        path = template.format(**params) + (f"?{query}" if query else "")
        resp = self.client.request(method, path, body, version=str(self.version),
                                   headers=ROLES)
        if expect is not None:
            assert resp.status == expect, (method, path, resp)
        check_answer(self.doc, template, method, resp, self.version)
        self.checked.append((method, template, resp.status))
        return resp


def check_answer(doc: dict, template: str, method: str, resp: Response,
                 version: Version | None) -> None:
    """``resp`` is described: its status is listed, and its body matches the schema."""
    operation = doc["paths"][template][method.lower()]
    answers = operation["responses"]
    assert str(resp.status) in answers, (method, template, resp.status, sorted(answers))
    answer = answers[str(resp.status)]
    if "content" not in answer:
        assert not resp.text, (method, template, resp)
        return
    assert resp.headers["content-type"].startswith("application/json"), resp
    # With the document's components beside it, so that its ``$ref``s resolve.
    schema = {**answer["content"]["application/json"]["schema"],
              "components": doc.get("components", {})}
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    ).validate(resp.json())
    if version is not None:
        assert resp.headers["openstack-api-version"] == f"placement {version}"


def _generation(checker: Checker, rp: str) -> int:
    return checker.call("GET", "/resource_providers/{uuid}", uuid=rp).json()["generation"]


def _allocation_body(minor: int, amounts: dict[str, int], generation: int | None) -> dict:
    body: dict[str, Any]
    if minor < 12:
        body = {"allocations": [{"resource_provider": {"uuid": RP}, "resources": amounts}]}
    else:
        body = {"allocations": {RP: {"resources": amounts}}}
    if minor >= 8:
        body.update(project_id="proj", user_id="user")
    if minor >= 28:
        body["consumer_generation"] = generation
    if minor >= 38:
        body["consumer_type"] = "INSTANCE"
    return body


def run_scenario(c: Checker) -> None:
    m = c.minor
    # Root, this document, providers.
    c.call("GET", "/", expect=200)
    c.call("GET", "/openapi.json", expect=200)
    c.call("POST", "/resource_providers", {"name": "cn", "uuid": RP},
           expect=200 if m >= 20 else 201)
    if m >= 14:
        c.call("POST", "/resource_providers",
               {"name": "numa", "uuid": CHILD, "parent_provider_uuid": RP})
    c.call("GET", "/resource_providers", expect=200)
    c.call("GET", "/resource_providers", query="name=cn", expect=200)
    c.call("GET", "/resource_providers/{uuid}", uuid=RP, expect=200)
    c.call("PUT", "/resource_providers/{uuid}", {"name": "cn-1"}, uuid=RP, expect=200)

    # Inventories.
    gen = _generation(c, RP)
    c.call("PUT", "/resource_providers/{uuid}/inventories",
           {"resource_provider_generation": gen,
            "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}},
           uuid=RP, expect=200)
    c.call("GET", "/resource_providers/{uuid}/inventories", uuid=RP, expect=200)
    c.call("GET", "/resource_providers/{uuid}/inventories/{resource_class}", uuid=RP,
           resource_class="VCPU", expect=200)
    c.call("PUT", "/resource_providers/{uuid}/inventories/{resource_class}",
           {"resource_provider_generation": gen + 1, "total": 16}, uuid=RP,
           resource_class="VCPU", expect=200)
    c.call("POST", "/resource_providers/{uuid}/inventories",
           {"resource_class": "DISK_GB", "total": 100}, uuid=RP, expect=201)
    c.call("DELETE", "/resource_providers/{uuid}/inventories/{resource_class}", uuid=RP,
           resource_class="DISK_GB", expect=204)
    # A stale generation: 409.
    c.call("PUT", "/resource_providers/{uuid}/inventories",
           {"resource_provider_generation": 0, "inventories": {}}, uuid=RP, expect=409)

    # Aggregates, resource classes, traits.
    if m >= 1:
        gen = _generation(c, RP)
        body: Any = ({"aggregates": [AGG], "resource_provider_generation": gen}
                     if m >= 19 else [AGG])
        c.call("PUT", "/resource_providers/{uuid}/aggregates", body, uuid=RP, expect=200)
        c.call("GET", "/resource_providers/{uuid}/aggregates", uuid=RP, expect=200)
    if m >= 2:
        c.call("POST", "/resource_classes", {"name": "CUSTOM_GPU"}, expect=201)
        c.call("GET", "/resource_classes", expect=200)
        c.call("GET", "/resource_classes/{name}", name="CUSTOM_GPU", expect=200)
        if m >= 7:
            c.call("PUT", "/resource_classes/{name}", name="CUSTOM_FPGA", expect=201)
            c.call("PUT", "/resource_classes/{name}", name="CUSTOM_FPGA", expect=204)
        else:
            c.call("PUT", "/resource_classes/{name}", {"name": "CUSTOM_FPGA"},
                   name="CUSTOM_GPU", expect=200)
        c.call("DELETE", "/resource_classes/{name}", name="CUSTOM_FPGA", expect=204)
        c.call("DELETE", "/resource_classes/{name}", name="VCPU", expect=400)
    if m >= 6:
        c.call("PUT", "/traits/{name}", name="CUSTOM_FAST", expect=201)
        c.call("GET", "/traits", expect=200)
        c.call("GET", "/traits", query="name=startswith:CUSTOM", expect=200)
        c.call("GET", "/traits/{name}", name="CUSTOM_FAST", expect=204)
        gen = _generation(c, RP)
        c.call("PUT", "/resource_providers/{uuid}/traits",
               {"traits": ["CUSTOM_FAST", "HW_CPU_X86_AVX2"],
                "resource_provider_generation": gen}, uuid=RP, expect=200)
        c.call("GET", "/resource_providers/{uuid}/traits", uuid=RP, expect=200)
        c.call("PUT", "/traits/{name}", name="lowercase", expect=400)

    # Allocations and usages.
    c.call("PUT", "/allocations/{consumer_uuid}",
           _allocation_body(m, {"VCPU": 2, "MEMORY_MB": 512}, None),
           consumer_uuid=CONSUMER, expect=204)
    c.call("GET", "/allocations/{consumer_uuid}", consumer_uuid=CONSUMER, expect=200)
    c.call("GET", "/allocations/{consumer_uuid}", consumer_uuid=OTHER, expect=200)
    c.call("GET", "/resource_providers/{uuid}/allocations", uuid=RP, expect=200)
    c.call("GET", "/resource_providers/{uuid}/usages", uuid=RP, expect=200)
    if m >= 9:
        c.call("GET", "/usages", query="project_id=proj", expect=200)
        c.call("GET", "/usages", expect=400)
    if m >= 13:
        entry = _allocation_body(max(m, 12), {"VCPU": 1}, None)
        c.call("POST", "/allocations", {OTHER: entry}, expect=204)
    c.call("PUT", "/allocations/{consumer_uuid}", _allocation_body(m, {"VCPU": 999}, 1),
           consumer_uuid=CONSUMER, expect=409)
    if m >= 10:
        c.call("GET", "/allocation_candidates", query="resources=VCPU:1", expect=200)
        c.call("GET", "/explain/allocation_candidates", query="resources=VCPU:1", expect=200)
        c.call("GET", "/explain/allocation_candidates", query="resources=VCPU:100000",
               expect=200)
        c.call("GET", "/allocation_candidates", query="resources=NOPE:1", expect=400)
        headroom_scenario(c)
    if m >= 30:
        shown = c.call("GET", "/allocations/{consumer_uuid}", consumer_uuid=CONSUMER).json()
        inventory = c.call("GET", "/resource_providers/{uuid}/inventories", uuid=RP).json()
        entry = _allocation_body(m, {"VCPU": 2, "MEMORY_MB": 512},
                                 shown["consumer_generation"])
        c.call("POST", "/reshaper", {
            "inventories": {RP: {
                "resource_provider_generation": inventory["resource_provider_generation"],
                "inventories": inventory["inventories"]}},
            "allocations": {CONSUMER: entry}}, expect=204)

    # The dashboard's data (allotment's own; this module's app has it on).
    dashboard_scenario(c)
    history_scenario(c)
    # The audit (allotment's own, at every microversion).
    body = c.call("GET", "/audit/allocations", expect=200).json()
    assert body["counts"]["over_capacity"] == 0, body
    c.call("GET", "/audit/allocations", query="limit=1&kind=empty_consumer,over_capacity",
           expect=200)
    c.call("GET", "/audit/allocations", query="limit=0", expect=400)
    c.call("GET", "/audit/allocations", query="kind=nope", expect=400)

    # Refusals.
    c.call("GET", "/resource_providers/{uuid}", uuid=str(uuid.uuid4()), expect=404)
    c.call("POST", "/resource_providers", {"nom": "x"}, expect=400)
    c.call("POST", "/resource_providers", {"name": "cn-1"}, expect=409)
    c.call("DELETE", "/resource_providers/{uuid}", uuid=RP, expect=409)
    # No version is negotiated: the generic document holds (no ``code``, the range).
    resp = c.client.get("/resource_providers", version="1.99")
    assert resp.status == 406
    check_answer(c.generic, "/resource_providers", "GET", resp, None)
    assert resp.json()["errors"][0]["max_version"] == "1.39"

    # Clean up, which checks the 204s.
    c.call("DELETE", "/allocations/{consumer_uuid}", consumer_uuid=CONSUMER, expect=204)
    if m >= 13:
        c.call("DELETE", "/allocations/{consumer_uuid}", consumer_uuid=OTHER, expect=204)
    if m >= 6:
        c.call("DELETE", "/resource_providers/{uuid}/traits", uuid=RP, expect=204)
        c.call("DELETE", "/traits/{name}", name="CUSTOM_FAST", expect=204)
    if m >= 5:
        c.call("DELETE", "/resource_providers/{uuid}/inventories", uuid=RP, expect=204)
    else:
        # Not there before 1.5: the generic document names the 405.
        resp = c.client.delete(f"/resource_providers/{RP}/inventories", version=f"1.{m}")
        check_answer(c.generic, "/resource_providers/{uuid}/inventories", "DELETE", resp,
                     c.version)
        assert resp.status == 405
    if m >= 7:
        c.call("DELETE", "/resource_classes/{name}", name="CUSTOM_GPU", expect=204)
    if m >= 14:
        c.call("DELETE", "/resource_providers/{uuid}", uuid=CHILD, expect=204)
    c.call("DELETE", "/resource_providers/{uuid}", uuid=RP, expect=204)


def headroom_scenario(c: Checker) -> None:
    """GET /headroom (allotment's own) with its what-if and member_of's aggregates."""
    c.call("GET", "/headroom", query="resources=VCPU:1", expect=200)
    c.call("GET", "/headroom", query=f"resources=VCPU:1&exclude_roots={RP}"
           "&add=2xVCPU:8*2.0,MEMORY_MB:4096", expect=200)
    c.call("GET", "/headroom", query="resources=VCPU:1&add=2xNOPE:1", expect=400)
    if c.minor >= 21:
        c.call("GET", "/headroom", query=f"resources=VCPU:1&member_of={AGG}", expect=200)


def dashboard_scenario(c: Checker) -> None:
    """Each dashboard data route, with its query parameters, and its refusals."""
    trees = c.call("GET", "/dashboard/api/providers", expect=200).json()
    assert trees["total"] == 1 and trees["trees"][0]["uuid"] == RP
    c.call("GET", "/dashboard/api/providers", query=f"limit=1&offset=0&q=CN&roots={RP}",
           expect=200)
    c.call("GET", "/dashboard/api/providers", query="limit=x", expect=400)
    c.call("GET", "/dashboard/api/providers", query="limit=501", expect=400)
    c.call("GET", "/dashboard/api/providers/{uuid}/children", query="limit=1&offset=0",
           uuid=RP, expect=200)
    c.call("GET", "/dashboard/api/providers/{uuid}/children", uuid=str(uuid.uuid4()),
           expect=404)
    names = c.call("GET", "/dashboard/api/provider_names",
                   query=f"uuids={RP},{uuid.uuid4()}", expect=200).json()
    assert list(names["providers"]) == [RP], names
    c.call("GET", "/dashboard/api/provider_names", expect=200)
    c.call("GET", "/dashboard/api/provider_names",
           query="uuids=" + ",".join(str(uuid.uuid4()) for _ in range(501)), expect=400)
    summary = c.call("GET", "/dashboard/api/summary", expect=200).json()
    assert summary["fullest"], summary
    c.call("GET", "/dashboard/api/summary", query="limit=1&resource_class=VCPU", expect=200)
    c.call("GET", "/dashboard/api/projects", expect=200)
    c.call("GET", "/dashboard/api/projects", query="limit=1&offset=1", expect=200)
    c.call("GET", "/dashboard/api/consumer_types", expect=200)
    held = c.call("GET", "/dashboard/api/consumers/{consumer_uuid}", consumer_uuid=CONSUMER,
                  expect=200).json()
    assert RP in held["allocations"], held
    c.call("GET", "/dashboard/api/consumers/{consumer_uuid}",
           consumer_uuid=str(uuid.uuid4()), expect=200)
    # No token (401), a role the rule does not allow (403).
    for token, roles, status in ((None, "admin", 401), ("someone:proj", "member", 403)):
        resp = c.client.request("GET", "/dashboard/api/summary", version=str(c.version),
                                token=token, headers={"X-Roles": roles})
        assert resp.status == status, resp
        check_answer(c.doc, "/dashboard/api/summary", "GET", resp,
                     c.version if status == 403 else None)


def history_scenario(c: Checker) -> None:
    """The history routes, with their query parameters, and their refusals."""
    changes = c.call("GET", "/history/allocations", query=f"consumer_uuid={CONSUMER}",
                     expect=200).json()
    assert changes["entries"] and changes["entries"][0]["consumer_uuid"] == CONSUMER
    c.call("GET", "/history/allocations",
           query=f"resource_provider_uuid={RP}&project_id=proj&limit=1&marker=99&"
                 "since=2020-01-01&until=2999-01-01T00:00:00Z", expect=200)
    c.call("GET", "/history/allocations", query="limit=0", expect=400)
    c.call("GET", "/history/allocations", query="since=soon", expect=400)
    inventories = c.call("GET", "/history/inventories", query=f"resource_provider_uuid={RP}",
                         expect=200).json()
    assert inventories["entries"][-1]["total_before"] is None, inventories
    c.call("GET", "/history/inventories", query="consumer_uuid=x", expect=400)
    resp = c.client.request("GET", "/history/inventories", version=str(c.version),
                            token="someone:proj", headers={"X-Roles": "reader"})
    assert resp.status == 403, resp
    check_answer(c.doc, "/history/inventories", "GET", resp, c.version)


def test_dashboard_routes_answer_404_when_off(database, document):
    """Without ``[allotment] dashboard``, the described 404 (the bare one of unknown paths)."""
    off = PlacementClient(make_app(make_conf(database.url), db=database.db, prepare=False))
    for path, template in (("/dashboard/api/providers", None),
                           (f"/dashboard/api/providers/{RP}/children",
                            "/dashboard/api/providers/{uuid}/children"),
                           ("/dashboard/api/provider_names", None),
                           ("/dashboard/api/summary", None),
                           ("/dashboard/api/projects", None),
                           ("/dashboard/api/consumer_types", None),
                           (f"/dashboard/api/consumers/{CONSUMER}",
                            "/dashboard/api/consumers/{consumer_uuid}")):
        resp = off.get(path, version="1.39", headers=ROLES)
        assert resp.status == 404, (path, resp)
        check_answer(document, template or path, "GET", resp, Version(1, 39))
        operation = document["paths"][template or path]["get"]
        assert operation["x-requires-option"] == "[allotment] dashboard"


@pytest.mark.parametrize("minor", [0, 14, 28, 39])
def test_real_answers_match_the_document(client, document, minor):
    checker = Checker(client, document, minor)
    run_scenario(checker)
    assert len(checker.checked) > 25


def test_the_generic_document_holds_at_every_version(client, document):
    """Without specializing to a version, the document still describes each answer."""
    generic = {**document}
    for minor in (0, 14, 28, 39):
        checker = Checker(client, document, minor)
        checker.doc = generic
        run_scenario(checker)
