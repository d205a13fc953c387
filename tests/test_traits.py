"""Traits over HTTP: the catalogue (/traits) and provider trait sets."""


import os_traits
import pytest

from tests.support.threads import race

V = "1.6"
INVALID = "The trait is invalid. A valid trait must be no longer than 255 characters"


def custom_traits(client):
    return client.get("/traits?name=startswith:CUSTOM_", version=V).json()["traits"]


def rp_traits(client, rp):
    return client.get(f"/resource_providers/{rp}/traits", version=V).json()


@pytest.mark.parametrize("method, path", [
    ("GET", "/traits"), ("GET", "/traits/CUSTOM_A"), ("PUT", "/traits/CUSTOM_A"),
    ("DELETE", "/traits/CUSTOM_A"), ("GET", "/resource_providers/{rp}/traits"),
    ("PUT", "/resource_providers/{rp}/traits"), ("DELETE", "/resource_providers/{rp}/traits"),
])
def test_hidden_before_1_6(client, method, path):
    rp = client.create_provider("cn")["uuid"]
    resp = client.request(method, path.format(rp=rp), version="1.5")
    assert resp.status == 404


def test_create_show_delete(client):
    resp = client.put("/traits/CUSTOM_TRAIT_1", version=V)
    assert resp.status == 201
    assert resp.headers["location"].endswith("/traits/CUSTOM_TRAIT_1")
    assert "content-type" not in resp.headers and "last-modified" not in resp.headers
    resp = client.put("/traits/CUSTOM_TRAIT_1", version="1.15")
    assert resp.status == 204
    assert resp.headers["cache-control"] == "no-cache"
    assert "last-modified" in resp.headers
    resp = client.get("/traits/CUSTOM_TRAIT_1", version=V)
    assert resp.status == 204 and "last-modified" not in resp.headers
    assert "last-modified" in client.get("/traits/CUSTOM_TRAIT_1", version="1.15").headers
    resp = client.get("/traits/CUSTOM_NOPE", version=V)
    assert resp.status == 404
    assert "No such trait(s): CUSTOM_NOPE." in resp.detail
    assert client.delete("/traits/CUSTOM_TRAIT_1", version=V).status == 204
    assert client.delete("/traits/CUSTOM_TRAIT_1", version=V).status == 404
    assert custom_traits(client) == []


@pytest.mark.parametrize("name", ["TRAIT_X", "CUSTOM_ABC:1", "CUSTOM_lower",
                                  "CUSTOM_" + "A" * 249])
def test_invalid_names_change_nothing(client, name):
    resp = client.put(f"/traits/{name}", version=V)
    assert resp.status == 400
    assert INVALID in resp.detail
    assert custom_traits(client) == []


def test_standard_traits_cannot_go(client):
    resp = client.delete("/traits/HW_CPU_X86_SSE", version=V)
    assert resp.status == 400
    assert "Cannot delete standard trait HW_CPU_X86_SSE." in resp.detail
    assert client.get("/traits/HW_CPU_X86_SSE", version=V).status == 204


def test_list_filters(client):
    for name in ("CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2", "CUSTOM_ANOTHER", "CUSTOM_TRAITX"):
        client.put(f"/traits/{name}", version=V)
    everything = client.get("/traits", version=V).json()["traits"]
    assert set(os_traits.get_traits()) <= set(everything)
    assert len(everything) == len(os_traits.get_traits()) + 4
    resp = client.get("/traits?name=in:CUSTOM_TRAIT_1,CUSTOM_TRAIT_2,CUSTOM_NONE", version=V)
    assert resp.json() == {"traits": ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]}
    resp = client.get("/traits?name=startswith:CUSTOM_TRAIT_", version=V)
    # '_' is a literal here, not a LIKE wildcard.
    assert resp.json()["traits"] == ["CUSTOM_TRAIT_1", "CUSTOM_TRAIT_2"]
    # An operator other than in/startswith filters nothing, as upstream.
    assert len(client.get("/traits?name=other:X", version=V).json()["traits"]) == \
        len(everything)
    resp = client.get("/traits?name=in_abc", version=V)
    assert resp.status == 400
    assert ('Badly formatted name parameter. Expected name query string parameter in form: '
            '?name=[in|startswith]:[name1,name2|prefix]. Got: "in_abc"') in resp.detail
    resp = client.get("/traits?invalid=abc", version=V)
    assert resp.status == 400
    assert "Invalid query string parameters: Additional properties are not allowed" \
        in resp.detail
    resp = client.get("/traits?associated=xyz", version=V)
    assert resp.status == 400
    assert 'The query parameter "associated" only accepts "true" or "false"' in resp.detail
    assert "last-modified" not in client.get("/traits", version="1.14").headers
    assert client.get("/traits", version="1.15").headers["cache-control"] == "no-cache"


