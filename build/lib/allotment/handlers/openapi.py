"""GET /openapi.json: the OpenAPI 3.1 description of this API, reachable without a token.

The document is built from the route table the application serves (which
``allotment.wsgi`` hands to this handler: it is one line of that table) by
``allotment.openapi``; it is the same for every microversion, each part
saying which versions it belongs to.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import ClassVar

import falcon

from allotment import openapi
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.operations import Operation, ok
from allotment.schemas import responses as r
from allotment.services import Services

# URI template -> handler class, as ``allotment.wsgi.ROUTES`` lists them.
RouteTable = tuple[tuple[str, type[Resource]], ...]


@functools.cache
def _document(routes: RouteTable) -> bytes:
    # Once per process and table: every app built from the same table shares it.
    return render.encode(openapi.document(routes))


class OpenAPIDocument(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation("This OpenAPI document (no token needed)", (ok(200, r.OPENAPI),)),
    }

    def __init__(self, services: Services,
                 routes: Iterable[tuple[str, type[Resource]]] = ()) -> None:
        super().__init__(services)
        self.routes: RouteTable = tuple(routes)

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        resp.status = 200
        resp.content_type = "application/json"
        resp.data = _document(self.routes)
        # Not cached by clients across upgrades: the document changes with the code.
        resp.set_header("Cache-Control", "no-cache")
