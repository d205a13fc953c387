"""/resource_providers/{uuid}/allocations: every consumer's claim on one provider."""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import UUID_PARAM, Operation, ok
from allotment.ledger import allocations
from allotment.schemas import responses as r


class ProviderAllocations(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List the allocations against a provider", (ok(200, r.PROVIDER_ALLOCATIONS),),
            rule="placement:resource_providers:allocations:list", path_params=UUID_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with explain(refusals.PROVIDER_ALLOCATIONS, uuid=uuid), \
                self.db.read() as conn:
            generation, held = allocations.of_provider(conn, uuid)
        show_generation = req.context.version.has("consumer_generation")
        by_consumer: dict[str, dict] = {}
        for item in held:
            entry = by_consumer.setdefault(item.consumer_uuid, {"resources": {}})
            entry["resources"][item.resource_class] = item.used
            if show_generation:
                entry["consumer_generation"] = item.consumer_generation
        body = {"allocations": by_consumer,
                "resource_provider_generation": generation}
        render.json_response(req, resp, body,
                             modified=(h.changed_at for h in held))
