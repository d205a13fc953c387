"""Shared pieces of the resource classes (one per URI, Falcon style)."""

from __future__ import annotations

import falcon

from allotment import errors
from allotment.services import Services

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class Resource:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db
        self.conf = services.conf

    def allowed_methods(self) -> list[str]:
        return [m for m in _METHODS if m != "HEAD" and hasattr(self, "on_" + m.lower())]

    def on_options(self, req: falcon.Request, resp: falcon.Response, **_params) -> None:
        # Upstream answers OPTIONS (outside CORS preflight) as a wrong method.
        raise falcon.HTTPMethodNotAllowed(self.allowed_methods())

    def authorize(self, req: falcon.Request, rule: str, target: dict | None = None) -> None:
        self.services.policy.authorize(req.context.identity, rule, target)


def require_version(req: falcon.Request, fact: str, status: int = 404) -> None:
    """Refuse a request whose microversion predates ``fact``."""
    if not req.context.version.has(fact):
        if status == 405:
            raise falcon.HTTPMethodNotAllowed([])
        raise errors.PlacementError("The resource could not be found.", status=status)
