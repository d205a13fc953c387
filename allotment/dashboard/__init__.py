"""The dashboard's page: one HTML file, its script and its style, served without a token.

They hold no data: the script asks for a token (kept in the browser's
sessionStorage) and sends it with every request to ``/dashboard/api/...``
(``allotment.handlers.dashboard``), which authentication and policy guard like
the rest of the API. Only with ``[allotment] dashboard = True``; otherwise
``/dashboard`` goes on to the application, which knows no such path.
Everything the page needs ships in this package: nothing is fetched from
elsewhere, and the Content-Security-Policy forbids it.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources

from oslo_config import cfg

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]

PATH = "/dashboard"
STATIC = PATH + "/static/"

# name -> content type: the only files served (no path is ever read from a request).
# dashboard.js is the page's module; it imports the other two.
ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "common.js": "text/javascript; charset=utf-8",
    "history.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

SECURITY_HEADERS = [
    ("Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


@dataclass(frozen=True)
class Asset:
    content_type: str
    body: bytes
    gzipped: bytes
    etag: str

    @classmethod
    def of(cls, content_type: str, body: bytes) -> Asset:
        return cls(content_type, body, gzip.compress(body, mtime=0),
                   '"' + hashlib.sha256(body).hexdigest()[:20] + '"')


def _read(name: str) -> bytes:
    return resources.files(__name__).joinpath(name).read_bytes()


class DashboardPage:
    """Answers GET/HEAD for the page and its assets; every other request goes on."""

    def __init__(self, app: WSGIApp, conf: cfg.ConfigOpts) -> None:
        self.app = app
        self.enabled = bool(conf.allotment.dashboard)
        self.auth_strategy = conf.api.auth_strategy
        self.assets = {name: Asset.of(kind, _read(name)) for name, kind in ASSETS.items()}
        self.template = _read("index.html").decode()
        self.pages: dict[str, Asset] = {}  # by SCRIPT_NAME (the application's root)

    def _page(self, root: str) -> Asset:
        page = self.pages.get(root)
        if page is None:
            html = (self.template.replace("{{root}}", _attribute(root))
                    .replace("{{auth}}", _attribute(self.auth_strategy)))
            page = self.pages[root] = Asset.of("text/html; charset=utf-8", html.encode())
        return page

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not self.enabled or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return self.app(environ, start_response)
        if path in (PATH, PATH + "/"):
            asset = self._page(environ.get("SCRIPT_NAME", ""))
        elif path.startswith(STATIC) and path[len(STATIC):] in self.assets:
            asset = self.assets[path[len(STATIC):]]
        else:
            return self.app(environ, start_response)
        return self._send(environ, start_response, asset)

    @staticmethod
    def _send(environ: dict, start_response: Callable, asset: Asset) -> Iterable[bytes]:
        headers = [("Content-Type", asset.content_type), ("ETag", asset.etag),
                   ("Vary", "Accept-Encoding"), *SECURITY_HEADERS]
        if environ.get("HTTP_IF_NONE_MATCH") == asset.etag:
            start_response("304 Not Modified", headers)
            return [b""]
        body = asset.body
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = asset.gzipped
            headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response("200 OK", headers)
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]


def _attribute(value: str) -> str:
    """``value`` safe inside a double-quoted HTML attribute."""
    return (value.replace("&", "&amp;").replace('"', "&quot;")
            .replace("<", "&lt;").replace(">", "&gt;"))
