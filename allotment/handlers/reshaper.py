"""/reshaper (POST, 1.30+): move inventories and allocations between providers at once."""

from __future__ import annotations

import falcon

from allotment import errors
from allotment.handlers.allocations import claim_from_body
from allotment.handlers.base import Resource, require_version
from allotment.http import render
from allotment.http.request import json_body, require_json
from allotment.ledger import allocations, inventories, reshaper, retry
from allotment.schemas import reshaper as schemas


class Reshaper(Resource):
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        require_version(req, "reshaper")
        require_json(req)
        self.authorize(req, "placement:reshaper:reshape")
        version = req.context.version
        data = json_body(req, schemas.reshape_schema(version))
        new_inventories = [
            reshaper.NewInventory(provider_uuid=rp_uuid,
                                  generation=entry["resource_provider_generation"],
                                  inventories=entry["inventories"])
            for rp_uuid, entry in data["inventories"].items()]
        claims = [claim_from_body(uuid, entry, version, self.conf)
                  for uuid, entry in data["allocations"].items()]
        try:
            retry.write_with_retries(
                self.db, lambda conn: reshaper.reshape(conn, new_inventories, claims),
                self.conf.placement.allocation_conflict_retry_count)
        except (allocations.UnknownResourceClass, inventories.ResourceClassNotFound) as exc:
            raise errors.BadRequest(f"malformed reshaper data: {exc.message}") from None
        except inventories.InventoryInUse as exc:
            raise errors.Conflict(f"update conflict: {exc.message}", code=exc.code) from None
        except retry.RetriesExhausted as exc:
            raise errors.ConcurrentUpdate(f"update conflict: {exc.message}") from None
        render.no_content(resp)
