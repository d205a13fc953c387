"""/resource_providers and /resource_providers/{uuid}."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import filter_params, render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import NO_BODY, UUID_PARAM, WRITE_REFUSALS, Operation, ok
from allotment.http.request import query, validate_query
from allotment.ledger import providers
from allotment.schemas import providers as schemas
from allotment.schemas import responses as r


def provider_links(req: Request, uuid: str) -> list[dict]:
    version = req.context.version
    base = f"{req.env.get('SCRIPT_NAME', '')}/resource_providers/{uuid}"
    links = [
        {"rel": "self", "href": base},
        {"rel": "inventories", "href": f"{base}/inventories"},
        {"rel": "usages", "href": f"{base}/usages"},
    ]
    if version.has("aggregates"):
        links.append({"rel": "aggregates", "href": f"{base}/aggregates"})
    if version.has("traits"):
        links.append({"rel": "traits", "href": f"{base}/traits"})
    if version.has("provider_allocations_link"):
        links.append({"rel": "allocations", "href": f"{base}/allocations"})
    return links


def provider_body(req: Request, provider: providers.Provider) -> dict:
    body = {
        "uuid": provider.uuid,
        "name": provider.name,
        "generation": provider.generation,
        "links": provider_links(req, provider.uuid),
    }
    if req.context.version.has("provider_tree"):
        body["parent_provider_uuid"] = provider.parent_uuid
        body["root_provider_uuid"] = provider.root_uuid
    return body


def _modified(items: list[providers.Provider]) -> Iterator[datetime.datetime | None]:
    return (p.updated_at or p.created_at for p in items)


class ProviderCollection(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List resource providers", (ok(200, r.PROVIDERS),),
            rule="placement:resource_providers:list", query=schemas.list_schema),
        "POST": Operation(
            "Create a resource provider",
            (ok(201, NO_BODY, "Created", last=19, location=True),
             ok(200, r.PROVIDER, "Created", first=20, location=True)),
            rule="placement:resource_providers:create", refusals=WRITE_REFUSALS,
            body=lambda v: schemas.CREATE_1_14 if v.has("provider_tree") else schemas.CREATE),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        q = query(req)
        validate_query(q, self.query_schema(req))
        # An empty name filters nothing, as upstream.
        filter_ = providers.ProviderQuery(name=q.get("name") or None, uuid=q.get("uuid"))
        if "member_of" in q and version.has("member_of"):
            filter_.member_of = filter_params.parse_member_of(q, version)
        if "resources" in q and version.has("resources_filter"):
            filter_.resources = filter_params.parse_resources(q.value("resources"))
        if "in_tree" in q and version.has("provider_tree"):
            filter_.in_tree = filter_params.parse_in_tree(q.value("in_tree"))
        if "required" in q and version.has("providers_required"):
            filter_.required = filter_params.parse_required(q, version)
        with explain(refusals.PROVIDERS_LIST), \
                self.db.read() as conn:
            found = providers.list_providers(conn, filter_)
        body = {"resource_providers": [provider_body(req, p) for p in found]}
        render.json_response(req, resp, body, modified=_modified(found))

    def on_post(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        data = self.read_body(req)
        provider = self.run_write(req, lambda conn: providers.create(
            conn, data["name"], data.get("uuid"), data.get("parent_provider_uuid")))
        resp.set_header("Location", f"{req.env.get('SCRIPT_NAME', '')}"
                        f"/resource_providers/{provider.uuid}")
        if version.has("create_provider_returns_body"):
            render.json_response(req, resp, provider_body(req, provider),
                                 modified=_modified([provider]))
        else:
            resp.status = 201
            resp.content_type = None


class Provider(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show a resource provider", (ok(200, r.PROVIDER),),
            rule="placement:resource_providers:show", path_params=UUID_PARAM),
        "PUT": Operation(
            "Update (rename, re-parent) a resource provider", (ok(200, r.PROVIDER),),
            rule="placement:resource_providers:update", refusals=WRITE_REFUSALS,
            path_params=UUID_PARAM, body_after_provider=True,
            body=lambda v: schemas.UPDATE_1_14 if v.has("provider_tree") else schemas.UPDATE),
        "DELETE": Operation(
            "Delete a resource provider", (ok(204, NO_BODY),),
            rule="placement:resource_providers:delete", refusals=(409,),
            path_params=UUID_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with self.db.read() as conn:
            provider = providers.require(conn, uuid)
        render.json_response(req, resp, provider_body(req, provider),
                             modified=_modified([provider]))

    def on_put(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        version = req.context.version
        data = self.read_body(req, provider=uuid)
        with explain(refusals.PROVIDER_UPDATE):
            provider = self.run_write(req, lambda conn: providers.update(
                conn, uuid, data["name"], move="parent_provider_uuid" in data,
                parent_uuid=data.get("parent_provider_uuid"),
                allow_reparenting=version.has("reparent")))
        render.json_response(req, resp, provider_body(req, provider),
                             modified=_modified([provider]))

    def on_delete(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with explain(refusals.PROVIDER_DELETE):
            self.run_write(req, lambda conn: providers.delete(conn, uuid))
        render.no_content(resp)

