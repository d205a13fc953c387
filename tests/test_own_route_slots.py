"""allotment's own read routes share a few slots per worker (issue 32, item 5's
lesson): ten clients sending only audits, histories, dashboards or explains
must leave threads for the Placement API. One more than ``own_routes_slots``
is refused at once with 503 and Retry-After; the API is served meanwhile."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import falcon
import falcon.testing

from allotment import wsgi
from allotment.handlers.base import Resource
from allotment.http.context import Request
from allotment.http.errors import handle_exception
from allotment.http.middleware import OWN_ROUTE_RETRY_AFTER, PlacementMiddleware, RequestLimits

# Every route that is allotment's own and reads more than a few rows. Not
# /metrics: its scrapes share one kept read (tests/test_kept_read.py), and a
# scraper takes a 503 for its target down.
OWN_READS = {"/explain/allocation_candidates", "/headroom", "/history/allocations",
             "/history/inventories", "/audit/allocations"}


def test_every_own_read_route_holds_a_slot():
    routes = dict(wsgi.ROUTES)
    for template, handler in routes.items():
        expected = template in OWN_READS or template.startswith("/dashboard/api/")
        assert getattr(handler, "own_route", False) is expected, template


class _Blocking:
    own_route = True

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.entered.set()
        assert self.release.wait(10)
        resp.media = {"done": True}


class _Api:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"api": True}


def _falcon_app(slots: int) -> falcon.App:
    """The application's middleware and error renderer around test routes."""
    app = falcon.App(middleware=[PlacementMiddleware(RequestLimits(own_routes_slots=slots))],
                     request_type=Request)
    app.add_error_handler(Exception, handle_exception)
    app.add_error_handler(falcon.HTTPError, handle_exception)
    return app


def _app(slots: int) -> tuple[falcon.testing.TestClient, _Blocking]:
    app = _falcon_app(slots)
    own = _Blocking()
    app.add_route("/own", own)
    app.add_route("/api", _Api())
    return falcon.testing.TestClient(app), own


def test_one_more_than_the_slots_is_refused_at_once_and_the_api_still_served():
    client, own = _app(slots=1)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.simulate_get, "/own")
        assert own.entered.wait(10)
        refused = client.simulate_get("/own")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == str(OWN_ROUTE_RETRY_AFTER)
        error = refused.json["errors"][0]
        assert error["status"] == 503
        assert "busy" in error["detail"]
        # The API takes no slot.
        assert client.simulate_get("/api").status_code == 200
        own.release.set()
        assert first.result(10).status_code == 200
    # The slot was given back.
    assert client.simulate_get("/own").status_code == 200


def test_the_slot_is_given_back_when_the_handler_fails():
    class Failing:
        own_route = True

        def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
            raise falcon.HTTPBadRequest(description="no")

    app = _falcon_app(1)
    app.add_route("/own", Failing())
    client = falcon.testing.TestClient(app)
    for _ in range(3):
        assert client.simulate_get("/own").status_code == 400


def test_the_resource_base_is_not_an_own_route():
    assert Resource.own_route is False
