"""GET /: version discovery, reachable without a token."""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment.handlers.base import Resource
from allotment.http import microversion, render
from allotment.http.context import Request
from allotment.http.operations import Operation, ok
from allotment.schemas import responses as r


class Root(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        # Version discovery answers JSON whatever Accept says, as upstream.
        "GET": Operation("Version discovery (no token needed)", (ok(200, r.ROOT),),
                         accept=None)}

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        body = {"versions": [{
            "id": "v1.0",
            "max_version": str(microversion.MAX),
            "min_version": str(microversion.MIN),
            "status": "CURRENT",
            "links": [{"rel": "self", "href": ""}],
        }]}
        render.json_response(req, resp, body)
