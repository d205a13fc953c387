"""/dashboard/api/...: the dashboard's data as JSON (off unless ``[allotment] dashboard``).

The page (``allotment/dashboard/``) is served without a token by
``allotment.dashboard.DashboardPage``: it holds no data. These endpoints sit
behind the API's authentication like every other route and check
``allotment:dashboard:providers``, ``allotment:dashboard:usages`` or
``allotment:dashboard:consumers``, whose defaults are the upstream rules that
guard the same data (``allotment.policy``): a caller sees here no more than
upstream's API would show it. Usage per project is checked per project, as
``GET /usages`` checks it: a caller allowed only its own project's usage (a
project reader) gets that project alone. With the dashboard off they answer
as unknown paths do (404). The SQL is in ``allotment.ledger.overview``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

import falcon

from allotment import errors, policy
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.operations import CONSUMER_PARAM, UUID_PARAM, Operation, Schema, ok
from allotment.http.request import Query, query, require_utf8_path, validate_query
from allotment.ledger import overview
from allotment.schemas import responses as r
from allotment.schemas.dashboard import (
    DEFAULT_PAGE,
    DEFAULT_RANKING,
    MAX_NAMES,
    MAX_OFFSET,
    MAX_PAGE,
    MAX_RANKING,
    NO_QUERY,
    PAGE_QUERY,
    PROVIDER_NAMES_QUERY,
    PROVIDERS_QUERY,
    SUMMARY_QUERY,
)

_OPTION = "[allotment] dashboard"


def _operation(summary: str, schema: Schema, rule: str, query_string: Schema | None = None,
               path_params: dict[str, Schema] | None = None) -> Operation:
    """One of the dashboard's data routes: allotment's own, there only with the option."""
    return Operation(
        f"Dashboard: {summary} (allotment's own, with `{_OPTION} = True` only)",
        (ok(200, schema),), rule=rule,
        query=None if query_string is None else (lambda v: query_string),
        path_params=path_params or {}, requires_option=_OPTION,
        description=f"allotment's own, not Placement's "
                    f"(doc/source/operating/dashboard.md). The route is "
                    f"there only with `{_OPTION} = True`: otherwise it answers 404 as "
                    f"an unknown path does. Policy rule `{rule}` (default: the upstream "
                    "rule guarding the same data; doc/source/operating/access.md).")


def _number(q: Query, name: str, default: int, most: int) -> int:
    """A whole-number query parameter in ``0..most`` (``default`` when absent)."""
    text = q.get(name)
    if text is None:
        return default
    # Length first: int() refuses thousands of digits.
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(most)) \
            or int(text) > most:
        raise errors.BadRequest(f"Invalid query parameter {name}: {text!r} "
                                f"(a whole number up to {most} is expected).")
    return int(text)


def _page(q: Query) -> tuple[int, int]:
    """``limit`` and ``offset`` of a paged list."""
    return _number(q, "limit", DEFAULT_PAGE, MAX_PAGE), _number(q, "offset", 0, MAX_OFFSET)


class DashboardResource(Resource, abc.ABC):
    """A GET that exists only with the dashboard on, checks its rule, answers ``read``."""

    own_route = True

    # The rule's target (None: the caller's own project and user, as upstream
    # checks the rules that look at no target).
    target: ClassVar[Mapping[str, str] | None] = None

    def served(self, req: Request) -> bool:
        # With the dashboard off its data routes answer as unknown paths do.
        return bool(self.conf.allotment.dashboard)

    def policy_target(self, req: Request) -> Mapping[str, str] | None:
        return None if self.target is None else dict(self.target)

    def on_get(self, req: Request, resp: falcon.Response, **params: str) -> None:
        require_utf8_path(req)
        q = query(req)
        validate_query(q, self.query_schema(req))
        body = self.read(req, q, **params)
        render.json_response(req, resp, body, cache_headers=False)
        resp.set_header("Cache-Control", "no-store")

    def query_schema(self, req: Request) -> Schema:
        """The route's query schema (``allotment.schemas.dashboard``; the upper bounds
        it leaves open are ``_number``'s); any query string where it declares none."""
        if self.operation(req).query is None:
            return NO_QUERY
        return super().query_schema(req)

    @abc.abstractmethod
    def read(self, req: Request, q: Query, **params: str) -> dict:
        """The answer's body, from the query string and the URI's fields."""


