"""GET /openapi.json: the OpenAPI 3.1 description of this API, reachable without a token.

The document is built once from the route table (``allotment.openapi``); it
is the same for every microversion, each part saying which versions it
belongs to.
"""

from __future__ import annotations

import functools

import falcon

from allotment import openapi
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request


@functools.cache
def _document() -> bytes:
    from allotment.wsgi import ROUTES  # the table this handler is one line of

    return render.encode(openapi.document(ROUTES))


class OpenAPIDocument(Resource):
    def on_get(self, req: Request, resp: falcon.Response) -> None:
        resp.status = 200
        resp.content_type = "application/json"
        resp.data = _document()
        # Not cached by clients across upgrades: the document changes with the code.
        resp.set_header("Cache-Control", "no-cache")
