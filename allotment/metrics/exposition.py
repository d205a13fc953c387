"""GET /metrics, and the HTTP request metrics, as one WSGI layer.

``with_metrics`` wraps the application when ``[allotment] metrics`` is on
(and returns it untouched when off, so /metrics is then the API's ordinary
404). Where /metrics is served, and to whom:

* without ``metrics_listen``: on the API address, as an API route
  (``allotment.handlers.metrics``): past authentication, for a token that
  ``allotment:metrics`` allows (default: admin). This layer only hands the
  route the way to scrape (``SCRAPE_ENVIRON``); a caller without a token gets
  the API's 401 and never a provider's name;
* with ``metrics_listen = host:port`` (or a bare port: loopback): only on that
  listener, without a token, for Prometheus (``allotment serve`` binds it as
  well), recognised by the request's ``SERVER_PORT`` (and ``SERVER_NAME`` when
  both it and the configured host are IP addresses). There anything but
  /metrics is 404, and /metrics on the API address is 404.

A scrape answers the process metrics (every worker's, added up, in
multiprocess mode: see ``allotment.metrics``) and the cloud's capacity, read
at scrape time with two statements (``ledger.capacity.provider_report`` and
``inventory_report``) and rendered here as text directly: prometheus_client's
generic renderer takes seconds for the ~200,000 samples of 10,000 providers,
string formatting per row a tenth of that. Then the audit's counts per kind of
finding (``allotment_audit_findings{kind}``, ``ledger.audit.count``), read at
most once per ``AUDIT_CACHE_SECONDS`` in each worker: they are whole-table
counts, and an alert on them needs no fresher value. Then the headroom of the
request shapes named in ``[allotment] headroom_requests`` (``allotment_headroom
{request}``, ``allotment.metrics.headroom``), kept as long. Scrapes themselves
are not counted as API requests.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import logging
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import falcon.routing
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import QueuePool

from allotment import errors
from allotment.candidates.budget import Budget, Limits
from allotment.candidates.model import ReadModel
from allotment.db.availability import DatabaseUnavailable
from allotment.db.engine import Database
from allotment.http.environ import REQUEST_ID_ENVIRON
from allotment.ledger import audit, capacity
from allotment.metrics import REFUSAL_CODE_ENVIRON, Metrics, enable
from allotment.metrics.headroom import HeadroomGauges, parse_shapes
from allotment.metrics.kept import KeptRead

LOG = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PATH = "/metrics"
# The environ key by which the API's /metrics route (``handlers.metrics``) is
# handed the scrape: a callable of the Accept-Encoding header -> body, headers.
SCRAPE_ENVIRON = "allotment.metrics.scrape"
# Where a metrics_listen without a host listens: loopback.
LOOPBACK = "127.0.0.1"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Anything else a client sends is counted as "other": labels stay bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# (method, route) -> operation label of placement_allocation_writes.
ALLOCATION_WRITES = {
    ("PUT", "/allocations/{consumer_uuid}"): "PUT /allocations/{consumer_uuid}",
    ("POST", "/allocations"): "POST /allocations",
    ("DELETE", "/allocations/{consumer_uuid}"): "DELETE /allocations/{consumer_uuid}",
    ("POST", "/reshaper"): "POST /reshaper",
}
CONCURRENT_UPDATE = errors.CONCURRENT_UPDATE


def with_metrics(app: WSGIApp, conf: Any, db: Database, routes: list[str],
                 read_model: ReadModel | None = None,
                 budget: Callable[[], Budget] | None = None) -> WSGIApp:
    """``app`` with /metrics and request metrics, if ``[allotment] metrics`` is on.

    ``read_model`` and ``budget`` (the worker's, as the handlers have them) count
    the headroom of ``[allotment] headroom_requests``; a bad entry there raises
    ``ValueError`` now.
    """
    if not conf.allotment.metrics:
        return app
    shapes = parse_shapes(conf.allotment.headroom_requests)
    metrics, registry = enable()
    instrument_database(db, metrics)

    findings = AuditFindings(db, audit.Settings.from_conf(conf))
    room = HeadroomGauges(db, read_model, budget or (lambda: Budget(Limits.from_conf(conf))),
                          shapes)
    cloud = CapacityReport(db)

    def scrape(gzipped: bool) -> bytes:
        from prometheus_client import generate_latest

        plain, packed, age = cloud.render()
        own = generate_latest(registry) + findings.render() + room.render() + age
        if not gzipped:
            return own + plain
        # Two gzip members, one after the other, are one gzip stream (RFC 1952,
        # 2.2): the capacity's, compressed once per read, and this scrape's own.
        return gzip.compress(own, compresslevel=GZIP_LEVEL) + packed

    return MetricsMiddleware(app, metrics, scrape, routes,
                             parse_listen(conf.allotment.metrics_listen))


def parse_listen(value: str | None) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port`` for IPv6) as (host, port); without a host
    (``port`` or ``:port``) on loopback; None if unset."""
    if not value:
        return None
    host, _sep, port = value.strip().rpartition(":")
    if not (port.isascii() and port.isdigit()) or len(port) > 5 or int(port) > 65535:
        raise ValueError(f"[allotment] metrics_listen must be host:port or a port, "
                         f"not {value!r}")
    return host.strip("[]") or LOOPBACK, int(port)


class MetricsMiddleware:
    """Serves /metrics where configured; times and counts every other request."""

    def __init__(self, app: WSGIApp, metrics: Metrics, scrape: Callable[[bool], bytes],
                 routes: list[str], listen: tuple[str, int] | None) -> None:
        self.app = app
        self.metrics = metrics
        self.scrape = scrape
        self.router = falcon.routing.CompiledRouter()
        for template in routes:
            self.router.add_route(template, _Route())
        self.listen_port = str(listen[1]) if listen else None
        self.listen_ip = _ip(listen[0]) if listen else None

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if self.listen_port is not None:
            if self._on_metrics_listener(environ):
                if path == PATH:
                    return self._serve(environ, start_response)
                return _not_found(environ, start_response)
            if path == PATH:
                return _not_found(environ, start_response)
        elif path == PATH:
            # The API's route, behind authentication and its policy rule; a
            # scrape is not counted as an API request.
            environ[SCRAPE_ENVIRON] = self._render
            return self.app(environ, start_response)
        return self._timed(path, environ, start_response)

    def _on_metrics_listener(self, environ: dict[str, Any]) -> bool:
        if environ.get("SERVER_PORT") != self.listen_port:
            return False
        if self.listen_ip is None or self.listen_ip.is_unspecified:
            return True
        # Servers that name the bound address (gunicorn's own workers) tell
        # two listeners on one port apart; waitress names a host: port only.
        name = _ip(environ.get("SERVER_NAME", ""))
        return name is None or name == self.listen_ip

    def _timed(self, path: str, environ: dict[str, Any],
               start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        statuses: list[str] = []

        def start(status: str, headers: list, exc_info: Any = None) -> Any:
            statuses.append(status)
            return start_response(status, headers, exc_info)

        try:
            return self.app(environ, start)
        finally:
            self._count(path, environ, statuses[-1][:3] if statuses else "500",
                        time.perf_counter() - started)

    def _count(self, path: str, environ: dict[str, Any], status: str,
               seconds: float) -> None:
        found = self.router.find(path)
        route = (found[3] if found else None) or "unmatched"
        method = environ.get("REQUEST_METHOD", "")
        if method not in METHODS:
            method = "other"
        m = self.metrics
        m.http_requests.labels(route, method, status).inc()
        m.http_duration.labels(route, method).observe(seconds)
        operation = ALLOCATION_WRITES.get((method, route))
        if operation is not None:
            m.allocation_writes.labels(operation, _outcome(status, environ)).inc()

    def _serve(self, environ: dict[str, Any],
               start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed",
                           [("Allow", "GET, HEAD"), ("Content-Length", "0")])
            return [b""]
        body, headers = self._render(environ.get("HTTP_ACCEPT_ENCODING", ""))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [b"" if method == "HEAD" else body]

    def _render(self, accept_encoding: str) -> tuple[bytes, list[tuple[str, str]]]:
        """A scrape's body and headers (gzip when the client accepts it)."""
        gzipped = "gzip" in accept_encoding
        body = self.scrape(gzipped)
        headers = [("Content-Type", CONTENT_TYPE)]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        return body, headers


class _Route:
    """A stand-in resource: the router is asked only for URI templates."""


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _outcome(status: str, environ: dict[str, Any]) -> str:
    if status.startswith("2"):
        return "written"
    if status.startswith("5"):
        return "error"
    if environ.get(REFUSAL_CODE_ENVIRON) == CONCURRENT_UPDATE:
        return "conflict"
    return "refused"


def _not_found(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The API's 404 body (as an unknown path gets it before microversion 1.23)."""
    entry: dict[str, Any] = {"status": 404, "title": "Not Found",
                             "detail": f"{errors.EXPLANATIONS[404]}\n\n   "}
    if environ.get(REQUEST_ID_ENVIRON):
        entry["request_id"] = environ[REQUEST_ID_ENVIRON]
    body = json.dumps({"errors": [entry]}).encode()
    start_response("404 Not Found", [("Content-Type", "application/json"),
                                     ("Content-Length", str(len(body)))])
    return [body]


# --- the database: pool use and errors ----------------------------------------

_INSTRUMENTED: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def instrument_database(db: Database, metrics: Metrics) -> None:
    """Pool gauges kept current on every checkout and checkin; driver errors counted."""
    engine = db.engine
    if engine in _INSTRUMENTED:
        return
    _INSTRUMENTED.add(engine)

    @event.listens_for(engine, "handle_error")
    def _on_error(context: sa.engine.ExceptionContext) -> None:
        if context.is_disconnect:
            kind = "disconnect"
        elif context.sqlalchemy_exception is not None:
            kind = type(context.sqlalchemy_exception).__name__
        else:
            kind = type(context.original_exception).__name__
        metrics.db_errors.labels(kind).inc()

    pool = engine.pool
    if not isinstance(pool, QueuePool):
        return  # SQLite in memory, NullPool: nothing pooled to watch
    metrics.db_pool_size.set(pool.size())

    @event.listens_for(engine, "checkout")
    def _on_checkout(*_args: Any) -> None:
        # The pool already counts this connection as checked out.
        metrics.db_checked_out.set(pool.checkedout())
        metrics.db_overflow.set(max(0, pool.overflow()))

    @event.listens_for(engine, "checkin")
    def _on_checkin(*_args: Any) -> None:
        # Called before the pool takes the connection back (and closes it
        # when the pool is full, which ends one overflow connection).
        metrics.db_checked_out.set(max(0, pool.checkedout() - 1))
        closing = 1 if pool.checkedin() >= pool.size() else 0
        metrics.db_overflow.set(max(0, pool.overflow() - closing))


# --- the cloud's capacity -----------------------------------------------------

# (metric, help, column of ``capacity.inventory_report``). What openstack-exporter
# reads per provider, plus the allocation ratio. Not min_unit, max_unit or
# step_size: each would add a series per inventory record (30,000 at 10,000
# providers, a fifth more scrape time and Prometheus memory each) for values
# that rarely change and that the API shows.
INVENTORY_FAMILIES = (
    ("placement_inventory_total", "Total amount of the resource class in the provider's "
     "inventory (the inventory record's total).", "total"),
    ("placement_inventory_reserved", "Amount of the inventory reserved for other uses, "
     "never allocated.", "reserved"),
    ("placement_inventory_allocation_ratio", "Overcommit ratio: capacity is (total - "
     "reserved) x allocation_ratio.", "allocation_ratio"),
    ("placement_inventory_used", "Amount allocated to consumers (the provider's usage "
     "of the resource class).", "used"),
)


# The columns of ``capacity.inventory_report``, in order.
INVENTORY_COLUMNS = ("provider_id", "resource_class", "total", "reserved", "allocation_ratio",
                     "min_unit", "max_unit", "step_size", "used")


def _escape(value: str | None) -> str:
    """A label value in the text format."""
    if not value:
        return ""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_capacity(db: Database) -> bytes:
    """The capacity families as exposition text, read now from the database."""
    return _capacity_text(db)[0]


def _capacity_text(db: Database) -> tuple[bytes, bool]:
    """The capacity families, and whether the database could be read."""
    started = time.perf_counter()
    try:
        with db.read() as conn:
            providers = capacity.provider_report(conn)
            inventories = capacity.inventory_report(conn)
    except (SQLAlchemyError, DatabaseUnavailable) as exc:
        # DatabaseUnavailable: the database is gone (Database.read says so
        # itself, not as a driver error); the scrape still answers.
        LOG.warning("metrics: cannot read the capacity report: %s", exc)
        return _gauge("placement_capacity_scrape_success",
                      "1 if this scrape read the capacity from the database, 0 if not.",
                      0), False
    out = ["# HELP placement_resource_provider_info One sample (1) per resource provider: "
           "its name, root and parent (join on provider_uuid).\n"
           "# TYPE placement_resource_provider_info gauge\n"]
    prefix: dict[int, str] = {}
    for rp_id, uuid, name, root_uuid, parent_uuid in map(tuple, providers):
        prefix[rp_id] = f'provider_uuid="{uuid}",provider_name="{_escape(name)}"'
        out.append(f'placement_resource_provider_info{{{prefix[rp_id]},'
                   f'root_provider_uuid="{root_uuid or ""}",'
                   f'parent_provider_uuid="{parent_uuid or ""}"}} 1\n')
    # A provider created between the two statements has no prefix: skipped.
    rows = [row for row in inventories if row[0] in prefix]
    # Column by column (one transposition in C), each label string built once.
    columns = dict(zip(INVENTORY_COLUMNS, zip(*rows, strict=True), strict=True)) if rows \
        else dict.fromkeys(INVENTORY_COLUMNS, ())
    labels = [f'{prefix[rp_id]},resource_class="{rc}"}} '
              for rp_id, rc in zip(columns["provider_id"], columns["resource_class"],
                                   strict=True)]
    for name, help_text, column in INVENTORY_FAMILIES:
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n")
        out.extend([f"{name}{{{label}{value}\n"
                    for label, value in zip(labels, columns[column], strict=True)])
    body = "".join(out).encode()
    return body + _gauge(
        "placement_capacity_scrape_duration_seconds",
        "Time the read of the capacity families took (to read and render them).",
        time.perf_counter() - started) + _gauge(
        "placement_capacity_scrape_success",
        "1 if this scrape read the capacity from the database, 0 if not.", 1), True


# Seconds a worker serves the capacity it read before it reads it again. A
# scrape costs a second or more of a worker's time at 10,000 providers: ten
# scrapers, or ten scrapes at once, must cost one read, not ten.
CAPACITY_CACHE_SECONDS = 10.0
# Level 1: a quarter of the default's time, 15 % larger.
GZIP_LEVEL = 1


class CapacityReport:
    """The capacity families (``render_capacity``), read at most once every
    ``CAPACITY_CACHE_SECONDS`` in each worker (``KeptRead``), and kept both plain
    and gzipped. Each scrape says how old the numbers it gives are
    (``placement_capacity_age_seconds``).
    """

    def __init__(self, db: Database, max_age: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.max_age = CAPACITY_CACHE_SECONDS if max_age is None else max_age
        self.clock = clock
        self._kept: KeptRead[tuple[bytes, bytes]] = KeptRead(
            self._read, lambda: self.max_age, clock)

    @property
    def reads(self) -> int:
        return self._kept.reads

    def render(self) -> tuple[bytes, bytes, bytes]:
        """(plain, gzipped, the age gauge) of the capacity families."""
        (plain, packed), read_at = self._kept.get()
        return plain, packed, _gauge(
            "placement_capacity_age_seconds",
            "Seconds since the capacity families of this scrape were read from the "
            f"database (each worker reads them at most every {self.max_age:g} s).",
            round(max(self.clock() - read_at, 0.0), 3))

    def _read(self) -> tuple[tuple[bytes, bytes], bool]:
        plain, ok = _capacity_text(self.db)
        return (plain, gzip.compress(plain, compresslevel=GZIP_LEVEL)), ok


def _gauge(name: str, help_text: str, value: float) -> bytes:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name} {value}\n".encode()


# --- the audit's counts -------------------------------------------------------

# Seconds a worker keeps the audit's counts before it counts again.
AUDIT_CACHE_SECONDS = 60.0


class AuditFindings:
    """``allotment_audit_findings{kind}``: how many findings of each kind the audit
    (GET /audit/allocations) has now, counted at most every ``AUDIT_CACHE_SECONDS``
    (``KeptRead``): one COUNT per kind in one snapshot. A failed count is not
    kept: the next scrape tries again.
    """

    def __init__(self, db: Database, settings: audit.Settings) -> None:
        self.db = db
        self.settings = settings
        self._kept: KeptRead[bytes] = KeptRead(self._count, lambda: AUDIT_CACHE_SECONDS)

    def render(self) -> bytes:
        return self._kept.get()[0]

    def _count(self) -> tuple[bytes, bool]:
        try:
            with self.db.snapshot() as conn:
                counts = audit.count(conn, self.settings)
        except (SQLAlchemyError, DatabaseUnavailable) as exc:
            LOG.warning("metrics: cannot count the audit's findings: %s", exc)
            return _gauge("allotment_audit_scrape_success",
                          "1 if the audit's findings were counted, 0 if the database "
                          "could not be read.", 0), False
        out = ["# HELP allotment_audit_findings Findings of the audit (GET "
               "/audit/allocations) by kind, counted at most every "
               f"{AUDIT_CACHE_SECONDS:g} s.\n# TYPE allotment_audit_findings gauge\n"]
        out += [f'allotment_audit_findings{{kind="{kind}"}} {counts[kind]}\n'
                for kind in audit.KINDS]
        return "".join(out).encode() + _gauge(
            "allotment_audit_scrape_success",
            "1 if the audit's findings were counted, 0 if the database could not be "
            "read.", 1), True