class Providers(DashboardResource):
    """Provider trees, a page at a time: ``limit``, ``offset``, ``q`` (name part or
    uuid), ``roots`` (comma-separated root uuids)."""

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "provider trees, a page at a time, each provider with its inventories (capacity, "
        "used), traits, aggregates and first children", r.DASHBOARD_PROVIDERS,
        policy.DASHBOARD_PROVIDERS, query_string=PROVIDERS_QUERY)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
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

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "a provider's children, a page at a time, each with its descendants",
        r.DASHBOARD_CHILDREN, policy.DASHBOARD_PROVIDERS, query_string=PAGE_QUERY,
        path_params=UUID_PARAM)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        with self.db.read() as conn:
            page = overview.children(conn, params["uuid"].strip().lower(), limit, offset)
        return {"total": page.total, "limit": limit, "offset": offset,
                "children": page.items}


class ProviderNames(DashboardResource):
    """Providers' names and roots by uuid (``uuids``, comma-separated): the history's
    and the audit's entries carry uuids only. Providers that no longer exist are left
    out of the answer."""

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        f"providers' names and roots by uuid, up to {MAX_NAMES} at once (those that "
        "exist)", r.DASHBOARD_PROVIDER_NAMES, policy.DASHBOARD_PROVIDERS,
        query_string=PROVIDER_NAMES_QUERY)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
        uuids = {u.strip().lower() for u in (q.get("uuids") or "").split(",") if u.strip()}
        if len(uuids) > MAX_NAMES:
            raise errors.BadRequest(f"Invalid query parameter uuids: {len(uuids)} uuids "
                                    f"(at most {MAX_NAMES} are expected).")
        with self.db.read() as conn:
            return {"providers": overview.provider_names(conn, sorted(uuids))}


class Summary(DashboardResource):
    """Counts, totals per class, the ``limit`` fullest and emptiest providers (of
    ``resource_class`` only, when given)."""

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "counts, totals per resource class, the fullest and emptiest providers",
        r.DASHBOARD_SUMMARY, policy.DASHBOARD_PROVIDERS, query_string=SUMMARY_QUERY)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
        limit = _number(q, "limit", DEFAULT_RANKING, MAX_RANKING)
        with self.db.read() as conn:
            return overview.summary(conn, limit, q.get("resource_class") or None)


class Projects(DashboardResource):
    """Usage per project, a page of projects at a time (``limit``, ``offset``).

    The rule is checked as ``GET /usages`` checks it for the caller's own
    project (refused: 403); a caller it allows for every project (admin,
    service) gets every project, any other (a project reader) its own alone.
    """

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "usage per project, a page of projects at a time (only the caller's own "
        "project when the rule allows it no other)", r.DASHBOARD_PROJECTS,
        policy.DASHBOARD_USAGES, query_string=PAGE_QUERY)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
        limit, offset = _page(q)
        identity = req.context.identity
        every = self.services.policy.allows(identity, policy.DASHBOARD_USAGES,
                                            dict(policy.EVERY_PROJECT))
        only = None if every else [identity.project_id] if (
            identity is not None and identity.project_id) else []
        with self.db.read() as conn:
            page = overview.usage_by_project(conn, limit, offset, projects=only)
        return {"total": page.total, "limit": limit, "offset": offset,
                "projects": page.items}


class ConsumerTypes(DashboardResource):
    """The whole cloud's usage per consumer type."""

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "the whole cloud's usage per consumer type", r.DASHBOARD_CONSUMER_TYPES,
        policy.DASHBOARD_USAGES)}
    # Every project's usage, summed: the rule must allow it for any project.
    target = policy.EVERY_PROJECT

    def read(self, req: Request, q: Query, **params: str) -> dict:
        with self.db.read() as conn:
            return {"consumer_types": overview.usage_by_consumer_type(conn)}


class Consumer(DashboardResource):
    """One consumer's allocations, per provider with names (empty when it holds none)."""

    operations: ClassVar[dict[str, Operation]] = {"GET": _operation(
        "one consumer's allocations, per provider with names (none: empty allocations)",
        r.DASHBOARD_CONSUMER, policy.DASHBOARD_CONSUMERS, path_params=CONSUMER_PARAM)}

    def read(self, req: Request, q: Query, **params: str) -> dict:
        consumer_uuid = params["consumer_uuid"].strip().lower()
        with self.db.read() as conn:
            found = overview.consumer(conn, consumer_uuid)
        return found or {"consumer_uuid": consumer_uuid, "allocations": {}}
