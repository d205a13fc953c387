"""Shared pieces of the resource classes (one per URI, Falcon style).

Each class declares its ``operations`` (``allotment.http.operations``): the
facts the handler serves by (policy rule, first microversion, schemas per
version) and the OpenAPI document describes, in one place. ``prologue``
applies them before any responder runs, so responders do the work only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import falcon
from sqlalchemy import Connection

from allotment import errors
from allotment.http.context import Request
from allotment.http.microversion import Version
from allotment.http.operations import Operation, Schema
from allotment.http.request import json_body, require_json
from allotment.ledger import providers, retry
from allotment.services import Services

T = TypeVar("T")

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class Resource:
    # HTTP method -> what it is (rule, first version, schemas, answers).
    operations: ClassVar[dict[str, Operation]] = {}
    # One of allotment's own read routes: served under the worker's
    # ``own_routes_slots`` (``allotment.http.middleware``).
    own_route: ClassVar[bool] = False

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db
        self.conf = services.conf

    def allowed_methods(self, version: Version | None = None) -> list[str]:
        """The methods of this URI (at ``version``, when given)."""
        return [m for m in _METHODS if m != "HEAD" and hasattr(self, "on_" + m.lower())
                and (version is None or (gate := self._method_gate(m)) is None
                     or version.has(gate))]

    def _method_gate(self, method: str) -> str | None:
        """The fact from which the URI has ``method``, when it had other methods before."""
        op = self.operations.get(method)
        return op.since if op is not None and op.gated_by_method else None

    def operation(self, req: Request) -> Operation:
        """What the request's method is on this URI."""
        return self.operations[req.method]

    def prologue(self, req: Request) -> None:
        """What every request to an operation passes before its responder runs.

        The route must be served (``served``), then the operation's checks in
        its order (``Operation.prologue``): the version gate, the body's media
        type where a body is read at the request's version, the policy rule.
        ``PlacementMiddleware.process_resource`` calls it once the route is
        known; a method without an operation (HEAD, OPTIONS, one the URI never
        has) has no prologue: Falcon answers it.
        """
        op = self.operations.get(req.method)
        if op is None:
            return
        if not self.served(req):
            # Exactly what a path without a route gets.
            req.context.bare_error = True
            raise falcon.HTTPRouteNotFound()
        for step in op.prologue:
            if step == "version":
                self._require_version(req, op)
            elif step == "content_type":
                if op.reads_body(req.context.version):
                    require_json(req)
            elif step == "policy" and op.rule is not None:
                self.services.policy.authorize(req.context.identity, op.rule,
                                               self.policy_target(req))

    def served(self, req: Request) -> bool:
        """Is the route there (False: 404, as an unknown path)? Routes that an
        option turns on say so here."""
        return True

    def policy_target(self, req: Request) -> Mapping[str, Any] | None:
        """The target the operation's rule is checked against (None: the caller's
        own project and user, as upstream checks rules that look at none)."""
        return None

    def _require_version(self, req: Request, op: Operation) -> None:
        """Refuse a request whose microversion predates the operation's ``since``:
        404 (the URI is not there yet) or, for a method the URI gained later, 405
        with the methods it has at that version."""
        if op.since is None or req.context.version.has(op.since):
            return
        if op.gated_by_method:
            raise errors.MethodNotAllowedHere(self.allowed_methods(req.context.version))
        raise errors.PlacementError("", status=404)

    def body_schema(self, req: Request) -> Schema:
        """The schema the request's body must pass at its microversion."""
        body = self.operation(req).body
        schema = None if body is None else body(req.context.version)
        if schema is None:
            raise LookupError(f"{type(self).__name__} takes no {req.method} body "
                              f"at {req.context.version}")
        return schema

    def query_schema(self, req: Request) -> Schema:
        """The schema the request's query string must pass at its microversion."""
        query = self.operation(req).query
        if query is None:
            raise LookupError(f"{type(self).__name__} declares no {req.method} query")
        return query(req.context.version)

    def on_options(self, req: Request, resp: falcon.Response, **_params: str) -> None:
        # Upstream answers OPTIONS (outside CORS preflight) as a wrong method.
        raise falcon.HTTPMethodNotAllowed(self.allowed_methods())

    def run_write(self, req: Request, work: Callable[[Connection], T],
                  retries: int = retry.WRITE_RETRIES) -> T:
        """``retry.run_write`` on the app's database for ``req`` (whose ids the
        history records), its lost races counted (and, now and then, the
        history trimmed in the background)."""
        try:
            return retry.run_write(self.db, work, retries, observer=self.services.counters,
                                   ids=req.context.ids)
        finally:
            self.services.history_retention.due()

    def read_body(self, req: Request, provider: str | None = None) -> Any:
        """The request's JSON body, validated with the operation's schema at the
        request's version (400 otherwise), or, for an operation whose body
        upstream reads after looking up its ``provider``
        (``Operation.body_after_provider``), that provider's 404 when it is gone."""
        schema = self.body_schema(req)
        try:
            return json_body(req, schema)
        except errors.BadRequest:
            if self.operation(req).body_after_provider:
                if provider is None:
                    raise LookupError(f"{type(self).__name__} {req.method} reads its body "
                                      "after its provider: name the provider") from None
                self._require_provider(provider)
            raise

    def _require_provider(self, uuid: str) -> None:
        """``ProviderNotFound`` (upstream's uncaught 404) unless ``uuid`` exists."""
        with self.db.read() as conn:
            providers.require(conn, uuid)
