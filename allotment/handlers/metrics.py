"""GET /metrics on the API's address: Prometheus metrics, for a token the policy allows.

The scrape itself is ``allotment.metrics.exposition``'s; its WSGI layer hands
this handler the way to take one (``SCRAPE_ENVIRON``) when ``[allotment]
metrics`` is on and no ``metrics_listen`` listener serves them instead.
Otherwise the route answers as unknown paths do (404). Here, unlike on the
separate listener, the request has passed the API's authentication and is
checked against ``allotment:metrics`` (default: admin): the metrics name every
provider, its tree, inventories and usage.
"""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import policy
from allotment.handlers.base import Resource
from allotment.http.context import Request
from allotment.http.operations import Operation, ok
from allotment.metrics.exposition import SCRAPE_ENVIRON

_OPTION = "[allotment] metrics"


class Metrics(Resource):
    # Not an own route (no ``own_routes_slots``): scrapes at once share one read
    # of the capacity and of the audit's counts (``allotment.metrics.exposition``)
    # and then cost a copy of bytes; a Prometheus pair scraping together must not
    # see a 503, which it records as the target down.
    operations: ClassVar[dict[str, Operation]] = {"GET": Operation(
        f"Prometheus metrics, text format (allotment's own, with `{_OPTION} = True` and "
        "no `metrics_listen` only)",
        (ok(200, None, "The metrics in Prometheus' text format (text/plain; "
                       "version=0.0.4)"),),
        rule=policy.METRICS, requires_option=_OPTION, accept=None,
        description=f"allotment's own, not Placement's "
                    f"(doc/source/operating/metrics.md). There only "
                    f"with `{_OPTION} = True` and `metrics_listen` unset: otherwise it "
                    "answers 404 as an unknown path does (a `metrics_listen` listener "
                    f"serves them without a token). Policy rule `{policy.METRICS}` "
                    "(default: admin; doc/source/operating/access.md).")}

    def served(self, req: Request) -> bool:
        # Only the WSGI layer that scrapes knows whether /metrics is this
        # address's to serve (``[allotment] metrics`` on, no ``metrics_listen``).
        return SCRAPE_ENVIRON in req.env

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        scrape = req.env[SCRAPE_ENVIRON]
        body, headers = scrape(req.get_header("Accept-Encoding") or "")
        resp.status = 200
        resp.data = body
        for name, value in headers:
            resp.set_header(name, value)
        resp.set_header("Cache-Control", "no-store")
