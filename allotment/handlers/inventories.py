"""/resource_providers/{uuid}/inventories and .../inventories/{resource_class}.

The refusals are worded as upstream words them on these endpoints, since
clients and operators look for those phrases: ``allotment.refusals``'
``INVENTORY_*`` tables.
"""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import errors, refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import (
    NO_BODY,
    RC_PARAM,
    UUID_PARAM,
    WRITE_REFUSALS,
    Operation,
    ok,
)
from allotment.ledger import inventories, providers
from allotment.schemas import inventories as schemas
from allotment.schemas import responses as r


def _inventory_url(req: Request, uuid: str, resource_class: str) -> str:
    return render.absolute_url(req, f"/resource_providers/{uuid}/inventories/{resource_class}")


def _send_set(req: Request, resp: falcon.Response, generation: int,
              records: list[inventories.Inventory], from_db: bool) -> None:
    body = {
        "resource_provider_generation": generation,
        "inventories": {inv.resource_class: inv.fields() for inv in records},
    }
    # Upstream sends no last-modified for an empty set; records just written
    # count as modified now.
    render.json_response(req, resp, body, cache_headers=False)
    if req.context.version.has("cache_headers"):
        if not records:
            resp.set_header("Cache-Control", "no-cache")
        else:
            stamp = (render.newest(inv.updated_at or inv.created_at for inv in records)
                     if from_db else None)
            render.set_cache_headers(resp, stamp)


def _send_one(req: Request, resp: falcon.Response, generation: int,
              inv: inventories.Inventory, status: int = 200) -> None:
    body = inv.fields()
    # Upstream leaves the generation out when it is 0.
    if generation:
        body["resource_provider_generation"] = generation
    render.json_response(req, resp, body, status=status,
                         modified=(inv.updated_at or inv.created_at,))


class ProviderInventories(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List a provider's inventories", (ok(200, r.INVENTORIES),),
            rule="placement:resource_providers:inventories:list", path_params=UUID_PARAM),
        "POST": Operation(
            "Create one inventory", (ok(201, r.INVENTORY, "Created", location=True),),
            rule="placement:resource_providers:inventories:create", refusals=WRITE_REFUSALS,
            path_params=UUID_PARAM, body=lambda v: schemas.CREATE, body_after_provider=True),
        "PUT": Operation(
            "Replace all inventories", (ok(200, r.INVENTORIES),),
            rule="placement:resource_providers:inventories:update", refusals=WRITE_REFUSALS,
            path_params=UUID_PARAM, body=lambda v: schemas.REPLACE, body_after_provider=True),
        "DELETE": Operation(
            "Delete all inventories", (ok(204, NO_BODY),),
            rule="placement:resource_providers:inventories:delete",
            since="delete_all_inventories", gated_by_method=True, refusals=(409,),
            path_params=UUID_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with explain(refusals.INVENTORY_READ, uuid=uuid), self.db.read() as conn:
            provider = providers.require(conn, uuid)
            records = inventories.get_inventories(conn, provider.id)
        _send_set(req, resp, provider.generation, records, from_db=True)

    def on_post(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        data = self.read_body(req, provider=uuid)
        inv = inventories.from_request(data["resource_class"], data)
        with explain(refusals.INVENTORY_CREATE, uuid=uuid):
            generation = self.run_write(req, lambda conn: inventories.create(
                conn, uuid, inv, req.context.version.has("reserved_equals_total")))
        resp.set_header("Location", _inventory_url(req, uuid, inv.resource_class))
        _send_one(req, resp, generation, inv, status=201)

    def on_put(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        data = self.read_body(req, provider=uuid)
        records = [inventories.from_request(name, fields)
                   for name, fields in data["inventories"].items()]
        with explain(refusals.INVENTORIES_REPLACE, uuid=uuid):
            generation = self.run_write(req, lambda conn: inventories.replace_all(
                conn, uuid, data["resource_provider_generation"], records,
                req.context.version.has("reserved_equals_total")))
        _send_set(req, resp, generation, records, from_db=False)

    def on_delete(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        self.run_write(req, lambda conn: inventories.replace_all(
            conn, uuid, None, [], reserved_may_equal_total=True))
        render.no_content(resp)


class ProviderInventory(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show one inventory", (ok(200, r.INVENTORY),),
            rule="placement:resource_providers:inventories:show",
            path_params=UUID_PARAM | RC_PARAM),
        "PUT": Operation(
            "Update one inventory", (ok(200, r.INVENTORY),),
            rule="placement:resource_providers:inventories:update", refusals=WRITE_REFUSALS,
            path_params=UUID_PARAM | RC_PARAM, body=lambda v: schemas.INVENTORY,
            body_after_provider=True),
        "DELETE": Operation(
            "Delete one inventory", (ok(204, NO_BODY),),
            rule="placement:resource_providers:inventories:delete", refusals=(409,),
            path_params=UUID_PARAM | RC_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, uuid: str,
               resource_class: str) -> None:
        with explain(refusals.INVENTORY_READ, uuid=uuid), self.db.read() as conn:
            provider = providers.require(conn, uuid)
            records = inventories.get_inventories(conn, provider.id)
        found = [inv for inv in records if inv.resource_class == resource_class]
        if not found:
            raise errors.NotFound(f"No inventory of class {resource_class} for {uuid}")
        _send_one(req, resp, provider.generation, found[0])

    def on_put(self, req: Request, resp: falcon.Response, uuid: str,
               resource_class: str) -> None:
        data = self.read_body(req, provider=uuid)
        inv = inventories.from_request(resource_class, data)
        with explain(refusals.INVENTORY_UPDATE, uuid=uuid):
            generation = self.run_write(req, lambda conn: inventories.update(
                conn, uuid, data["resource_provider_generation"], inv,
                req.context.version.has("reserved_equals_total")))
        _send_one(req, resp, generation, inv)

    def on_delete(self, req: Request, resp: falcon.Response, uuid: str,
                  resource_class: str) -> None:
        with explain(refusals.INVENTORY_DELETE, resource_class=resource_class):
            self.run_write(req, lambda conn: inventories.delete(
                conn, uuid, resource_class))
        render.no_content(resp)
