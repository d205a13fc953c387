"""The one place where every failure becomes a Placement error response.

A domain exception (``allotment.ledger.errors``) carries facts; its status,
code and words are ``allotment.refusals``' (``REFUSALS``, and the named
tables of the endpoints that word it otherwise, which handlers pass to
``explain``). HTTP-layer refusals (``allotment.errors``) carry their
status and message themselves. A database that cannot be reached is no
refusal but the service failing for a moment: 503 with ``Retry-After``
(``unavailable``).
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import re
from collections.abc import Iterator

import falcon

from allotment import errors, metrics, refusals
from allotment.db.availability import DatabaseUnavailable
from allotment.db.errors import LostRace, meaning
from allotment.http.context import Request
from allotment.http.microversion import MAX, MIN
from allotment.http.request import accept_ranges
from allotment.ledger import errors as ledger

LOG = logging.getLogger(__name__)


# The database is shut down, restarting or unreachable: a restart is over in
# seconds; a client honouring Retry-After comes back after it.
RETRY_AFTER_SECONDS = 2


def busy(exc: BaseException) -> errors.PlacementError:
    """The answer to a lock not granted in time, or a deadlock, that no retry
    absorbed: a read's (a Galera node's causal wait ends in 1205 when it cannot
    catch up) or a write's whose retries ran out. It passes when tried again."""
    return errors.PlacementError("The placement database is busy. Please retry in "
                                 f"{RETRY_AFTER_SECONDS} seconds.", status=503,
                                 headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def unavailable(exc: DatabaseUnavailable) -> errors.PlacementError:
    """The answer while the database cannot be reached (the reason is logged, not sent)."""
    return errors.PlacementError("The placement database is unavailable. Please retry "
                                 f"in {RETRY_AFTER_SECONDS} seconds.", status=503,
                                 headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


# What upstream's handlers let escape (its NotFound), and so answers without
# Vary, when no handler words it (``explain``, which upstream's catching does).
_UNCAUGHT_UPSTREAM = (ledger.ProviderNotFound, ledger.ResourceClassNotFound,
                      ledger.TraitNotFound)


# The generation a refusal says the client had stale (the metric's label);
# metrics takes the label, not the exception, to stay clear of the domain.
_STALE_GENERATION: dict[type[ledger.LedgerError], str] = {
    ledger.ProviderGenerationConflict: "provider",
    ledger.ConsumerGenerationConflict: "consumer",
}


def refusal(exc: ledger.LedgerError, message: str | None = None,
            status: int | None = None, code: str | None = None) -> errors.PlacementError:
    """The HTTP refusal for a domain exception: ``refusals.REFUSALS``' answer,
    unless the endpoint's wording gives another message, status or code."""
    answer = refusals.answer(exc)
    for kind, generation in _STALE_GENERATION.items():
        if isinstance(exc, kind):
            metrics.generation_conflict(generation)
    return errors.PlacementError(answer.words(exc) if message is None else message,
                                 code=answer.code if code is None else code,
                                 status=answer.status if status is None else status,
                                 headers=None if answer.retry_after is None
                                 else {"Retry-After": str(answer.retry_after)})


@contextlib.contextmanager
def explain(endpoint: refusals.Endpoint, **request: str) -> Iterator[None]:
    """Answer domain refusals raised inside the block as this endpoint's upstream does.

    ``endpoint`` is one of the named tables of ``allotment.refusals``;
    ``request`` the facts of the request its words name (the URL's uuid …).
    A refusal the table does not list passes through, answered as
    ``REFUSALS`` says.
    """
    try:
        yield
    except ledger.LedgerError as exc:
        entry = next((entry for kind, entry in endpoint.items() if isinstance(exc, kind)),
                     None)
        if entry is None:
            raise  # Not this endpoint's to word: rendered as any other.
        if isinstance(entry, refusals.Variant):
            raise refusal(exc, entry.words(exc, request), entry.status, entry.code) from None
        raise refusal(exc, entry(exc, request)) from None


def _preferred_error_type(accept: str | None) -> str:
    """The content type of an error body, chosen from Accept as upstream does."""
    if not accept or accept.strip() == "*/*":
        return "application/json"
    best = None
    best_q = 0.0
    for media, q in accept_ranges(accept):
        for offer in ("text/html", "application/json"):
            if media in (offer, "*/*", offer.split("/")[0] + "/*"):
                if q > best_q or (q == best_q and best is None):
                    best, best_q = offer, q
                break
    return best or "text/plain"


def error_body(status: int, title: str, detail: str, code: str | None,
               request_id: str | None, with_range: bool = False) -> dict:
    """Placement's JSON error body; ``code`` is left out when None."""
    entry: dict = {"status": status, "title": title, "detail": detail}
    if code is not None:
        entry["code"] = code
    if request_id:
        entry["request_id"] = request_id
    if with_range:
        entry["max_version"] = str(MAX)
        entry["min_version"] = str(MIN)
    return {"errors": [entry]}


_TAG = re.compile(r"<.*?>")


def _one_line(message: str) -> str:
    """The message as upstream's WebOb error bodies carry it: one line, no markup.

    Newlines become spaces (clients such as osc-placement show only the last
    line of ``detail``), carriage returns and anything tag-like are dropped.
    """
    return _TAG.sub("", message.replace("\n", " ").replace("\r", ""))


def write_error(req: Request, resp: falcon.Response, status: int, message: str,
                code: str = errors.DEFAULT, headers: dict[str, str] | None = None) -> None:
    title = errors.TITLES.get(status) or falcon.code_to_http_status(status)[4:]
    explanation = errors.EXPLANATIONS.get(status, "")
    if status == 406 and "%s" in explanation:
        explanation = explanation % (req.get_header("Accept") or "")
    flat = _one_line(message)
    if status == 405:
        # WebOb's own 405 body, which upstream sends: the method named first.
        detail = f"The method {req.method} is not allowed for this resource. \n\n {flat}"
    elif status == 406:
        # WebOb's 406 body has its own spacing, too, and so has its 415.
        detail = f"{explanation} \n\n {flat}"
    elif status == 415:
        media = req.content_type.split(";")[0].strip() if req.content_type else None
        detail = f"The request media type {media} is not supported by this server. \n\n {flat}"
    elif explanation:
        detail = f"{explanation}\n\n {flat}  "
    else:
        detail = flat
    version = req.context.negotiated
    request_id = getattr(req.context, "request_id", None)
    metrics.refusal(req.env, status, code)
    resp.status = status
    for name, value in (headers or {}).items():
        resp.set_header(name, value)
    # WebOb answers HEAD errors as HTML (and sends no body).
    content_type = ("text/html" if req.method == "HEAD"
                    else _preferred_error_type(req.get_header("Accept")))
    if content_type == "application/json":
        # Error codes came with microversion 1.23; before it upstream sends none.
        shown_code = code if version is not None and version.has("error_codes") else None
        body = error_body(status, title, detail, shown_code, request_id,
                          with_range=(status == 406 and version is None))
        resp.content_type = "application/json"
        resp.text = json.dumps(body)
    elif content_type == "text/html":
        resp.content_type = "text/html; charset=UTF-8"
        resp.text = (f"<html><head><title>{status} {title}</title></head><body>"
                     f"<h1>{status} {title}</h1>{html.escape(detail)}<br /><br />"
                     "</body></html>")
    else:
        resp.content_type = "text/plain; charset=UTF-8"
        resp.text = f"{status} {title}\n\n{detail}"


def handle_exception(req: Request, resp: falcon.Response, ex: Exception,
                     params: dict) -> None:
    """Falcon error handler for everything raised while serving a request."""
    if isinstance(ex, (*_UNCAUGHT_UPSTREAM, errors.Forbidden)):
        req.context.bare_error = True
    if isinstance(ex, ledger.LedgerError):
        ex = refusal(ex)
    elif isinstance(ex, DatabaseUnavailable):
        ex = unavailable(ex)
    elif isinstance(meaning(ex), LostRace):
        LOG.warning("%s %s: the database did not grant a lock in time: %s",
                    req.method, req.path, ex)
        ex = busy(ex)
    if isinstance(ex, errors.PlacementError):
        write_error(req, resp, ex.status, ex.message, ex.code, ex.headers)
    elif isinstance(ex, falcon.HTTPMethodNotAllowed):
        allowed = dict(ex.headers or {}).get("Allow", "")
        # Falcon lists OPTIONS; upstream answers OPTIONS with 405 outside CORS.
        allowed = ", ".join(m.strip() for m in allowed.split(",")
                            if m.strip() and m.strip() != "OPTIONS")
        # A method gated by microversion: upstream says no more (and sends no
        # Allow; we list what the URI has at this version, as HTTP requires).
        message = ("" if isinstance(ex, errors.MethodNotAllowedHere)
                   else "The method specified is not allowed for this resource.")
        write_error(req, resp, 405, message, headers={"Allow": allowed})
    elif isinstance(ex, falcon.HTTPError):
        status = ex.status_code
        message = ex.description or ""
        write_error(req, resp, status, message, headers=dict(ex.headers or {}))
    else:
        LOG.exception("Uncaught exception serving %s %s", req.method, req.path)
        write_error(req, resp, 500, "An unexpected error occurred: "
                    f"{type(ex).__name__}")
