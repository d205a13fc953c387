"""/resource_providers/{uuid}/aggregates (from 1.1).

From 1.19 the body carries the provider generation, which is checked and
bumped; before, writes leave the generation alone.
"""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import UUID_PARAM, WRITE_REFUSALS, Operation, ok
from allotment.ledger import aggregates
from allotment.schemas import aggregates as schemas
from allotment.schemas import responses as r


def _send(req: Request, resp: falcon.Response, generation: int,
          uuids: list[str]) -> None:
    body: dict = {"aggregates": uuids}
    if req.context.version.has("aggregates_generation"):
        body["resource_provider_generation"] = generation
    # No time is kept for the associations: like upstream, "now".
    render.json_response(req, resp, body)


class ProviderAggregates(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List a provider's aggregates", (ok(200, r.AGGREGATES),),
            rule="placement:resource_providers:aggregates:list", since="aggregates",
            # Upstream negotiates Accept here before its version gate (406 at 1.0).
            path_params=UUID_PARAM, accept="before_gate"),
        "PUT": Operation(
            "Replace a provider's aggregates", (ok(200, r.AGGREGATES),),
            rule="placement:resource_providers:aggregates:update", since="aggregates",
            refusals=WRITE_REFUSALS, path_params=UUID_PARAM,
            # Upstream's ``require_content`` wraps this versioned handler: the
            # body's media type is checked before the gate (415 at 1.0).
            prologue=("content_type", "version", "policy"), body_after_provider=True,
            body=lambda v: (schemas.SET_1_19 if v.has("aggregates_generation")
                            else schemas.SET_1_1)),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with self.db.read() as conn:
            generation, uuids = aggregates.aggregates_of_provider(conn, uuid)
        _send(req, resp, generation, uuids)

    def on_put(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with_generation = req.context.version.has("aggregates_generation")
        data = self.read_body(req, provider=uuid)
        uuids = data["aggregates"] if with_generation else data
        given = data["resource_provider_generation"] if with_generation else None
        with explain(refusals.AGGREGATES_UPDATE):
            generation = self.run_write(req, lambda conn: aggregates.replace(
                conn, uuid, uuids, given))
        _send(req, resp, generation, uuids)
