"""One log line per request, and the request's identity in every log line.

``RequestLog`` sits just inside ``auth.RequestIdMiddleware`` and outside
authentication, so refusals (401) are logged too. It makes an oslo.context
``RequestContext`` current for the request's thread; oslo.log's formatter
puts it in each line's prefix, ``[global-id request-id user project ...]``.
``IdentityLogContext``, inside ``auth.IdentityMiddleware``, adds the user and
project to it once they are known, so the handler's own lines carry them.

The line itself is upstream's (remote address, method, path and query,
status, length, microversion) plus the time taken, at INFO; 5xx at ERROR
(the traceback is logged once, where the exception is caught) except 503,
the database being away, at WARNING; and the body
of a 4xx at DEBUG. Paths named as ``probes`` (/healthcheck) log at DEBUG
while they succeed, so frequent probes do not fill the log.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from types import TracebackType

import webob.exc
from oslo_context import context as oslo_context

from allotment.http.environ import (
    GLOBAL_REQUEST_ID_ENVIRON,
    IDENTITY_ENVIRON,
    REQUEST_ID_ENVIRON,
)

LOG = logging.getLogger(__name__)

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]

CONTEXT_ENVIRON = "allotment.log_context"

# A caller's (nova's) own request id, as oslo.middleware accepts it.
_GLOBAL_REQUEST_ID = re.compile(
    r"req-[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}")

# How much of a 4xx body the DEBUG line shows.
_DETAIL_CHARS = 500


def _uri(environ: dict) -> str:
    uri = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
    if environ.get("QUERY_STRING"):
        uri += "?" + environ["QUERY_STRING"]
    return uri


def _fill_identity(context: oslo_context.RequestContext, environ: dict) -> None:
    identity = environ.get(IDENTITY_ENVIRON)
    if identity is not None:
        context.user_id = identity.user_id
        context.project_id = identity.project_id


class _Response:
    """What the log line needs from ``start_response``."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.length: str = "-"
        self.microversion: str = "-"

    def record(self, status: str, headers: list[tuple[str, str]]) -> None:
        self.status = int(status.split(None, 1)[0])
        for name, value in headers:
            lowered = name.lower()
            if lowered == "content-length":
                self.length = value
            elif lowered == "openstack-api-version":
                self.microversion = value.rpartition(" ")[2]


class RequestLog:
    """Logs each request once its answer is ready."""

    def __init__(self, app: WSGIApp, probes: Collection[str] = ()) -> None:
        self.app = app
        self.probes = frozenset(probes)

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        started = time.monotonic()
        caller_id = environ.get("HTTP_X_OPENSTACK_REQUEST_ID", "")
        global_request_id = caller_id if _GLOBAL_REQUEST_ID.fullmatch(caller_id) else None
        # The handlers read it from here for the history (``RequestContext``),
        # the log lines from the thread's oslo.context.
        environ[GLOBAL_REQUEST_ID_ENVIRON] = global_request_id
        context = oslo_context.RequestContext(
            request_id=environ.get(REQUEST_ID_ENVIRON),
            global_request_id=global_request_id, overwrite=True)
        environ[CONTEXT_ENVIRON] = context
        response = _Response()

        def _start(status: str, headers: list[tuple[str, str]],
                   exc_info: ExcInfo | None = None) -> Callable[[bytes], object]:
            response.record(status, headers)
            return start_response(status, headers, exc_info)

        try:
            body = self.app(environ, _start)
        except Exception:
            # Escaped every layer below (Falcon's errors are rendered there):
            # logged here, once, and answered as a plain 500.
            _fill_identity(context, environ)
            LOG.exception("%s failed", self._describe(environ, None, started))
            return webob.exc.HTTPInternalServerError()(environ, _start)
        if response.status is None:  # start_response comes with the first chunk
            return self._log_when_done(body, environ, response, started)
        self._write(environ, response, started, body)
        return body

    def _log_when_done(self, body: Iterable[bytes], environ: dict, response: _Response,
                       started: float) -> Iterator[bytes]:
        try:
            yield from body
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            self._write(environ, response, started, None)

    def _describe(self, environ: dict, response: _Response | None, started: float) -> str:
        if response is None:
            status, length, microversion = "500", "-", "-"
        else:
            status, length = str(response.status or "-"), response.length
            microversion = response.microversion
        return (f'{environ.get("REMOTE_ADDR") or "-"} '
                f'"{environ.get("REQUEST_METHOD")} {_uri(environ)}" '
                f"status: {status} len: {length} microversion: {microversion} "
                f"time: {time.monotonic() - started:.3f}")

    def _write(self, environ: dict, response: _Response, started: float,
               body: Iterable[bytes] | None) -> None:
        context = environ[CONTEXT_ENVIRON]
        _fill_identity(context, environ)
        # Another request on this thread may have been served meanwhile
        # (a body streamed lazily); the line is this request's.
        context.update_store()
        status = response.status or 500
        if environ.get("PATH_INFO") in self.probes:
            level = logging.DEBUG if status < 400 else logging.INFO
        elif status == 503:
            # The database is away: logged once by the Database; each refusal
            # is expected meanwhile, not an error of this request.
            level = logging.WARNING
        elif status >= 500:
            level = logging.ERROR
        else:
            level = logging.INFO
        if not LOG.isEnabledFor(level):
            return
        LOG.log(level, "%s", self._describe(environ, response, started))
        if 400 <= status < 500 and isinstance(body, list) and LOG.isEnabledFor(logging.DEBUG):
            text = b"".join(body).decode("utf-8", "replace")
            LOG.debug("%s answered: %s", status, " ".join(text.split())[:_DETAIL_CHARS])


class IdentityLogContext:
    """Adds the request's user and project to its log context (inside auth)."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        context = environ.get(CONTEXT_ENVIRON)
        if context is not None:
            _fill_identity(context, environ)
        return self.app(environ, start_response)
