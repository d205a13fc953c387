"""Behaviour shared by every endpoint: versions, errors, headers, bodies."""

import re

import pytest

from allotment.http.microversion import GATES


def test_root_document_without_token(client):
    resp = client.get("/", token=None)
    assert resp.status == 200
    version = resp.json()["versions"][0]
    assert version == {"id": "v1.0", "max_version": "1.39", "min_version": "1.0",
                       "status": "CURRENT", "links": [{"rel": "self", "href": ""}]}


def test_no_token_is_401_except_root(client):
    resp = client.get("/resource_providers", token=None)
    assert resp.status == 401
    # Upstream's WebOb 401 body, not Placement's error format (see test_auth.py).
    assert resp.json()["title"] == "Unauthorized"


def test_microversion_headers(client):
    resp = client.get("/")
    assert resp.headers["openstack-api-version"] == "placement 1.0"
    assert "openstack-api-version" in resp.headers["vary"]
    resp = client.get("/", version="latest")
    assert resp.headers["openstack-api-version"] == "placement 1.39"
    resp = client.get("/", version="1.17")
    assert resp.headers["openstack-api-version"] == "placement 1.17"
    resp = client.get("/", version="1.01")
    assert resp.headers["openstack-api-version"] == "placement 1.1"


@pytest.mark.parametrize("value", ["0.5", "1.40", "2.0"])
def test_version_out_of_range_is_406_with_range(client, value):
    resp = client.get("/", version=value)
    assert resp.status == 406
    error = resp.json()["errors"][0]
    assert f"Unacceptable version header: {value}" in error["detail"]
    assert error["max_version"] == "1.39" and error["min_version"] == "1.0"


@pytest.mark.parametrize("value", ["pony.horse", "1.2.3", "1", "1.x"])
def test_malformed_version_is_400(client, value):
    resp = client.get("/", version=value)
    assert resp.status == 400
    assert "invalid version string" in resp.detail


def test_error_format_and_request_id(client):
    resp = client.get("/barnabas")
    assert resp.status == 404
    error = resp.json()["errors"][0]
    assert error["title"] == "Not Found"
    assert re.match(r"req-[0-9a-f-]{36}$", error["request_id"])
    assert resp.headers["x-openstack-request-id"] == error["request_id"]
    assert "code" not in error
    resp = client.get("/barnabas", version="1.23")
    assert resp.error_code == "placement.undefined_code"


def test_405_lists_allowed_methods(client):
    resp = client.delete("/")
    assert resp.status == 405
    assert resp.headers["allow"] == "GET"
    resp = client.request("OPTIONS", "/resource_providers")
    assert resp.status == 405
    assert sorted(resp.headers["allow"].split(", ")) == ["GET", "POST"]
    assert "The method OPTIONS is not allowed" in resp.detail


def test_accept_negotiation(client):
    assert client.get("/resource_providers", headers={"Accept": "text/plain"}).status == 406
    resp = client.get("/resource_providers",
                      headers={"Accept": "text/html,application/xml;q=0.9,*/*;q=0.8"})
    assert resp.status == 200
    resp = client.get("/resource_providers/x", headers={"Accept": "text/html"})
    assert resp.status == 406 or resp.headers["content-type"].startswith("text/html")


XML = {"Accept": "application/xml"}


@pytest.mark.parametrize("path, before, since", [
    ("/traits", "1.5", "1.6"),
    ("/resource_classes", "1.1", "1.2"),
    ("/resource_classes/VCPU", "1.1", "1.2"),
    ("/usages?project_id=p", "1.8", "1.9"),
    ("/allocation_candidates?resources=VCPU:1", "1.9", "1.10"),
    ("/explain/allocation_candidates?resources=VCPU:1", "1.9", "1.10"),
    ("/headroom?resources=VCPU:1", "1.9", "1.10"),
    ("/resource_providers/{rp}/traits", "1.5", "1.6"),
])
def test_a_get_before_its_microversion_is_404_whatever_accept_says(client, path, before,
                                                                     since):
    """As upstream: the version gate decides before Accept is negotiated."""
    rp = client.create_provider("cn")["uuid"]
    path = path.format(rp=rp)
    resp = client.get(path, version=before, headers=XML)
    assert resp.status == 404, resp
    resp = client.get(path, version=since, headers=XML)
    assert resp.status == 406, resp


def test_accept_where_upstream_negotiates_it_first_or_never(client):
    rp = client.create_provider("cn")["uuid"]
    # A provider's aggregates: Accept before the gate (406 at 1.0, as upstream).
    assert client.get(f"/resource_providers/{rp}/aggregates", version="1.0",
                      headers=XML).status == 406
    assert client.get(f"/resource_providers/{rp}/aggregates", version="1.0").status == 404
    # One trait: no body, answered whatever Accept says (404 before 1.6).
    assert client.get("/traits/HW_CPU_X86_AVX", version="1.6", headers=XML).status == 204
    assert client.get("/traits/HW_CPU_X86_AVX", version="1.5", headers=XML).status == 404
    # No route: the 404, not a 406.
    assert client.get("/nothing", headers=XML).status == 404
    # Without a gate, Accept decides at any version.
    assert client.get(f"/resource_providers/{rp}", version="1.0", headers=XML).status == 406


