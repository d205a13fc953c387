"""Builds the WSGI application: middleware in one visible list, routes in one table.

``application`` is the object for uwsgi, gunicorn or mod_wsgi; it reads
placement.conf the way upstream does (OS_PLACEMENT_CONFIG_DIR, /etc/placement)
and OS_<GROUP>__<OPTION> environment variables.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import falcon
from oslo_config import cfg

from allotment import auth, config, health, logs
from allotment.dashboard import DashboardPage
from allotment.db.engine import Database
from allotment.db.setup import database_from_conf, prepare_database
from allotment.handlers import (
    aggregates,
    allocation_candidates,
    allocations,
    audit,
    dashboard,
    explain,
    headroom,
    history,
    inventories,
    metrics,
    openapi,
    provider_allocations,
    providers,
    reshaper,
    resource_classes,
    root,
    traits,
    usages,
)
from allotment.handlers.base import Resource
from allotment.http import requestlog
from allotment.http.context import Request
from allotment.http.errors import handle_exception
from allotment.http.middleware import PlacementMiddleware, RequestLimits
from allotment.metrics.exposition import with_metrics
from allotment.policy import Policy
from allotment.services import Services

LOG = logging.getLogger(__name__)

# URI template -> handler class (built with the Services). Each class declares
# what its methods are (``operations``), which the OpenAPI document reads too.
ROUTES: list[tuple[str, type[Resource]]] = [
    ("/", root.Root),
    ("/resource_providers", providers.ProviderCollection),
    ("/resource_providers/{uuid}", providers.Provider),
    ("/allocation_candidates", allocation_candidates.AllocationCandidates),
    ("/explain/allocation_candidates", explain.ExplainAllocationCandidates),
    ("/headroom", headroom.Headroom),
    ("/resource_providers/{uuid}/inventories", inventories.ProviderInventories),
    ("/resource_providers/{uuid}/inventories/{resource_class}", inventories.ProviderInventory),
    ("/resource_providers/{uuid}/traits", traits.ProviderTraits),
    ("/resource_providers/{uuid}/aggregates", aggregates.ProviderAggregates),
    ("/resource_classes", resource_classes.ResourceClassCollection),
    ("/resource_classes/{name}", resource_classes.ResourceClass),
    ("/traits", traits.TraitCollection),
    ("/traits/{name}", traits.Trait),
    ("/resource_providers/{uuid}/allocations", provider_allocations.ProviderAllocations),
    ("/resource_providers/{uuid}/usages", usages.ProviderUsages),
    ("/allocations", allocations.Allocations),
    ("/allocations/{consumer_uuid}", allocations.ConsumerAllocations),
    ("/usages", usages.Usages),
    ("/reshaper", reshaper.Reshaper),
    # The dashboard's data (its page is DashboardPage, below, without a token).
    ("/dashboard/api/providers", dashboard.Providers),
    ("/dashboard/api/providers/{uuid}/children", dashboard.ProviderChildren),
    ("/dashboard/api/provider_names", dashboard.ProviderNames),
    ("/dashboard/api/summary", dashboard.Summary),
    ("/dashboard/api/projects", dashboard.Projects),
    ("/dashboard/api/consumer_types", dashboard.ConsumerTypes),
    ("/dashboard/api/consumers/{consumer_uuid}", dashboard.Consumer),
    # allotment's own: what changed, by whom.
    ("/history/allocations", history.AllocationHistory),
    ("/history/inventories", history.InventoryHistory),
    # The audit (allotment's own): what looks wrong in the database, and why.
    ("/audit/allocations", audit.AuditAllocations),
    # Prometheus metrics on the API's address, with a token (allotment's own;
    # the scrape is allotment.metrics.exposition's, outside authentication).
    ("/metrics", metrics.Metrics),
    ("/openapi.json", openapi.OpenAPIDocument),
]


def build_falcon_app(services: Services) -> falcon.App:
    app = falcon.App(middleware=[PlacementMiddleware(RequestLimits.from_conf(services.conf))],
                     request_type=Request)
    app.req_options.strip_url_path_trailing_slash = False
    app.resp_options.secure_cookies_by_default = False
    # Bodiless answers (201 before 1.20, 204) carry no content-type, as upstream.
    app.resp_options.default_media_type = None  # type: ignore[assignment]
    for template, resource in ROUTES:
        # The OpenAPI document describes the table it is one line of.
        handler = (openapi.OpenAPIDocument(services, ROUTES)
                   if resource is openapi.OpenAPIDocument else resource(services))
        app.add_route(template, handler)
    app.add_error_handler(Exception, handle_exception)
    app.add_error_handler(falcon.HTTPError, handle_exception)
    return app


# A WSGI application: environ and start_response in, the body's chunks out.
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def make_app(conf: cfg.ConfigOpts, db: Database | None = None,
             prepare: bool = True, policy: Policy | None = None) -> WSGIApp:
    """The full WSGI stack for ``conf`` (outermost middleware last in the list).

    ``db`` and ``policy`` default to the ones ``conf`` describes. A ``db`` given
    is the caller's to dispose; one made here from ``conf`` is the
    application's, disposed (its pooled connections closed) when it goes.
    """
    own_db = db is None
    db = db or database_from_conf(conf)
    if prepare:
        prepare_database(db, conf)
    services = Services(conf=conf, db=db, policy=Policy(conf) if policy is None else policy)
    app: WSGIApp = build_falcon_app(services)
    app = requestlog.IdentityLogContext(app)  # user and project into log lines
    app = auth.IdentityMiddleware(app)
    if conf.api.auth_strategy == "noauth2":
        app = auth.NoAuthMiddleware(app)
    else:
        app = auth.KeystoneAuthMiddleware(app, conf)
    app = with_metrics(app, conf, db, [template for template, _ in ROUTES],  # /metrics
                       services.read_model, services.candidate_budget)
    app = health.HealthcheckMiddleware(app, conf)  # /healthcheck, no token
    app = DashboardPage(app, conf)  # /dashboard's page and assets, no token (no data)
    app = _cors(app, conf)
    # One line per request; probes and scrapes at DEBUG while they succeed.
    app = requestlog.RequestLog(app, probes=[health.PATH, "/metrics"])
    app = auth.RequestIdMiddleware(app)
    if own_db:
        # Not left to the garbage collector: a dropped engine's pooled
        # connections were never closed (psycopg warns of each).
        weakref.finalize(app, db.dispose)
    return app


def _cors(app: WSGIApp, conf: cfg.ConfigOpts) -> WSGIApp:
    """oslo.middleware's CORS from ``[cors]``, only when an origin is allowed.

    It sits outside authentication, as upstream's does: a preflight carries
    no token, and refusals (401, 403) still get the headers an allowed
    origin's browser needs to read them.
    """
    from oslo_middleware import cors

    conf.register_opts(cors.CORS_OPTS, group="cors")
    if not conf.cors.allowed_origin:
        return app
    return cors.CORS(app, conf)


def _load_application() -> WSGIApp:
    conf = config.load()
    logs.setup(conf)
    return make_app(conf)


class _LazyApplication:
    """Defers reading config and connecting until the server first calls us."""

    def __init__(self) -> None:
        self._app: WSGIApp | None = None
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = _load_application()
        return self._app(environ, start_response)


application = _LazyApplication()
