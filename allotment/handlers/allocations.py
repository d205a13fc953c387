"""/allocations/{consumer_uuid} (GET, PUT, DELETE) and /allocations (POST, 1.13+).

The handlers turn request bodies of every version into ``allocations.Claim``
values (``http.claims``) and hand them to the ledger, which does the whole write in one
transaction (retried in a fresh one when it loses a race).
"""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import errors, refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.claims import claim_from_body
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import CONSUMER_PARAM, NO_BODY, WRITE_REFUSALS, Operation, ok
from allotment.http.request import is_uuid_like
from allotment.ledger import allocations
from allotment.ledger.consumers import UNKNOWN_TYPE
from allotment.ledger.providers import normalize_uuid
from allotment.schemas import allocations as schemas
from allotment.schemas import responses as r


def consumer_body(req: Request, found: allocations.ConsumerAllocations | None) -> dict:
    version = req.context.version
    by_provider: dict[str, dict] = {}
    for held in found.held if found else []:
        entry = by_provider.setdefault(held.provider_uuid, {"resources": {}})
        entry["resources"][held.resource_class] = held.used
        entry["generation"] = held.provider_generation
    body: dict = {"allocations": by_provider}
    if found and version.has("allocations_dict_format"):
        consumer = found.consumer
        body["project_id"] = consumer.project
        body["user_id"] = consumer.user
        if version.has("consumer_generation"):
            body["consumer_generation"] = consumer.generation
        if version.has("consumer_types"):
            body["consumer_type"] = consumer.consumer_type or UNKNOWN_TYPE
    return body


class Allocations(Resource):
    """POST /allocations: claims for several consumers, all or nothing."""

    operations: ClassVar[dict[str, Operation]] = {
        "POST": Operation(
            "Write the allocations of several consumers at once", (ok(204, NO_BODY),),
            rule="placement:allocations:manage", since="post_allocations",
            refusals=WRITE_REFUSALS, body=schemas.post_schema),
    }

    def on_post(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        data = self.read_body(req)
        claims = [claim_from_body(uuid, entry, version, self.conf)
                  for uuid, entry in data.items()]
        with explain(refusals.ALLOCATIONS_POST):
            self.run_write(req, lambda conn: allocations.write(conn, claims),
                           self.conf.placement.allocation_conflict_retry_count)
        render.no_content(resp)


class ConsumerAllocations(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List a consumer's allocations", (ok(200, r.CONSUMER_ALLOCATIONS),),
            rule="placement:allocations:list", path_params=CONSUMER_PARAM),
        "PUT": Operation(
            "Replace a consumer's allocations", (ok(204, NO_BODY),),
            rule="placement:allocations:update", refusals=WRITE_REFUSALS,
            path_params=CONSUMER_PARAM, body=schemas.put_schema),
        "DELETE": Operation(
            "Delete a consumer's allocations", (ok(204, NO_BODY),),
            rule="placement:allocations:delete", refusals=(409,),
            path_params=CONSUMER_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, consumer_uuid: str) -> None:
        with self.db.read() as conn:
            found = allocations.for_consumer(conn, consumer_uuid)
        render.json_response(
            req, resp, consumer_body(req, found),
            modified=(h.changed_at for h in found.held) if found else ())

    def on_put(self, req: Request, resp: falcon.Response, consumer_uuid: str) -> None:
        if not is_uuid_like(consumer_uuid):
            raise errors.BadRequest(f"Malformed consumer_uuid: {consumer_uuid}")
        consumer_uuid = normalize_uuid(consumer_uuid)
        version = req.context.version
        data = self.read_body(req)
        claim = claim_from_body(consumer_uuid, data, version, self.conf)
        with explain(refusals.ALLOCATIONS_PUT, consumer_uuid=consumer_uuid):
            self.run_write(req, lambda conn: allocations.write(conn, [claim]),
                           self.conf.placement.allocation_conflict_retry_count)
        render.no_content(resp)

    def on_delete(self, req: Request, resp: falcon.Response,
                  consumer_uuid: str) -> None:
        self.run_write(req, lambda conn: allocations.delete_for_consumer(
            conn, consumer_uuid), self.conf.placement.allocation_conflict_retry_count)
        render.no_content(resp)
