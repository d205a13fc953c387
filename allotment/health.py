"""``GET /healthcheck``: oslo.middleware's healthcheck, with a database backend.

No token is needed (it sits outside authentication). oslo.middleware's
``[healthcheck]`` options apply as documented there (``detailed``,
``backends``, ``allowed_source_ranges``, ``ignore_proxied_requests``);
ours only changes the default backends to ``database``, so a fresh install
answers 503 when the database cannot be reached. Its answer is oslo's: a
reason per backend (JSON by default, since the request-id layer makes a
missing Accept ask for JSON; text or HTML on request), 200 or 503 (204 or
503 for HEAD), and with ``detailed = True`` the backends' details and the
process's threads, for operators only.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable

import sqlalchemy as sa
from oslo_config import cfg
from oslo_middleware.healthcheck import Healthcheck, opts
from oslo_middleware.healthcheck.pluginbase import (
    HealthcheckBaseExtension,
    HealthcheckResult,
)
from sqlalchemy.engine import URL

from allotment.db import availability
from allotment.db.engine import Database, create_engine, normalize_url

LOG = logging.getLogger(__name__)

PATH = "/healthcheck"

# Seconds a probe waits for the database (to connect, and for an answer on
# MySQL; a PostgreSQL connection that stops acknowledging data is dropped).
PROBE_TIMEOUT = 2

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]


# [healthcheck] backends unless placement.conf names others (oslo.middleware's: none).
DEFAULT_BACKENDS = ["database"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(opts.HEALTHCHECK_OPTS, group="healthcheck")
    conf.set_default("backends", DEFAULT_BACKENDS, group="healthcheck")


class HealthcheckMiddleware:
    """Answers ``/healthcheck``; every other path goes on to ``app``."""

    def __init__(self, app: WSGIApp, conf: cfg.ConfigOpts) -> None:
        register_opts(conf)
        self.app = app
        # A request the options say to ignore (source range, proxied) falls
        # through to ``app``, which knows no such path.
        self.healthcheck = Healthcheck(app, conf)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == PATH:
            return self.healthcheck(environ, start_response)
        return self.app(environ, start_response)


def probe_url(connection: str) -> URL:
    """``connection`` with short connect (and read) timeouts for the probe."""
    url = normalize_url(connection)
    backend = url.get_backend_name()
    if backend == "postgresql":
        return url.update_query_dict({"connect_timeout": str(PROBE_TIMEOUT),
                                      "tcp_user_timeout": str(PROBE_TIMEOUT * 1000)})
    if backend == "mysql":
        return url.update_query_dict({"connect_timeout": str(PROBE_TIMEOUT),
                                      "read_timeout": str(PROBE_TIMEOUT)})
    return url


def _reason(exc: Exception) -> str:
    """The driver's first line (never the URL, so never its password)."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


class DatabaseCheck(HealthcheckBaseExtension):
    """Healthy when ``SELECT 1`` answers on ``[placement_database] connection``.

    The probe has its own one-connection pool with short timeouts, so a busy
    service pool never makes it wait, and a dead database answers within
    ``PROBE_TIMEOUT`` seconds. An outage is logged once when it starts
    (by the Database, or here for any other failure), not at every probe.
    """

    def __init__(self, oslo_conf: cfg.ConfigOpts, conf: dict) -> None:
        super().__init__(oslo_conf, conf)
        self._database: Database | None = None
        self._lock = threading.Lock()
        self._healthy = True

    def _db(self) -> Database:
        with self._lock:
            if self._database is None:
                db_conf = self.oslo_conf.placement_database
                engine = create_engine(probe_url(db_conf.connection), pool_size=1,
                                       max_overflow=0, pool_timeout=PROBE_TIMEOUT,
                                       sqlite_synchronous=db_conf.sqlite_synchronous)
                self._database = Database(engine)
                # The probe's pooled connection is closed when the check goes
                # (an application discarded, as tests and reloads do): a
                # dropped engine left it to the garbage collector, unclosed.
                weakref.finalize(self, self._database.dispose)
            return self._database

    def healthcheck(self, server_port: int) -> HealthcheckResult:
        try:
            db = self._db()
            with db.read() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:  # any failure to answer is "unreachable"
            reason = _reason(exc)
            # The Database logs an outage itself (once, and when it ends).
            if self._healthy and not isinstance(exc, availability.DatabaseUnavailable):
                LOG.warning("healthcheck: the database is unreachable: %s", reason)
            self._healthy = False
            return HealthcheckResult(False, "database unreachable", details=reason)
        self._healthy = True
        return HealthcheckResult(True, "OK", details=f"{db.backend} database answers")
