"""The typed state of one request, as handlers see it (Falcon's ``context_type``)."""

from __future__ import annotations

import falcon

from allotment.config import allotment_default
from allotment.db.writer import RequestIds
from allotment.http.environ import Identity
from allotment.http.microversion import Version


class RequestContext:
    """Filled by ``PlacementMiddleware`` before any handler runs."""

    __slots__ = ("bare_error", "global_request_id", "holds_own_slot", "identity",
                 "max_json_depth", "negotiated", "request_id")

    def __init__(self) -> None:
        self.request_id: str | None = None
        # The caller's own request id (nova's), when it sent a valid one.
        self.global_request_id: str | None = None
        self.identity: Identity | None = None
        # None until negotiated, and for errors raised before negotiation.
        self.negotiated: Version | None = None
        # An error that upstream raises past its handlers (no route, a missing
        # provider it does not catch, policy): answered without Vary, as there.
        self.bare_error = False
        # ``[allotment] max_json_depth``, set with the other request limits.
        self.max_json_depth: int = allotment_default("max_json_depth")
        # One of the worker's ``[allotment] own_routes_slots`` is held (released
        # on the way out).
        self.holds_own_slot = False

    @property
    def ids(self) -> RequestIds:
        """The ids the history records for this request's writes."""
        return RequestIds(self.request_id, self.global_request_id)

    @property
    def version(self) -> Version:
        """The request's microversion (handlers run only after negotiation)."""
        if self.negotiated is None:
            raise RuntimeError("the microversion has not been negotiated yet")
        return self.negotiated


class Request(falcon.Request):
    context_type = RequestContext
    context: RequestContext  # type: ignore[assignment]
