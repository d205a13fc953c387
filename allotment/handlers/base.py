"""Shared pieces of the resource classes (one per URI, Falcon style)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import falcon
from sqlalchemy import Connection

from allotment import errors
from allotment.http.context import Request
from allotment.http.microversion import Version
from allotment.http.request import validate
from allotment.ledger import providers, retry
from allotment.services import Services

T = TypeVar("T")

# How upstream words a stale provider generation for traits and aggregates.
GENERATION_CHANGED = ("Resource provider's generation already changed. Please update the "
                      "generation and try again.")

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


class Resource:
    # method -> the microversion fact from which the resource has it.
    method_gates: dict[str, str] = {}

    def __init__(self, services: Services) -> None:
        self.services = services
        self.db = services.db
        self.conf = services.conf

    def allowed_methods(self, version: Version | None = None) -> list[str]:
        """The methods of this URI (at ``version``, when given)."""
        return [m for m in _METHODS if m != "HEAD" and hasattr(self, "on_" + m.lower())
                and (version is None or m not in self.method_gates
                     or version.has(self.method_gates[m]))]

    def require_method(self, req: Request) -> None:
        """405, with the methods the URI has at this version, before the method's gate."""
        gate = self.method_gates.get(req.method)
        if gate is not None and not req.context.version.has(gate):
            raise errors.MethodNotAllowedHere(self.allowed_methods(req.context.version))

    def on_options(self, req: Request, resp: falcon.Response, **_params) -> None:
        # Upstream answers OPTIONS (outside CORS preflight) as a wrong method.
        raise falcon.HTTPMethodNotAllowed(self.allowed_methods())

    def run_write(self, work: Callable[[Connection], T],
                  retries: int = retry.WRITE_RETRIES) -> T:
        """``retry.run_write`` on the app's database, its lost races counted."""
        return retry.run_write(self.db, work, retries, observer=self.services.counters)

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


def require_version(req: Request, fact: str) -> None:
    """404 for a request whose microversion predates ``fact`` (the URI's first version)."""
    if not req.context.version.has(fact):
        raise errors.PlacementError("", status=404)
