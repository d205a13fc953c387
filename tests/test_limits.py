"""The limits the application enforces itself: query string, body, JSON depth, echoes.

The HTTP server's own refusals (headers, bodies it will not buffer) are in
tests/live/test_slow_clients.py.
"""

from __future__ import annotations

import pytest

from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient

PROVIDER = "/resource_providers"


@pytest.fixture
def small(database) -> PlacementClient:
    """A service with small limits, to reach them cheaply."""
    conf = make_conf(database.url, allotment__max_query_string_length=1024,
                     allotment__max_request_body_size=4096, allotment__max_json_depth=8)
    return PlacementClient(make_app(conf, db=database.db, prepare=False), version="1.39")


def _error(response) -> dict:
    error = response.json()["errors"][0]
    assert error["request_id"].startswith("req-")
    return error


def test_long_query_string_is_414(small: PlacementClient) -> None:
    response = small.get(PROVIDER + "?name=" + "n" * 1100)
    assert response.status == 414
    error = _error(response)
    assert "1024" in error["detail"] and "nnnn" not in error["detail"]
    assert small.get(PROVIDER + "?name=" + "n" * 200).status == 200


def test_declared_body_over_the_limit_is_413_before_reading(small: PlacementClient) -> None:
    response = small.request("POST", PROVIDER, raw=b"{}",
                             headers={"Content-Type": "application/json",
                                      "Content-Length": "5000"})
    assert response.status == 413
    assert "4096" in _error(response)["detail"]
    assert small.get(PROVIDER).json()["resource_providers"] == []


@pytest.mark.parametrize("depth", [9, 100, 2000])
def test_json_nested_too_deep_is_400(small: PlacementClient, depth: int) -> None:
    body = "[" * depth + "]" * depth
    response = small.request("POST", PROVIDER, raw=body.encode(),
                             headers={"Content-Type": "application/json"})
    assert response.status == 400
    assert "nest deeper than 8 levels" in _error(response)["detail"]


def test_deep_json_within_default_body_limit_is_400_not_500(database) -> None:
    client = PlacementClient(make_app(make_conf(database.url), db=database.db,
                                      prepare=False), version="1.39")
    for body in ("[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                 '{"name": ' + '["\\ud800", ' * 5000 + "1" + "]" * 5000 + "}"):
        response = client.request("POST", PROVIDER, raw=body.encode(),
                                  headers={"Content-Type": "application/json"})
        assert response.status == 400, response
        assert "nest deeper than 32 levels" in _error(response)["detail"]


def test_json_at_the_depth_limit_is_read(small: PlacementClient) -> None:
    # Depth 8 exactly: an object whose "name" fails the schema (so not a depth error).
    body = {"name": [[[[[[["x"]]]]]]]}
    response = small.post(PROVIDER, body)
    assert response.status == 400
    assert "JSON does not validate" in _error(response)["detail"]


def test_a_long_bad_value_is_shown_as_an_excerpt(database) -> None:
    client = PlacementClient(make_app(make_conf(database.url), db=database.db,
                                      prepare=False), version="1.39")
    name = "x" * 1_000_000
    response = client.post(PROVIDER, {"name": name})
    assert response.status == 400
    detail = _error(response)["detail"]
    assert "is too long" in detail
    assert len(response.text) < 2000
    assert "(1000002 characters)" in detail
    # A short bad value is still shown whole, as upstream shows it.
    response = client.post(PROVIDER, {"name": 7})
    assert "7 is not of type 'string'" in _error(response)["detail"]


def test_query_string_must_decode_as_utf8(small: PlacementClient) -> None:
    response = small.get(PROVIDER + "?name=%FF%FE")
    assert response.status == 400
    assert "Invalid query string" in _error(response)["detail"]
    assert small.get(PROVIDER + "?name=%C3%A9").status == 200
