"""/resource_providers/{uuid}/usages and /usages (1.9+): sums of what is allocated."""

from __future__ import annotations

from typing import Any, ClassVar

import falcon

from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import UUID_PARAM, Operation, ok
from allotment.http.request import query, validate_query
from allotment.ledger import providers, usages
from allotment.ledger.errors import ProviderNotFound
from allotment.schemas import responses as r
from allotment.schemas import usages as schemas


class ProviderUsages(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show a provider's usages", (ok(200, r.PROVIDER_USAGES),),
            rule="placement:resource_providers:usages", path_params=UUID_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        self.authorize(req)
        with explain({ProviderNotFound: lambda e: f"{e}: {e}"}), self.db.read() as conn:
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

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        self.require_version(req)
        q = query(req)
        project_id = q.get("project_id")
        self.authorize(req, target={"project_id": project_id})
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
