"""Shared pieces of the resource classes (one per URI, Falcon style)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import falcon

from allotment import errors
from allotment.http.context import Request
from allotment.http.request import validate
from allotment.ledger import providers
from allotment.services import Services

# How upstream words a stale provider generation for traits and aggregates.
GENERATION_CHANGED = ("Resource provider's generation already changed. Please update the "
                      "generation and try again.")

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class Resource:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db
        self.conf = services.conf

    def allowed_methods(self) -> list[str]:
        return [m for m in _METHODS if m != "HEAD" and hasattr(self, "on_" + m.lower())]

    def on_options(self, req: Request, resp: falcon.Response, **_params) -> None:
        # Upstream answers OPTIONS (outside CORS preflight) as a wrong method.
        raise falcon.HTTPMethodNotAllowed(self.allowed_methods())

    def authorize(self, req: Request, rule: str,
                  target: dict[str, Any] | None = None) -> None:
        self.services.policy.authorize(req.context.identity, rule, target)

    def validate_for_provider(self, uuid: str, data: Any, schema: Mapping[str, Any]) -> None:
        """Validate a body sent to one provider's sub-resource.

        Upstream reports a missing provider before a malformed body, so a body
        that fails validation is refused with the provider's 404 if it is gone.
        """
        try:
            validate(data, schema)
        except errors.BadRequest:
            with self.db.read() as conn:
                providers.require(conn, uuid)
            raise


def require_version(req: Request, fact: str, status: int = 404) -> None:
    """Refuse a request whose microversion predates ``fact``."""
    if not req.context.version.has(fact):
        if status == 405:
            raise falcon.HTTPMethodNotAllowed([])
        raise errors.PlacementError("The resource could not be found.", status=status)
