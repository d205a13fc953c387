"""Placement error codes, and the refusals the HTTP layer raises itself.

Handlers and the HTTP plumbing raise these for what they find wrong with a
request (malformed input, a microversion without the resource, policy).
The domain raises its own exceptions (``allotment.ledger.errors``); both
kinds are rendered in one place, ``allotment.http.errors``.
"""

from __future__ import annotations

import falcon

# The ``code`` values of the error body (shown from microversion 1.23).
DEFAULT = "placement.undefined_code"
INVENTORY_INUSE = "placement.inventory.inuse"
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
PROVIDER_IN_USE = "placement.resource_provider.inuse"
PROVIDER_CANNOT_DELETE_PARENT = "placement.resource_provider.cannot_delete_parent"
RESOURCE_PROVIDER_NOT_FOUND = "placement.resource_provider.not_found"
ILLEGAL_DUPLICATE_QUERYPARAM = "placement.query.duplicate_key"
QUERYPARAM_BAD_VALUE = "placement.query.bad_value"
QUERYPARAM_MISSING_VALUE = "placement.query.missing_value"

TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Request Entity Too Large",
    414: "Request-URI Too Long",
    415: "Unsupported Media Type",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

# The first paragraph of ``detail``, as WebOb-based upstream renders it;
# clients match on substrings of the second paragraph (our message).
EXPLANATIONS = {
    400: "The server could not comply with the request since it is either "
         "malformed or otherwise incorrect.",
    401: "This server could not verify that you are authorized to access the "
         "document you requested.",
    403: "Access was denied to this resource.",
    404: "The resource could not be found.",
    405: "The method is not allowed for this resource.",
    406: "The resource could not be generated that was acceptable to your "
         "browser (content of type %s.",
    409: "There was a conflict when trying to complete your request.",
    413: "The request is larger than the server is willing or able to process.",
    415: "The request media type is not supported by this server.",
    500: "The server has either erred or is incapable of performing the "
         "requested operation.",
}


class PlacementError(Exception):
    """A refusal with an HTTP status, a message and a Placement error code."""

    status = 400

    def __init__(self, message: str, code: str = DEFAULT, status: int | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}


class BadRequest(PlacementError):
    status = 400


class NotFound(PlacementError):
    status = 404


class Conflict(PlacementError):
    status = 409


class Forbidden(PlacementError):
    status = 403


class NotAcceptable(PlacementError):
    status = 406


class MethodNotAllowedHere(falcon.HTTPMethodNotAllowed):
    """A method the URI has, but not at the request's microversion (a 405)."""
