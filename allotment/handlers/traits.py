"""/traits, /traits/{name} and /resource_providers/{uuid}/traits (from 1.6)."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any, ClassVar

import falcon

from allotment import errors, refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import (
    NAME_PARAM,
    NO_BODY,
    UUID_PARAM,
    WRITE_REFUSALS,
    Operation,
    ok,
)
from allotment.http.request import query, validate, validate_query
from allotment.ledger import traits
from allotment.schemas import responses as r
from allotment.schemas import traits as schemas

_INVALID_TRAIT = (
    'The trait is invalid. A valid trait must be no longer than 255 characters, start '
    'with the prefix "CUSTOM_" and use following characters: "A"-"Z", "0"-"9" and "_"')


def _traits_body(found: list[traits.Trait]) -> dict:
    return {"traits": [trait.name for trait in found]}


def _modified(found: list[traits.Trait]) -> Iterator[datetime.datetime | None]:
    return (trait.modified for trait in found)


def _name_filter(value: str) -> dict[str, Any]:
    """``in:A,B`` or ``startswith:PREFIX``; other operators filter nothing (upstream)."""
    op, sep, operand = value.partition(":")
    if not sep:
        raise errors.BadRequest(
            "Badly formatted name parameter. Expected name query string parameter in "
            f'form: ?name=[in|startswith]:[name1,name2|prefix]. Got: "{value}"')
    if op == "in":
        return {"names": operand.split(",")}
    if op == "startswith":
        return {"prefix": operand}
    return {}


class TraitCollection(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List traits", (ok(200, r.TRAITS),), rule="placement:traits:list",
            since="traits", query=lambda v: schemas.LIST),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        validate_query(q, self.query_schema(req))
        filters: dict[str, Any] = {}
        if "name" in q:
            filters = _name_filter(q.value("name"))
        if "associated" in q:
            associated = q.value("associated").lower()
            if associated not in ("true", "false"):
                raise errors.BadRequest(
                    'The query parameter "associated" only accepts "true" or "false"')
            filters["associated"] = associated == "true"
        with self.db.read() as conn:
            found = traits.list_traits(conn, **filters)
        render.json_response(req, resp, _traits_body(found),
                             modified=_modified(found))


class Trait(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Check that a trait exists", (ok(204, NO_BODY),), rule="placement:traits:show",
            # No body: upstream answers whatever Accept says.
            since="traits", path_params=NAME_PARAM, accept=None),
        "PUT": Operation(
            "Create a custom trait", (ok(201, NO_BODY, "Created", location=True),
                                      ok(204, NO_BODY, "Already there", location=True)),
            rule="placement:traits:update", since="traits", refusals=(400,),
            path_params=NAME_PARAM),
        "DELETE": Operation(
            "Delete a custom trait", (ok(204, NO_BODY),), rule="placement:traits:delete",
            since="traits", refusals=WRITE_REFUSALS, path_params=NAME_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, name: str) -> None:
        # Upstream catches a missing trait here (so its 404 carries Vary).
        with explain(refusals.TRAIT), self.db.read() as conn:
            trait = traits.require(conn, name)
        render.no_content(resp)
        if req.context.version.has("cache_headers"):
            render.set_cache_headers(resp, trait.created_at)

    def on_put(self, req: Request, resp: falcon.Response, name: str) -> None:
        try:
            validate(name, schemas.CUSTOM_TRAIT)
        except errors.BadRequest:
            raise errors.BadRequest(_INVALID_TRAIT) from None
        trait, created = self.run_write(req, lambda conn: traits.ensure(conn, name))
        render.no_content(resp)
        resp.status = 201 if created else 204
        resp.set_header("Location", render.absolute_url(req, f"/traits/{name}"))
        if req.context.version.has("cache_headers"):
            render.set_cache_headers(resp, trait.created_at)

    def on_delete(self, req: Request, resp: falcon.Response, name: str) -> None:
        with explain(refusals.TRAIT):
            self.run_write(req, lambda conn: traits.delete(conn, name))
        render.no_content(resp)


class ProviderTraits(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List a provider's traits", (ok(200, r.PROVIDER_TRAITS),),
            rule="placement:resource_providers:traits:list", since="traits",
            path_params=UUID_PARAM),
        "PUT": Operation(
            "Replace a provider's traits", (ok(200, r.PROVIDER_TRAITS),),
            rule="placement:resource_providers:traits:update", since="traits",
            refusals=WRITE_REFUSALS, path_params=UUID_PARAM,
            body=lambda v: schemas.SET_PROVIDER_TRAITS),
        "DELETE": Operation(
            "Remove all of a provider's traits", (ok(204, NO_BODY),),
            rule="placement:resource_providers:traits:delete", since="traits",
            refusals=(409,), path_params=UUID_PARAM),
    }

    def _send(self, req: Request, resp: falcon.Response, generation: int,
              found: list[traits.Trait]) -> None:
        body = {**_traits_body(found), "resource_provider_generation": generation}
        render.json_response(req, resp, body, modified=_modified(found))

    def on_get(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        with explain(refusals.PROVIDER_TRAITS_READ, uuid=uuid), self.db.read() as conn:
            generation, found = traits.traits_of_provider(conn, uuid)
        self._send(req, resp, generation, found)

    def on_put(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        data = self.read_body(req)
        with explain(refusals.PROVIDER_TRAITS_UPDATE):
            generation, found = self.run_write(req, lambda conn: (
                traits.replace_for_provider(conn, uuid, data["resource_provider_generation"],
                                            data["traits"])))
        self._send(req, resp, generation, found)

    def on_delete(self, req: Request, resp: falcon.Response, uuid: str) -> None:
        self.run_write(req, lambda conn: traits.clear_for_provider(conn, uuid))
        render.no_content(resp)
