"""Per-request steps shared by every endpoint (a Falcon middleware).

Order: request id and identity from the WSGI layers below, then microversion
negotiation and the body preconditions; once the route is known, the Accept
check where the route's operation negotiates it (``Operation.accept``), an
own-route slot, and the operation's prologue (the handler's ``prologue``: the
version gate, the body's media type and the policy rule, in the order its
``Operation`` declares); on the way out the microversion and request-id
headers.

The prologue runs here, not in each responder: Falcon calls
``process_resource`` once per request, after routing and before whichever
responder it picks, so every operation passes the same checks in the order
its data says, and no responder can forget or reorder one.

Requests to allotment's own read routes (a handler class with ``own_route``)
each hold one of the worker's ``own_routes_slots`` from the moment the route
is known until the answer is made: they cost up to a second or more each, and
ten clients sending only them must not take every thread from the API.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import falcon
from oslo_config import cfg

from allotment import errors
from allotment.config import allotment_default
from allotment.http import microversion
from allotment.http.context import Request
from allotment.http.environ import (
    GLOBAL_REQUEST_ID_ENVIRON,
    IDENTITY_ENVIRON,
    REQUEST_ID_ENVIRON,
)
from allotment.http.operations import Operation
from allotment.http.request import NUL_REFUSED, accepts_json

# Seconds a request refused for lack of an own-route slot is told to wait.
OWN_ROUTE_RETRY_AFTER = 1


@dataclass(frozen=True)
class RequestLimits:
    """``[allotment]``'s limits that the application enforces itself.

    The HTTP server refuses oversized headers and bodies before the
    application sees them; the body check here covers external WSGI servers.
    """

    max_request_body_size: int = allotment_default("max_request_body_size")
    max_query_string_length: int = allotment_default("max_query_string_length")
    max_json_depth: int = allotment_default("max_json_depth")
    own_routes_slots: int = allotment_default("own_routes_slots")

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> RequestLimits:
        opts = conf.allotment
        return cls(max_request_body_size=opts.max_request_body_size,
                   max_query_string_length=opts.max_query_string_length,
                   max_json_depth=opts.max_json_depth,
                   own_routes_slots=opts.own_routes_slots)


class PlacementMiddleware:
    def __init__(self, limits: RequestLimits | None = None) -> None:
        self.limits = limits or RequestLimits()
        self.own_slots = threading.BoundedSemaphore(self.limits.own_routes_slots)

    def process_request(self, req: Request, resp: falcon.Response) -> None:
        env = req.env
        limits = self.limits
        req.context.request_id = env.get(REQUEST_ID_ENVIRON)
        req.context.global_request_id = env.get(GLOBAL_REQUEST_ID_ENVIRON)
        req.context.identity = env.get(IDENTITY_ENVIRON)
        req.context.max_json_depth = limits.max_json_depth
        headers = {}
        if "HTTP_OPENSTACK_API_VERSION" in env:
            headers["openstack-api-version"] = env["HTTP_OPENSTACK_API_VERSION"]
        if "HTTP_X_OPENSTACK_PLACEMENT_API_VERSION" in env:
            headers["x-openstack-placement-api-version"] = env[
                "HTTP_X_OPENSTACK_PLACEMENT_API_VERSION"]
        req.context.negotiated = microversion.negotiate(headers)
        # After the negotiation: the refusal carries its code from 1.23, as all do.
        if len(env.get("QUERY_STRING", "")) > limits.max_query_string_length:
            raise errors.PlacementError(
                f"The query string is longer than the {limits.max_query_string_length} "
                "bytes this server accepts.", status=414)
        if "\x00" in env.get("PATH_INFO", ""):
            raise errors.BadRequest(f"The request's path {NUL_REFUSED}")
        length = env.get("CONTENT_LENGTH")
        if length:
            try:
                length_value = int(length)
            except ValueError:
                req.context.bare_error = True
                raise errors.BadRequest("content-length header must be an integer") from None
            if length_value > limits.max_request_body_size:
                raise errors.PlacementError(
                    f"The request body is larger than the {limits.max_request_body_size} "
                    "bytes this server accepts.", status=413)
            if length_value and not env.get("CONTENT_TYPE"):
                req.context.bare_error = True
                raise errors.BadRequest("content-type header required when content-length > 0")

    def process_resource(self, req: Request, resp: falcon.Response, resource: object,
                         params: dict[str, str]) -> None:
        if "//" in req.path or any(value == "" for value in params.values()):
            # ``/resource_providers/`` and the like: no such URI upstream.
            req.context.bare_error = True
            raise falcon.HTTPNotFound()
        # Accept is negotiated where the operation says (``Operation.accept``):
        # a GET before its first microversion is the gate's 404, as upstream.
        # HEAD has no operation (upstream answers it 405, as Falcon does).
        if req.method == "GET" and req.context.negotiated is not None:
            accept = req.env.get("HTTP_ACCEPT")
            if accept and accept.strip() != "*/*" and not accepts_json(accept):
                operations: Mapping[str, Operation] = getattr(resource, "operations", {})
                op = operations.get(req.method)
                if op is not None and op.negotiates_accept(req.context.negotiated):
                    raise errors.NotAcceptable("Only application/json is provided")
        if getattr(resource, "own_route", False):
            if not self.own_slots.acquire(blocking=False):
                raise errors.PlacementError(
                    "This server is busy answering other requests of this kind; retry in "
                    f"{OWN_ROUTE_RETRY_AFTER} second.", status=503,
                    headers={"Retry-After": str(OWN_ROUTE_RETRY_AFTER)})
            req.context.holds_own_slot = True
        # ``allotment.handlers.base.Resource.prologue`` (the layers go down:
        # this module knows handlers only by the method they have).
        prologue = getattr(resource, "prologue", None)
        if prologue is not None:
            prologue(req)

    def process_response(self, req: Request, resp: falcon.Response, resource: object,
                         req_succeeded: bool) -> None:
        if req.context.holds_own_slot:
            req.context.holds_own_slot = False
            self.own_slots.release()
        version = req.context.negotiated
        if version is not None:
            resp.set_header("openstack-api-version", f"placement {version}")
            if resource is not None and not req.context.bare_error:
                resp.set_header("vary", "openstack-api-version")
