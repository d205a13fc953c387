"""CORS from [cors] (oslo.middleware): preflight and actual requests, allowed or not."""

from __future__ import annotations

import pytest

from allotment import config
from allotment.wsgi import make_app
from tests.support.client import PlacementClient

ALLOWED = "http://valid.example.com"
REFUSED = "http://invalid.example.com"


def _client(database, tmp_path, cors_ini: str) -> PlacementClient:
    path = tmp_path / "placement.conf"
    path.write_text(f"[api]\nauth_strategy = noauth2\n"
                    f"[placement_database]\nconnection = {database.url}\n{cors_ini}")
    app = make_app(config.load([str(path)]), db=database.db, prepare=False)
    return PlacementClient(app, token=None)


@pytest.fixture
def cors(database, tmp_path) -> PlacementClient:
    return _client(database, tmp_path, (
        f"[cors]\nallowed_origin = {ALLOWED},http://other.example.com\n"
        "allow_headers = openstack-api-version,x-auth-token\n"
        "expose_headers = openstack-api-version\nmax_age = 600\n"))


def _preflight(client: PlacementClient, path: str, origin: str, method: str = "GET",
               headers: str | None = None):
    request_headers = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        request_headers["Access-Control-Request-Headers"] = headers
    return client.request("OPTIONS", path, headers=request_headers)


def test_preflight_from_allowed_origin(cors):
    resp = _preflight(cors, "/", ALLOWED, headers="openstack-api-version")
    assert resp.status == 200
    assert resp.headers["access-control-allow-origin"] == ALLOWED
    assert resp.headers["access-control-allow-headers"] == "openstack-api-version"
    assert resp.headers["access-control-allow-methods"] == "GET"
    assert resp.headers["access-control-max-age"] == "600"
    assert resp.headers["access-control-allow-credentials"] == "true"


def test_preflight_needs_no_token_on_any_path(cors):
    # The browser sends no credentials in a preflight.
    resp = _preflight(cors, "/resource_providers", ALLOWED, method="POST",
                      headers="x-auth-token")
    assert resp.status == 200
    assert resp.headers["access-control-allow-origin"] == ALLOWED
    assert resp.headers["access-control-allow-methods"] == "POST"


def test_preflight_from_other_origin_gets_no_headers(cors):
    resp = _preflight(cors, "/", REFUSED)
    assert resp.status == 200
    assert "access-control-allow-origin" not in resp.headers


def test_preflight_with_header_not_allowed_gets_no_headers(cors):
    resp = _preflight(cors, "/", ALLOWED, headers="x-not-allowed")
    assert "access-control-allow-origin" not in resp.headers


def test_actual_request_from_allowed_origin(cors):
    resp = cors.get("/resource_providers", token="admin", headers={"Origin": ALLOWED})
    assert resp.status == 200
    assert resp.headers["access-control-allow-origin"] == ALLOWED
    assert resp.headers["access-control-expose-headers"] == "openstack-api-version"
    assert resp.headers["vary"].lower().count("origin") == 1


def test_actual_request_refused_by_auth_still_readable_by_allowed_origin(cors):
    resp = cors.get("/resource_providers", headers={"Origin": ALLOWED})
    assert resp.status == 401
    assert resp.headers["access-control-allow-origin"] == ALLOWED


def test_actual_request_from_other_origin_gets_no_headers(cors):
    resp = cors.get("/", headers={"Origin": REFUSED})
    assert resp.status == 200
    assert "access-control-allow-origin" not in resp.headers


def test_second_allowed_origin(cors):
    resp = cors.get("/", headers={"Origin": "http://other.example.com"})
    assert resp.headers["access-control-allow-origin"] == "http://other.example.com"


def test_without_cors_config_options_is_405_and_no_headers(database, tmp_path):
    client = _client(database, tmp_path, "")
    resp = _preflight(client, "/", ALLOWED)
    assert resp.status == 405
    resp = client.get("/", headers={"Origin": ALLOWED})
    assert resp.status == 200
    assert "access-control-allow-origin" not in resp.headers
