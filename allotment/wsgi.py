"""Builds the WSGI application: middleware in one visible list, routes in one table.

``application`` is the object for uwsgi, gunicorn or mod_wsgi; it reads
placement.conf the way upstream does (OS_PLACEMENT_CONFIG_DIR, /etc/placement)
and OS_<GROUP>__<OPTION> environment variables.
"""

from __future__ import annotations

import importlib
import logging
import threading

import falcon
from oslo_config import cfg

from allotment import auth, config
from allotment.db import migrate, standard_names
from allotment.db.engine import Database, create_engine
from allotment.http.errors import handle_exception
from allotment.http.middleware import PlacementMiddleware
from allotment.policy import Policy
from allotment.services import Services

LOG = logging.getLogger(__name__)

# URI template -> "module:Class" under allotment.handlers.
ROUTES: list[tuple[str, str]] = [
    ("/", "root:Root"),
    ("/resource_providers", "providers:ProviderCollection"),
    ("/resource_providers/{uuid}", "providers:Provider"),
    ("/allocation_candidates", "allocation_candidates:AllocationCandidates"),
    ("/resource_providers/{uuid}/inventories", "inventories:ProviderInventories"),
    ("/resource_providers/{uuid}/inventories/{resource_class}", "inventories:ProviderInventory"),
    ("/resource_providers/{uuid}/traits", "traits:ProviderTraits"),
    ("/resource_providers/{uuid}/aggregates", "aggregates:ProviderAggregates"),
    ("/resource_classes", "resource_classes:ResourceClassCollection"),
    ("/resource_classes/{name}", "resource_classes:ResourceClass"),
    ("/traits", "traits:TraitCollection"),
    ("/traits/{name}", "traits:Trait"),
    ("/resource_providers/{uuid}/allocations", "provider_allocations:ProviderAllocations"),
    ("/resource_providers/{uuid}/usages", "usages:ProviderUsages"),
    ("/allocations", "allocations:Allocations"),
    ("/allocations/{consumer_uuid}", "allocations:ConsumerAllocations"),
    ("/usages", "usages:Usages"),
    ("/reshaper", "reshaper:Reshaper"),
]


def database_from_conf(conf: cfg.ConfigOpts) -> Database:
    db_conf = conf.placement_database
    if not db_conf.connection:
        raise RuntimeError("[placement_database] connection is not set")
    engine = create_engine(
        db_conf.connection,
        sqlite_synchronous=db_conf.sqlite_synchronous,
        pool_size=db_conf.max_pool_size,
        max_overflow=db_conf.max_overflow,
        pool_timeout=db_conf.pool_timeout,
        recycle=db_conf.connection_recycle_time,
        echo=db_conf.connection_debug >= 100,
    )
    return Database(engine)


def prepare_database(db: Database, conf: cfg.ConfigOpts) -> None:
    """Schema upgrade (when configured) and the standard names sync."""
    if conf.placement_database.sync_on_startup:
        migrate.upgrade(db.engine)
    standard_names.sync(db.engine)


def build_falcon_app(services: Services) -> falcon.App:
    app = falcon.App(middleware=[PlacementMiddleware()])
    app.req_options.strip_url_path_trailing_slash = False
    app.resp_options.secure_cookies_by_default = False
    # Bodiless answers (201 before 1.20, 204) carry no content-type, as upstream.
    app.resp_options.default_media_type = None
    for template, target in ROUTES:
        module_name, class_name = target.split(":")
        module = importlib.import_module(f"allotment.handlers.{module_name}")
        app.add_route(template, getattr(module, class_name)(services))
    app.add_error_handler(Exception, handle_exception)
    app.add_error_handler(falcon.HTTPError, handle_exception)
    return app


def make_app(conf: cfg.ConfigOpts, db: Database | None = None, prepare: bool = True):
    """The full WSGI stack for ``conf`` (outermost middleware last in the list)."""
    db = db or database_from_conf(conf)
    if prepare:
        prepare_database(db, conf)
    services = Services(conf=conf, db=db, policy=Policy(conf))
    app = build_falcon_app(services)
    app = auth.IdentityMiddleware(app)
    if conf.api.auth_strategy == "noauth2":
        app = auth.NoAuthMiddleware(app)
    else:
        app = auth.KeystoneAuthMiddleware(app, conf)
    app = _cors(app, conf)
    app = auth.RequestIdMiddleware(app)
    return app


def _cors(app, conf: cfg.ConfigOpts):
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


def _load_application():
    conf = config.load()
    return make_app(conf)


class _LazyApplication:
    """Defers reading config and connecting until the server first calls us."""

    def __init__(self) -> None:
        self._app = None
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        if self._app is None:
            with self._lock:
                if self._app is None:
                    self._app = _load_application()
        return self._app(environ, start_response)


application = _LazyApplication()
