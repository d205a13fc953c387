"""Per-request steps shared by every endpoint (a Falcon middleware).

Order: request id and identity from the WSGI layers below, then microversion
negotiation, the Accept check and the body preconditions; on the way out the
microversion and request-id headers.
"""

from __future__ import annotations

import falcon

from allotment import errors
from allotment.http import microversion
from allotment.http.context import Request
from allotment.http.request import accepts_json

REQUEST_ID_ENVIRON = "openstack.request_id"
IDENTITY_ENVIRON = "allotment.identity"


class PlacementMiddleware:
    def process_request(self, req: Request, resp: falcon.Response) -> None:
        env = req.env
        req.context.request_id = env.get(REQUEST_ID_ENVIRON)
        req.context.identity = env.get(IDENTITY_ENVIRON)
        headers = {}
        if "HTTP_OPENSTACK_API_VERSION" in env:
            headers["openstack-api-version"] = env["HTTP_OPENSTACK_API_VERSION"]
        if "HTTP_X_OPENSTACK_PLACEMENT_API_VERSION" in env:
            headers["x-openstack-placement-api-version"] = env[
                "HTTP_X_OPENSTACK_PLACEMENT_API_VERSION"]
        req.context.negotiated = microversion.negotiate(headers)
        length = env.get("CONTENT_LENGTH")
        if length:
            try:
                length_value = int(length)
            except ValueError:
                req.context.bare_error = True
                raise errors.BadRequest("content-length header must be an integer") from None
            if length_value and not env.get("CONTENT_TYPE"):
                req.context.bare_error = True
                raise errors.BadRequest("content-type header required when content-length > 0")

    def process_resource(self, req: Request, resp: falcon.Response, resource: object,
                         params: dict[str, str]) -> None:
        if "//" in req.path or any(value == "" for value in params.values()):
            # ``/resource_providers/`` and the like: no such URI upstream.
            req.context.bare_error = True
            raise falcon.HTTPNotFound()
        # Version discovery answers JSON whatever Accept says, as upstream.
        if req.method in ("GET", "HEAD") and req.path != "/":
            accept = req.env.get("HTTP_ACCEPT")
            if accept and accept.strip() != "*/*" and not accepts_json(accept):
                raise errors.NotAcceptable("Only application/json is provided")

    def process_response(self, req: Request, resp: falcon.Response, resource,
                         req_succeeded: bool) -> None:
        version = req.context.negotiated
        if version is not None:
            resp.set_header("openstack-api-version", f"placement {version}")
            if resource is not None and not req.context.bare_error:
                resp.set_header("vary", "openstack-api-version")
