"""GET /history/allocations and /history/inventories: what changed, newest first.

Not upstream paths: allotment's own, from the entries the database's
triggers record for every writer (``allotment.ledger.history``). Admin-only
by default (rules ``allotment:history:allocations`` and
``allotment:history:inventories``). Paged by ``limit`` and ``marker``: an
answer's ``next_marker`` is the ``marker`` of the next (older) page, null on
the last one.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import falcon

from allotment import errors, policy
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.history_render import render_allocation_change, render_inventory_change
from allotment.http.operations import Operation, ok
from allotment.http.request import Query, excerpt, query, validate_query
from allotment.ledger import history
from allotment.schemas import responses as r
from allotment.schemas.history import (
    ALLOCATIONS_QUERY,
    DEFAULT_LIMIT,
    INVENTORIES_QUERY,
    MAX_LIMIT,
    MAX_MARKER,
)

# Times outside these are refused: every database stores them, and no entry
# is older than the feature.
_EARLIEST = datetime.datetime(1970, 1, 1)
_LATEST = datetime.datetime(9999, 12, 31)


def _time(q: Query, name: str) -> datetime.datetime | None:
    """An ISO 8601 date or time as naive UTC (an offset, when given, is applied)."""
    text = q.get(name)
    if text is None:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        except OverflowError:
            parsed = None
    if parsed is None or not _EARLIEST <= parsed <= _LATEST:
        raise errors.BadRequest(
            f"Invalid query parameter {name}: {excerpt(text)!r} (an ISO 8601 time from "
            "1970 on is expected, e.g. 2026-12-03T18:00:00Z).",
            code=errors.QUERYPARAM_BAD_VALUE)
    return parsed


def _window(q: Query) -> history.Window:
    limit_text, marker_text = q.get("limit"), q.get("marker")
    limit = DEFAULT_LIMIT if limit_text is None else int(limit_text)
    if not 1 <= limit <= MAX_LIMIT:
        raise errors.BadRequest(f"Invalid query parameter limit: {limit_text!r} (1 to "
                                f"{MAX_LIMIT} is expected).", code=errors.QUERYPARAM_BAD_VALUE)
    marker = None if marker_text is None else int(marker_text)
    if marker is not None and marker > MAX_MARKER:
        raise errors.BadRequest(f"Invalid query parameter marker: {marker_text!r} (a "
                                "next_marker of an earlier answer is expected).",
                                code=errors.QUERYPARAM_BAD_VALUE)
    since, until = _time(q, "since"), _time(q, "until")
    return history.Window(limit=limit, marker=marker, since=since, until=until)


def _uuid(q: Query, name: str) -> str | None:
    """A uuid parameter in its stored form (lower case, dashed); the schema checked it."""
    text = q.get(name)
    return None if text is None else str(uuid.UUID(text))


def _description(rule: str) -> str:
    return ("allotment's own, not Placement's "
            f"(doc/source/operating/history.md): entries the database "
            f"records for every writer, newest first, paged by `limit` and `marker`. "
            f"Policy rule `{rule}` (default: admin).")


def _answer(req: Request, resp: falcon.Response, page: history.Page,
            render_entry: Callable[[Any], dict[str, Any]]) -> None:
    """A page of entries, never cached (it changes with every write)."""
    body = {"entries": [render_entry(e) for e in page.entries],
            "next_marker": page.next_marker}
    render.json_response(req, resp, body, cache_headers=False)
    resp.set_header("Cache-Control", "no-store")


class AllocationHistory(Resource):
    own_route = True
    operations: ClassVar[dict[str, Operation]] = {"GET": Operation(
        "History: every change to what consumers hold, newest first (allotment's own)",
        (ok(200, r.HISTORY_ALLOCATIONS),), rule=policy.HISTORY_ALLOCATIONS,
        query=lambda v: ALLOCATIONS_QUERY,
        description=_description(policy.HISTORY_ALLOCATIONS))}

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        validate_query(q, ALLOCATIONS_QUERY)
        window = _window(q)
        with self.db.read() as conn:
            page = history.allocation_changes(
                conn, window, consumer_uuid=_uuid(q, "consumer_uuid"),
                provider_uuid=_uuid(q, "resource_provider_uuid"),
                project_id=q.get("project_id"))
        _answer(req, resp, page, render_allocation_change)


class InventoryHistory(Resource):
    own_route = True
    operations: ClassVar[dict[str, Operation]] = {"GET": Operation(
        "History: every change to providers' inventories, newest first (allotment's own)",
        (ok(200, r.HISTORY_INVENTORIES),), rule=policy.HISTORY_INVENTORIES,
        query=lambda v: INVENTORIES_QUERY,
        description=_description(policy.HISTORY_INVENTORIES))}

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        validate_query(q, INVENTORIES_QUERY)
        window = _window(q)
        with self.db.read() as conn:
            page = history.inventory_changes(conn, window,
                                             provider_uuid=_uuid(q, "resource_provider_uuid"))
        _answer(req, resp, page, render_inventory_change)
