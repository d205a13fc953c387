"""``/healthcheck``: oslo.middleware's answer, no token, the database probed."""

from __future__ import annotations

import logging

from allotment import health
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient

# Where each backend's server is not: nothing listens on port 1, and SQLite
# cannot create a file under /proc.
UNREACHABLE = {
    "sqlite": "sqlite:////proc/allotment-nowhere/placement.sqlite",
    "postgresql": "postgresql://postgres@127.0.0.1:1/placement",
    "mysql": "mysql+pymysql://root@127.0.0.1:1/placement",
}


def _client(database, connection: str | None = None, **healthcheck) -> PlacementClient:
    conf = make_conf(connection or database.url)
    health.register_opts(conf)
    for name, value in healthcheck.items():
        conf.set_override(name, value, group="healthcheck")
    return PlacementClient(make_app(conf, db=database.db, prepare=False), token=None)


def test_healthy_without_a_token(database):
    client = _client(database)
    resp = client.get("/healthcheck")
    assert resp.status == 200
    assert resp.json() == {"detailed": False, "reasons": ["OK"]}
    assert "x-openstack-request-id" in resp.headers
    text = client.get("/healthcheck", headers={"Accept": "text/plain"})
    assert (text.status, text.text) == (200, "OK")
    assert client.request("HEAD", "/healthcheck").status == 204


def test_unreachable_database_is_503(database):
    client = _client(database, UNREACHABLE[database.backend])
    resp = client.get("/healthcheck")
    assert resp.status == 503
    assert resp.json() == {"detailed": False, "reasons": ["database unreachable"]}
    assert client.request("HEAD", "/healthcheck").status == 503
    # The API itself still answers from the service's own pool.
    assert client.get("/resource_providers", token="admin").status == 200


def test_details_for_operators(database):
    client = _client(database, UNREACHABLE[database.backend], detailed=True)
    body = client.get("/healthcheck").json()
    assert body["detailed"] is True
    [reason] = body["reasons"]
    assert reason["reason"] == "database unreachable"
    assert reason["class"] == "HealthcheckResult"
    assert reason["details"]  # the driver's own words
    healthy = _client(database, detailed=True).get("/healthcheck").json()
    assert healthy["reasons"][0]["details"] == f"{database.backend} database answers"


def test_backends_are_oslo_middleware_options(database):
    client = _client(database, UNREACHABLE[database.backend], backends=[])
    resp = client.get("/healthcheck")
    assert resp.status == 200
    assert resp.json() == {"detailed": False, "reasons": []}


def test_only_the_exact_path(database):
    client = _client(database)
    assert client.get("/healthcheck/").status == 401  # an API path: token first
    assert client.get("/healthcheck/", token="admin").status == 404


def test_probes_log_at_debug_and_outages_once(database, caplog):
    caplog.set_level(logging.DEBUG, logger="allotment")
    client = _client(database)
    client.get("/healthcheck")
    [line] = [r for r in caplog.records if r.name == "allotment.http.requestlog"]
    assert line.levelno == logging.DEBUG and '"GET /healthcheck" status: 200' in line.message
    caplog.clear()
    down = _client(database, UNREACHABLE[database.backend])
    for _ in range(3):
        down.get("/healthcheck")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1  # the outage, once (by the Database or the probe)
    assert "unavailable" in warnings[0].getMessage() or \
        "unreachable" in warnings[0].getMessage()
    lines = [r for r in caplog.records if r.name == "allotment.http.requestlog"]
    assert [r.levelno for r in lines] == [logging.INFO] * 3
