"""/resource_providers/{uuid}/inventories and .../inventories/{resource_class}.

The messages wrap the ledger's reasons the way upstream words them, since
clients and operators look for these phrases.
"""

from __future__ import annotations

import falcon

from allotment import errors
from allotment.handlers.base import Resource, require_version
from allotment.http import render
from allotment.http.request import json_body, require_json, validate
from allotment.ledger import inventories, providers, retry
from allotment.schemas import inventories as schemas


def _inventory_url(req: falcon.Request, uuid: str, resource_class: str) -> str:
    return render.absolute_url(req, f"/resource_providers/{uuid}/inventories/{resource_class}")


def _send_set(req: falcon.Request, resp: falcon.Response, generation: int,
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


def _send_one(req: falcon.Request, resp: falcon.Response, generation: int,
              inv: inventories.Inventory, status: int = 200) -> None:
    body = inv.fields()
    # Upstream leaves the generation out when it is 0.
    if generation:
        body["resource_provider_generation"] = generation
    render.json_response(req, resp, body, status=status,
                         last_modified=inv.updated_at or inv.created_at)


def _check_capacity(req: falcon.Request, provider: providers.Provider,
                    records: list[inventories.Inventory], verb: str) -> None:
    try:
        inventories.check_capacity(provider.uuid, records,
                                   req.context.version.has("reserved_equals_total"))
    except inventories.InvalidCapacity as exc:
        raise errors.BadRequest(
            f"Unable to {verb} inventory for resource provider {provider.uuid}: "
            f"{exc.message}") from None


def _check_generation(provider: providers.Provider, generation: int) -> None:
    if provider.generation != generation:
        raise errors.ConcurrentUpdate("resource provider generation conflict")


class ProviderInventories(Resource):
    def on_get(self, req: falcon.Request, resp: falcon.Response, uuid: str) -> None:
        self.authorize(req, "placement:resource_providers:inventories:list")
        with self.db.read() as conn:
            provider = providers.require(conn, uuid)
            records = inventories.get_inventories(conn, provider.id)
        _send_set(req, resp, provider.generation, records, from_db=True)

    def on_post(self, req: falcon.Request, resp: falcon.Response, uuid: str) -> None:
        require_json(req)
        self.authorize(req, "placement:resource_providers:inventories:create")
        data = json_body(req)
        for attempt in retry.attempts(self.db):
            with attempt as conn:
                provider = providers.require(conn, uuid)
                validate(data, schemas.CREATE)
                inv = inventories.from_request(data["resource_class"], data)
                _check_capacity(req, provider, [inv], "create")
                try:
                    inventories.add_inventory(conn, provider, inv)
                except inventories.ResourceClassNotFound as exc:
                    raise errors.BadRequest(
                        f"Unable to create inventory for resource provider {provider.uuid}: "
                        f"{exc.message}") from None
                generation = providers.bump_generation(conn, provider)
        resp.set_header("Location", _inventory_url(req, provider.uuid, inv.resource_class))
        _send_one(req, resp, generation, inv, status=201)

    def on_put(self, req: falcon.Request, resp: falcon.Response, uuid: str) -> None:
        require_json(req)
        self.authorize(req, "placement:resource_providers:inventories:update")
        data = json_body(req)
        for attempt in retry.attempts(self.db):
            with attempt as conn:
                provider = providers.require(conn, uuid)
                validate(data, schemas.REPLACE)
                _check_generation(provider, data["resource_provider_generation"])
                records = [inventories.from_request(name, fields)
                           for name, fields in data["inventories"].items()]
                _check_capacity(req, provider, records, "update")
                try:
                    inventories.replace_inventories(conn, provider, data["inventories"])
                except inventories.ResourceClassNotFound as exc:
                    raise errors.BadRequest(
                        "Unknown resource class in inventory for resource provider "
                        f"{provider.uuid}: {exc.message}") from None
                except inventories.InventoryInUse as exc:
                    raise errors.Conflict(f"update conflict: {exc.message}",
                                          code=errors.INVENTORY_INUSE) from None
                generation = providers.bump_generation(conn, provider)
        _send_set(req, resp, generation, records, from_db=False)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, uuid: str) -> None:
        require_version(req, "delete_all_inventories", status=405)
        self.authorize(req, "placement:resource_providers:inventories:delete")
        for attempt in retry.attempts(self.db):
            with attempt as conn:
                provider = providers.require(conn, uuid)
                inventories.replace_inventories(conn, provider, {})
                try:
                    providers.bump_generation(conn, provider)
                except errors.ConcurrentUpdate:
                    raise errors.ConcurrentUpdate(
                        f"Unable to delete inventory for resource provider {provider.uuid} "
                        "because the inventory was updated by another process. Please retry "
                        "your request.") from None
        render.no_content(resp)


class ProviderInventory(Resource):
    def on_get(self, req: falcon.Request, resp: falcon.Response, uuid: str,
               resource_class: str) -> None:
        self.authorize(req, "placement:resource_providers:inventories:show")
        with self.db.read() as conn:
            provider = providers.require(conn, uuid)
            records = inventories.get_inventories(conn, provider.id)
        found = [inv for inv in records if inv.resource_class == resource_class]
        if not found:
            raise errors.NotFound(f"No inventory of class {resource_class} for {uuid}")
        _send_one(req, resp, provider.generation, found[0])

    def on_put(self, req: falcon.Request, resp: falcon.Response, uuid: str,
               resource_class: str) -> None:
        require_json(req)
        self.authorize(req, "placement:resource_providers:inventories:update")
        data = json_body(req)
        for attempt in retry.attempts(self.db):
            with attempt as conn:
                provider = providers.require(conn, uuid)
                validate(data, schemas.INVENTORY)
                _check_generation(provider, data["resource_provider_generation"])
                inv = inventories.from_request(resource_class, data)
                _check_capacity(req, provider, [inv], "update")
                try:
                    inventories.update_inventory(conn, provider, inv)
                except inventories.ResourceClassNotFound as exc:
                    raise errors.NotFound(exc.message) from None
                except inventories.InventoryNotFound as exc:
                    raise errors.BadRequest(
                        "No inventory record with resource class for resource provider "
                        f"{provider.uuid}: {exc.message}") from None
                generation = providers.bump_generation(conn, provider)
        _send_one(req, resp, generation, inv)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, uuid: str,
                  resource_class: str) -> None:
        self.authorize(req, "placement:resource_providers:inventories:delete")
        for attempt in retry.attempts(self.db):
            with attempt as conn:
                provider = providers.require(conn, uuid)
                try:
                    inventories.delete_inventory(conn, provider, resource_class)
                except (inventories.ResourceClassNotFound, inventories.InventoryNotFound) as exc:
                    raise errors.NotFound(
                        f"No inventory of class {resource_class} found for delete: "
                        f"{exc.message}") from None
                except inventories.InventoryInUse as exc:
                    # Upstream reports this case with the concurrent-update code.
                    raise errors.ConcurrentUpdate(
                        f"Unable to delete inventory of class {resource_class}: "
                        f"{exc.message}") from None
                providers.bump_generation(conn, provider)
        render.no_content(resp)
