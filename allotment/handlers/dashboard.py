"""/dashboard/api/...: the dashboard's data as JSON (off unless ``[allotment] dashboard``).

The page (``allotment/dashboard/``) is served without a token by
``allotment.dashboard.DashboardPage``: it holds no data. These endpoints sit
behind the API's authentication like every other route and check the
``allotment:dashboard:providers`` or ``allotment:dashboard:usages`` rule
(default: admin or reader). With the dashboard off they answer as unknown
paths do (404). The SQL is in ``allotment.ledger.overview``.
"""

from __future__ import annotations

import abc

import falcon

from allotment import errors
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.request import Query, query, validate_query
from allotment.ledger import overview

DEFAULT_PAGE = 50
MAX_PAGE = 500
DEFAULT_RANKING = 10
MAX_RANKING = 100
MAX_OFFSET = 10**9


def _whole(most: int, default: int, what: str) -> dict:
    return {"type": "string", "pattern": "^[0-9]+$",
            "description": f"{what}: a whole number up to {most} (default {default})."}


# The query strings, as JSON Schemas (the last value of each key): each handler
# validates with its own, and the OpenAPI document (``allotment.openapi``)
# lists them. Other keys are ignored. The upper bounds are checked by ``_number``.
_LIMIT = _whole(MAX_PAGE, DEFAULT_PAGE, "How many at most")
_OFFSET = _whole(MAX_OFFSET, 0, "How many to skip")
_PAGE_KEYS = {"limit": _LIMIT, "offset": _OFFSET}
PAGE_QUERY = {"type": "object", "properties": _PAGE_KEYS}

PROVIDERS_QUERY = {"type": "object", "properties": {
    **_PAGE_KEYS,
    "q": {"type": "string",
          "description": "Keep the trees with a provider whose name contains this "
                         "(any case) or whose uuid it is."},
    "roots": {"type": "string",
              "description": "Keep the trees of these root provider uuids "
                             "(comma-separated)."},
}}
SUMMARY_QUERY = {"type": "object", "properties": {
    "limit": _whole(MAX_RANKING, DEFAULT_RANKING, "How many fullest and emptiest providers"),
    "resource_class": {"type": "string",
                       "description": "Rank by this resource class's inventories only."},
}}
NO_QUERY: dict = {"type": "object"}


def _number(q: Query, name: str, default: int, most: int) -> int:
    """A whole-number query parameter in ``0..most`` (``default`` when absent)."""
    text = q.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) > most:
        raise errors.BadRequest(f"Invalid query parameter {name}: {text!r} "
                                f"(a whole number up to {most} is expected).")
    return int(text)


def _page(q: Query) -> tuple[int, int]:
    """``limit`` and ``offset`` of a paged list."""
    return _number(q, "limit", DEFAULT_PAGE, MAX_PAGE), _number(q, "offset", 0, MAX_OFFSET)


class DashboardResource(Resource, abc.ABC):
    """A GET that exists only with the dashboard on, checks ``rule``, answers ``read``."""

    rule = ""
    # The query string's schema (see PAGE_QUERY), checked before ``read``.
    query_schema: dict = NO_QUERY

    def on_get(self, req: Request, resp: falcon.Response, **params: str) -> None:
        if not self.conf.allotment.dashboard:
            # Exactly what a path without a route gets.
            req.context.bare_error = True
            raise falcon.HTTPRouteNotFound()
        self.authorize(req, self.rule)
        q = query(req)
        validate_query(q, self.query_schema)
        body = self.read(q, **params)
        render.json_response(req, resp, body, cache_headers=False)
        resp.set_header("Cache-Control", "no-store")

    @abc.abstractmethod
    def read(self, q: Query, **params: str) -> dict:
        """The answer's body, from the query string and the URI's fields."""


class Providers(DashboardResource):
    """Provider trees, a page at a time: ``limit``, ``offset``, ``q`` (name part or
    uuid), ``roots`` (comma-separated root uuids)."""

    rule = "allotment:dashboard:providers"
    query_schema = PROVIDERS_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        roots = q.get("roots")
        with self.db.read() as conn:
            page = overview.provider_trees(
                conn, limit, offset, search=q.get("q") or None,
                roots=[r.strip().lower() for r in roots.split(",") if r.strip()]
                if roots is not None else None)
        return {"total": page.total, "limit": limit, "offset": offset, "trees": page.items}


class ProviderChildren(DashboardResource):
    """A provider's children, a page at a time (``limit``, ``offset``): the rest of a
    tree too wide to come whole with its root."""

    rule = "allotment:dashboard:providers"
    query_schema = PAGE_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        with self.db.read() as conn:
            page = overview.children(conn, params["uuid"].strip().lower(), limit, offset)
        return {"total": page.total, "limit": limit, "offset": offset,
                "children": page.items}


class Summary(DashboardResource):
    """Counts, totals per class, the ``limit`` fullest and emptiest providers (of
    ``resource_class`` only, when given)."""

    rule = "allotment:dashboard:usages"
    query_schema = SUMMARY_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit = _number(q, "limit", DEFAULT_RANKING, MAX_RANKING)
        with self.db.read() as conn:
            return overview.summary(conn, limit, q.get("resource_class") or None)


class Projects(DashboardResource):
    """Usage per project, a page of projects at a time (``limit``, ``offset``)."""

    rule = "allotment:dashboard:usages"
    query_schema = PAGE_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        with self.db.read() as conn:
            page = overview.usage_by_project(conn, limit, offset)
        return {"total": page.total, "limit": limit, "offset": offset,
                "projects": page.items}


class ConsumerTypes(DashboardResource):
    """The whole cloud's usage per consumer type."""

    rule = "allotment:dashboard:usages"

    def read(self, q: Query, **params: str) -> dict:
        with self.db.read() as conn:
            return {"consumer_types": overview.usage_by_consumer_type(conn)}


class Consumer(DashboardResource):
    """One consumer's allocations, per provider with names (empty when it holds none)."""

    rule = "allotment:dashboard:usages"

    def read(self, q: Query, **params: str) -> dict:
        consumer_uuid = params["consumer_uuid"].strip().lower()
        with self.db.read() as conn:
            found = overview.consumer(conn, consumer_uuid)
        return found or {"consumer_uuid": consumer_uuid, "allocations": {}}
