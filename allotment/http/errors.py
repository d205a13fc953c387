"""The one place where every failure becomes a Placement error response."""

from __future__ import annotations

import html
import json
import logging

import falcon

from allotment import errors
from allotment.http.microversion import MAX, MIN
from allotment.http.request import accept_ranges

LOG = logging.getLogger(__name__)


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


def error_body(status: int, title: str, detail: str, code: str,
               request_id: str | None, version, with_range: bool) -> dict:
    entry: dict = {"status": status, "title": title, "detail": detail}
    if version is not None and version.has("error_codes"):
        entry["code"] = code
    if request_id:
        entry["request_id"] = request_id
    if with_range:
        entry["max_version"] = str(MAX)
        entry["min_version"] = str(MIN)
    return {"errors": [entry]}


def write_error(req: falcon.Request, resp: falcon.Response, status: int, message: str,
                code: str = errors.DEFAULT, headers: dict[str, str] | None = None) -> None:
    title = errors.TITLES.get(status) or falcon.code_to_http_status(status)[4:]
    explanation = errors.EXPLANATIONS.get(status, "")
    if status == 406 and "%s" in explanation:
        explanation = explanation % (req.get_header("Accept") or "")
    detail = f"{explanation}\n\n {message}  " if explanation else message
    version = getattr(req.context, "version", None)
    request_id = getattr(req.context, "request_id", None)
    resp.status = status
    for name, value in (headers or {}).items():
        resp.set_header(name, value)
    content_type = _preferred_error_type(req.get_header("Accept"))
    if content_type == "application/json":
        body = error_body(status, title, detail, code, request_id, version,
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


def handle_exception(req: falcon.Request, resp: falcon.Response, ex: Exception,
                     params: dict) -> None:
    """Falcon error handler for everything raised while serving a request."""
    if isinstance(ex, errors.PlacementError):
        write_error(req, resp, ex.status, ex.message, ex.code, ex.headers)
    elif isinstance(ex, falcon.HTTPMethodNotAllowed):
        allowed = ex.headers.get("Allow", "") if ex.headers else ""
        # Falcon lists OPTIONS; upstream answers OPTIONS with 405 outside CORS.
        allowed = ", ".join(m.strip() for m in allowed.split(",")
                            if m.strip() and m.strip() != "OPTIONS")
        write_error(req, resp, 405,
                    f"The method {req.method} is not allowed for this resource.",
                    headers={"Allow": allowed})
    elif isinstance(ex, falcon.HTTPError):
        status = ex.status_code
        message = ex.description or ex.title or ""
        write_error(req, resp, status, message, headers=dict(ex.headers or {}))
    else:
        LOG.exception("Uncaught exception serving %s %s", req.method, req.path)
        write_error(req, resp, 500, "An unexpected error occurred: "
                    f"{type(ex).__name__}")
