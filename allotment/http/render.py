"""Writing responses: JSON bodies and the 1.15 cache headers."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from typing import Any

import falcon
import orjson

from allotment import memory
from allotment.http.context import Request
from allotment.ledger.common import utcnow

# An answer this large (a provider list of a large cloud, a big candidates
# answer) leaves memory worth giving back once it is sent.
LARGE_BODY = 8 << 20


def newest(timestamps: Iterable[datetime.datetime | None]) -> datetime.datetime:
    """The latest of the given times, or now when there are none."""
    latest = None
    for stamp in timestamps:
        if stamp is not None and (latest is None or stamp > latest):
            latest = stamp
    return latest or utcnow()


def json_response(req: Request, resp: falcon.Response, body: Any,
                  status: int = 200,
                  modified: Iterable[datetime.datetime | None] = (),
                  cache_headers: bool = True) -> None:
    """Write ``body`` (or JSON text already made) as JSON; from 1.15 add
    cache-control and last-modified, the newest of ``modified`` (now when
    there is none).

    ``modified`` is only read from 1.15: a generator over the answer's items
    costs nothing below it (nova polls a provider's traits at 1.6 and its
    allocations at 1.0)."""
    resp.status = status
    resp.content_type = "application/json"
    resp.data = body if isinstance(body, bytes) else encode(body)
    if len(resp.data) > LARGE_BODY:
        memory.release_freed_soon()
    if cache_headers and req.context.version.has("cache_headers"):
        set_cache_headers(resp, newest(modified))


def encode(body: Any) -> bytes:
    """JSON as UTF-8 bytes: orjson (several times faster on large candidate
    answers), the standard library for what orjson refuses (integers beyond
    64 bits)."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body).encode()


def set_cache_headers(resp: falcon.Response,
                      last_modified: datetime.datetime | None = None) -> None:
    stamp = last_modified or utcnow()
    resp.set_header("Last-Modified",
                    stamp.replace(tzinfo=datetime.timezone.utc)
                    .strftime("%a, %d %b %Y %H:%M:%S GMT"))
    resp.set_header("Cache-Control", "no-cache")


def no_content(resp: falcon.Response) -> None:
    resp.status = 204
    resp.content_type = None
    resp.text = None


def absolute_url(req: Request, path: str) -> str:
    """``path`` (under the application root) as a full URL, as WebOb sends Location."""
    return f"{req.prefix}{path}"
