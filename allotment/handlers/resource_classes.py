"""/resource_classes and /resource_classes/{name} (from 1.2).

PUT changes meaning at 1.7: before, it renames a custom class (JSON body);
from 1.7 it creates the class named in the URL if needed (no body).
"""

from __future__ import annotations

import datetime
from typing import ClassVar

import falcon

from allotment import refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import NAME_PARAM, NO_BODY, WRITE_REFUSALS, Operation, ok
from allotment.http.request import validate
from allotment.ledger import resource_classes
from allotment.schemas import resource_classes as schemas
from allotment.schemas import responses as r


def _class_path(req: Request, name: str) -> str:
    return f"{req.env.get('SCRIPT_NAME', '')}/resource_classes/{name}"


def _class_body(req: Request, rc: resource_classes.ResourceClass) -> dict:
    return {"name": rc.name, "links": [{"rel": "self", "href": _class_path(req, rc.name)}]}


def _modified(rc: resource_classes.ResourceClass) -> datetime.datetime | None:
    return rc.updated_at or rc.created_at


class ResourceClassCollection(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List resource classes", (ok(200, r.RESOURCE_CLASSES),),
            rule="placement:resource_classes:list", since="resource_classes"),
        "POST": Operation(
            "Create a custom resource class", (ok(201, NO_BODY, "Created", location=True),),
            rule="placement:resource_classes:create", since="resource_classes",
            refusals=WRITE_REFUSALS, body=lambda v: schemas.CLASS),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        with self.db.read() as conn:
            found = resource_classes.list_classes(conn)
        body = {"resource_classes": [_class_body(req, rc) for rc in found]}
        render.json_response(req, resp, body,
                             modified=(_modified(rc) for rc in found))

    def on_post(self, req: Request, resp: falcon.Response) -> None:
        data = self.read_body(req)
        name = data["name"]
        with explain(refusals.RESOURCE_CLASS_CREATE):
            self.run_write(req, lambda conn: resource_classes.create(conn, name))
        resp.set_header("Location", render.absolute_url(req, f"/resource_classes/{name}"))
        resp.status = 201
        resp.content_type = None


class ResourceClass(Resource):
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Show a resource class", (ok(200, r.RESOURCE_CLASS),),
            rule="placement:resource_classes:show", since="resource_classes",
            path_params=NAME_PARAM),
        "PUT": Operation(
            "Rename a custom resource class (1.2-1.6); create it if missing (1.7-)",
            (ok(200, r.RESOURCE_CLASS, "Renamed", last=6),
             ok(201, NO_BODY, "Created", first=7, location=True),
             ok(204, NO_BODY, "Already there", first=7, location=True)),
            rule="placement:resource_classes:update", since="resource_classes",
            refusals=WRITE_REFUSALS, path_params=NAME_PARAM,
            body=lambda v: None if v.has("resource_class_put_create") else schemas.CLASS),
        "DELETE": Operation(
            "Delete a custom resource class", (ok(204, NO_BODY),),
            rule="placement:resource_classes:delete", since="resource_classes",
            refusals=WRITE_REFUSALS, path_params=NAME_PARAM),
    }

    def on_get(self, req: Request, resp: falcon.Response, name: str) -> None:
        with self.db.read() as conn:
            rc = resource_classes.require(conn, name)
        render.json_response(req, resp, _class_body(req, rc), modified=(_modified(rc),))

    def on_put(self, req: Request, resp: falcon.Response, name: str) -> None:
        if req.context.version.has("resource_class_put_create"):
            self._ensure(req, resp, name)
        else:
            self._rename(req, resp, name)

    def _rename(self, req: Request, resp: falcon.Response, name: str) -> None:
        data = self.read_body(req)
        with explain(refusals.RESOURCE_CLASS_RENAME):
            rc = self.run_write(req, lambda conn: resource_classes.rename(
                conn, name, data["name"]))
        # Upstream sends no cache headers here.
        render.json_response(req, resp, _class_body(req, rc), cache_headers=False)

    def _ensure(self, req: Request, resp: falcon.Response, name: str) -> None:
        # The URL's name must pass the same schema as a POSTed body.
        validate({"name": name}, schemas.CLASS)
        created = self.run_write(req, lambda conn: resource_classes.ensure(conn, name))
        resp.status = 201 if created else 204
        resp.content_type = None
        resp.set_header("Location", render.absolute_url(req, f"/resource_classes/{name}"))

    def on_delete(self, req: Request, resp: falcon.Response, name: str) -> None:
        with explain(refusals.RESOURCE_CLASS_DELETE):
            self.run_write(req, lambda conn: resource_classes.delete(conn, name))
        render.no_content(resp)
