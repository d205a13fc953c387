"""/resource_providers/{uuid}/usages and /usages (1.9+): sums of what is allocated."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import UUID_PARAM, Operation, ok
from allotment.http.request import query, validate_query
from allotment.ledger import providers, usages
from allotment.schemas import responses as r
from allotment.schemas import usages as schemas


class ProviderUsages(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show a provider's usages", (ok(200, r.PROVIDER_USAGES),),
            rule="placement:resource_providers:usages", path_params=UUID_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with explain(refusals.PROVIDER_USAGES), self.db.read() as conn:
            provider = providers.require(conn, uuid)
            used = usages.for_provider(conn, provider.id)
        body = {"resource_provider_generation": provider.generation, "usages": used}
        # Usage is "now": there is no meaningful modification time to show.
        render.json_response(req, resp, body)


class Usages(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show a project's (and user's) usages", (ok(200, r.USAGES),),
            rule="placement:usages", since="usages", query=schemas.list_schema),
    }

    def policy_target(self, req: Request) -> Mapping[str, Any]:
        # The queried project, as upstream checks it: a reader may see its own
        # project's usage only. Upstream reads the query string for it before
        # the policy check, so a query string that cannot be read is a 400
        # before the 403; its validation comes after (``on_get``).
        return {"project_id": query(req).get("project_id")}

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        version = req.context.version
        validate_query(q, self.query_schema(req))
        project_id = q.value("project_id")  # required by the schema
        user_id = q.get("user_id")
        found: dict[str, Any]
        with self.db.read() as conn:
            if version.has("consumer_types"):
                found = usages.for_project_by_type(conn, project_id, user_id,
                                                   q.get("consumer_type"))
            else:
                found = usages.for_project(conn, project_id, user_id)
        render.json_response(req, resp, {"usages": found})