def test_body_preconditions(client):
    resp = client.post("/resource_providers", raw="I want a provider",
                       headers={"Content-Type": "text/plain"})
    assert resp.status == 415
    resp = client.post("/resource_providers", raw="I want a provider")
    assert resp.status == 400
    assert "content-type header required" in resp.detail
    resp = client.post("/resource_providers", raw="{bad json",
                       headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert "Malformed JSON" in resp.detail
    assert client.get("/resource_providers").json()["resource_providers"] == []


def test_cache_headers_from_1_15(client):
    resp = client.get("/", version="1.14")
    assert "last-modified" not in resp.headers and "cache-control" not in resp.headers
    resp = client.get("/", version="1.15")
    assert resp.headers["cache-control"] == "no-cache"
    assert re.match(r"^\w+, \d+ \w+ \d{4} [\d:]+ GMT$", resp.headers["last-modified"])


def test_gates_table_is_ordered_and_complete():
    minors = sorted(minor for _major, minor in GATES.values())
    assert minors == list(range(1, 40))


def test_unsupported_media_type_is_reported_before_policy(client):
    """As upstream: the body's media type is checked before the policy decision."""
    reader = {"X-Roles": "reader"}
    resp = client.post("/resource_providers", raw="I want a provider", token="user:project",
                       headers={**reader, "Content-Type": "text/plain"})
    assert resp.status == 415
    resp = client.post("/resource_providers", {"name": "x"}, token="user:project",
                       headers=reader)
    assert resp.status == 403
    assert client.get("/resource_providers").json()["resource_providers"] == []


# --- answers as upstream gives them (issue: drop-in) --------------------------------

@pytest.mark.parametrize("path", ["/resource_providers/", "/allocations/", "/traits/",
                                  "/resource_classes/", "/resource_providers//inventories",
                                  "/nowhere"])
def test_an_empty_last_segment_or_unknown_uri_is_a_plain_404(client, path):
    resp = client.get(path, version="1.39")
    assert resp.status == 404
    assert resp.detail == "The resource could not be found.\n\n   "
    assert resp.error_code == "placement.undefined_code"
    # Upstream's 404 for a URI without a route carries no Vary.
    assert "vary" not in resp.headers
    assert resp.headers["openstack-api-version"] == "placement 1.39"


@pytest.mark.parametrize("accept", ["text/html", "application/xml", "image/png;q=1"])
def test_version_discovery_answers_json_whatever_accept_says(client, accept):
    resp = client.get("/", headers={"Accept": accept})
    assert resp.status == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["versions"][0]["max_version"] == "1.39"


def test_a_method_gated_by_microversion_is_405_listing_the_methods_at_that_version(client):
    rp = client.create_provider("cn")["uuid"]
    resp = client.delete(f"/resource_providers/{rp}/inventories", version="1.4")
    assert resp.status == 405
    assert resp.headers["allow"] == "GET, POST, PUT"
    assert resp.detail == "The method DELETE is not allowed for this resource. \n\n "
    assert client.delete(f"/resource_providers/{rp}/inventories", version="1.5").status == 204


def test_a_method_the_uri_never_has_is_405_with_upstreams_body(client):
    resp = client.request("PATCH", "/resource_providers", version="1.39")
    assert resp.status == 405
    assert resp.headers["allow"] == "GET, POST"
    assert resp.detail == ("The method PATCH is not allowed for this resource. \n\n "
                           "The method specified is not allowed for this resource.")


def test_validation_error_detail_is_one_line_after_the_blank_line(client):
    resp = client.post("/resource_classes", {"name": "fake_class"}, version="1.39")
    assert resp.status == 400
    _, _, reason = resp.detail.partition("\n\n")
    assert "\n" not in reason
    # osc-placement shows the last line: it must say what is wrong.
    assert resp.detail.splitlines()[-1].strip().startswith(
        "JSON does not validate: 'fake_class' does not match")


LONE_SURROGATE = '{"name": "\\ud800"}'


@pytest.mark.parametrize("method,path,version", [
    ("POST", "/resource_providers", "1.39"),
    ("POST", "/resource_classes", "1.39"),
    ("PUT", "/allocations/11111111-2222-3333-4444-555555555555", "1.39"),
    ("POST", "/allocations", "1.39"),
    ("POST", "/reshaper", "1.39"),
])
def test_a_lone_surrogate_in_json_is_a_400_and_writes_nothing(client, method, path, version):
    # The reshaper is for services (its policy); the others are admin's.
    resp = client.request(method, path, version=version, raw=LONE_SURROGATE,
                          headers={"Content-Type": "application/json",
                                   "X-Roles": "admin,service"})
    assert resp.status == 400, resp
    assert "unpaired surrogate" in resp.detail
    assert client.get("/resource_providers").json()["resource_providers"] == []


def test_a_surrogate_pair_escape_is_fine(client):
    resp = client.request("POST", "/resource_providers", version="1.39",
                          raw='{"name": "cn-\\ud83d\\ude00"}',
                          headers={"Content-Type": "application/json"})
    assert resp.status == 200, resp
    assert resp.json()["name"] == "cn-\U0001f600"


def test_an_empty_provider_name_is_refused_as_upstream(client):
    resp = client.post("/resource_providers", {"name": ""}, version="1.39")
    assert resp.status == 400
    assert "Object action create failed because: name is required" in resp.detail
    assert client.get("/resource_providers").json()["resource_providers"] == []


def test_microversion_refusals_read_as_upstreams(client):
    resp = client.get("/resource_providers", version="1.99")
    assert resp.status == 406
    assert resp.detail == ("The resource could not be generated that was acceptable to your "
                           "browser (content of type application/json. \n\n Invalid "
                           "microversion: Unacceptable version header: 1.99")
    resp = client.get("/resource_providers", version="1.x")
    assert resp.status == 400
    assert ("Invalid microversion: invalid version string: 1.x; invalid literal for int() "
            "with base 10: 'x'") in resp.detail