def test_associated_filter(client):
    for name in ("CUSTOM_A", "CUSTOM_B"):
        client.put(f"/traits/{name}", version=V)
    rp = client.create_provider("cn")["uuid"]
    client.put(f"/resource_providers/{rp}/traits",
               {"traits": ["CUSTOM_A", "HW_CPU_X86_SSE"], "resource_provider_generation": 0},
               version=V)
    resp = client.get("/traits?associated=TRUE", version=V)
    assert resp.json()["traits"] == ["CUSTOM_A", "HW_CPU_X86_SSE"]
    resp = client.get("/traits?associated=false&name=startswith:CUSTOM_", version=V)
    assert resp.json()["traits"] == ["CUSTOM_B"]
    resp = client.delete("/traits/CUSTOM_A", version=V)
    assert resp.status == 409
    assert "The trait CUSTOM_A is in use by a resource provider." in resp.detail


def test_provider_traits(client):
    rp = client.create_provider("cn")["uuid"]
    client.put("/traits/CUSTOM_TRAIT_1", version=V)
    assert rp_traits(client, rp) == {"traits": [], "resource_provider_generation": 0}
    body = {"traits": ["CUSTOM_TRAIT_1", "HW_CPU_X86_SSE"], "resource_provider_generation": 0}
    resp = client.put(f"/resource_providers/{rp}/traits", body, version=V)
    assert resp.status == 200
    assert resp.json() == {"traits": ["CUSTOM_TRAIT_1", "HW_CPU_X86_SSE"],
                           "resource_provider_generation": 1}
    assert "last-modified" not in resp.headers
    # The same set again changes nothing and keeps the generation.
    body["resource_provider_generation"] = 1
    resp = client.put(f"/resource_providers/{rp}/traits", body, version="1.15")
    assert resp.json()["resource_provider_generation"] == 1
    assert resp.headers["cache-control"] == "no-cache"
    assert rp_traits(client, rp)["traits"] == ["CUSTOM_TRAIT_1", "HW_CPU_X86_SSE"]
    assert client.get(f"/resource_providers/{rp}/traits",
                      version="1.15").headers["cache-control"] == "no-cache"

    resp = client.delete(f"/resource_providers/{rp}/traits", version=V)
    assert resp.status == 204 and "content-type" not in resp.headers
    assert rp_traits(client, rp) == {"traits": [], "resource_provider_generation": 2}
    # Deleting an empty set is no change.
    client.delete(f"/resource_providers/{rp}/traits", version=V)
    assert rp_traits(client, rp)["resource_provider_generation"] == 2


@pytest.mark.parametrize("body, status, text, code", [
    ({"traits": ["CUSTOM_TRAIT_1"]}, 400,
     "'resource_provider_generation' is a required property", None),
    ({"traits": ["CUSTOM_TRAIT_1"], "resource_provider_generation": "x"}, 400,
     "'x' is not of type 'integer'", None),
    ({"traits": "CUSTOM_TRAIT_1", "resource_provider_generation": 0}, 400,
     "is not of type 'array'", None),
    ({"traits": [], "resource_provider_generation": 0, "more": 1}, 400,
     "Additional properties are not allowed", None),
    ({"traits": ["NOPE_2", "NOPE_1", "CUSTOM_TRAIT_1"], "resource_provider_generation": 0},
     400, "No such trait NOPE_1, NOPE_2", None),
    ({"traits": ["CUSTOM_TRAIT_1"], "resource_provider_generation": 5}, 409,
     "Resource provider's generation already changed. Please update the generation and "
     "try again.", "placement.concurrent_update"),
])
def test_provider_traits_refusals_change_nothing(client, body, status, text, code):
    rp = client.create_provider("cn")["uuid"]
    client.put("/traits/CUSTOM_TRAIT_1", version=V)
    resp = client.put(f"/resource_providers/{rp}/traits", body, version="1.23")
    assert resp.status == status, resp
    assert text in resp.detail
    if code:
        assert resp.error_code == code
    assert rp_traits(client, rp) == {"traits": [], "resource_provider_generation": 0}


def test_provider_traits_missing_provider(client):
    for method in ("GET", "PUT", "DELETE"):
        body = {"traits": [], "resource_provider_generation": 0} if method == "PUT" else None
        resp = client.request(method, "/resource_providers/non_existed/traits", body,
                              version=V)
        assert resp.status == 404
        assert "No resource provider with uuid non_existed found" in resp.detail




def test_concurrent_puts_create_once(client):
    statuses = race(4, lambda n: client.put("/traits/CUSTOM_RACE", version=V).status)
    assert sorted(statuses) == [201, 204, 204, 204]
    assert custom_traits(client) == ["CUSTOM_RACE"]
