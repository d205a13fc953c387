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

from allotment import errors, policy
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.request import Query, query, validate_query
from allotment.ledger import overview
from allotment.schemas.dashboard import (
    DEFAULT_PAGE,
    DEFAULT_RANKING,
    MAX_OFFSET,
    MAX_PAGE,
    MAX_RANKING,
    NO_QUERY,
    PAGE_QUERY,
    PROVIDERS_QUERY,
    SUMMARY_QUERY,
)


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
    # The query string's schema (``allotment.schemas.dashboard``), checked before ``read``;
    # the upper bounds it leaves open are ``_number``'s.
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

    rule = policy.DASHBOARD_PROVIDERS
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

    rule = policy.DASHBOARD_PROVIDERS
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

    rule = policy.DASHBOARD_USAGES
    query_schema = SUMMARY_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit = _number(q, "limit", DEFAULT_RANKING, MAX_RANKING)
        with self.db.read() as conn:
            return overview.summary(conn, limit, q.get("resource_class") or None)


class Projects(DashboardResource):
    """Usage per project, a page of projects at a time (``limit``, ``offset``)."""

    rule = policy.DASHBOARD_USAGES
    query_schema = PAGE_QUERY

    def read(self, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        with self.db.read() as conn:
            page = overview.usage_by_project(conn, limit, offset)
        return {"total": page.total, "limit": limit, "offset": offset,
                "projects": page.items}


class ConsumerTypes(DashboardResource):
    """The whole cloud's usage per consumer type."""

    rule = policy.DASHBOARD_USAGES

    def read(self, q: Query, **params: str) -> dict:
        with self.db.read() as conn:
            return {"consumer_types": overview.usage_by_consumer_type(conn)}


class Consumer(DashboardResource):
    """One consumer's allocations, per provider with names (empty when it holds none)."""

    rule = policy.DASHBOARD_USAGES

    def read(self, q: Query, **params: str) -> dict:
        consumer_uuid = params["consumer_uuid"].strip().lower()
        with self.db.read() as conn:
            found = overview.consumer(conn, consumer_uuid)
        return found or {"consumer_uuid": consumer_uuid, "allocations": {}}
