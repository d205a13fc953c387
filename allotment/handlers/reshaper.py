"""/reshaper (POST, 1.30+): move inventories and allocations between providers at once."""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.claims import claim_from_body
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import NO_BODY, WRITE_REFUSALS, Operation, ok
from allotment.ledger import reshaper
from allotment.schemas import reshaper as schemas


class Reshaper(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "POST": Operation(
            "Move inventories and allocations between providers at once", (ok(204, NO_BODY),),
            rule="placement:reshaper:reshape", since="reshaper", refusals=WRITE_REFUSALS,
            body=schemas.reshape_schema),
    }

    def on_post(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        data = self.read_body(req)
        new_inventories = [
            reshaper.NewInventory(provider_uuid=rp_uuid,
                                  generation=entry["resource_provider_generation"],
                                  inventories=entry["inventories"])
            for rp_uuid, entry in data["inventories"].items()]
        claims = [claim_from_body(uuid, entry, version, self.conf)
                  for uuid, entry in data["allocations"].items()]
        with explain(refusals.RESHAPE):
            self.run_write(req, lambda conn: reshaper.reshape(conn, new_inventories, claims),
                           self.conf.placement.allocation_conflict_retry_count)
        render.no_content(resp)
