"""An in-process HTTP client for the WSGI app (no sockets, real requests)."""

from __future__ import annotations

import json
from typing import Any

import falcon.testing


class Response:
    def __init__(self, result: falcon.testing.Result) -> None:
        self.status = result.status_code
        self.headers = {k.lower(): v for k, v in result.headers.items()}
        self.text = result.text

    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def error_code(self) -> str | None:
        return self.json()["errors"][0].get("code")

    @property
    def detail(self) -> str:
        return self.json()["errors"][0]["detail"]

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.text[:300]}>"


class PlacementClient:
    """Requests as an admin (noauth2 token ``admin``) at a chosen microversion;
    ``headers`` go with every request (an identity's, say), a request's own win."""

    def __init__(self, app, token: str | None = "admin", version: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self._app = app
        self.token = token
        self.version = version
        self.headers = dict(headers or {})

    def request(self, method: str, path: str, body: Any = None, *, version: str | None = None,
                headers: dict[str, str] | None = None, raw: str | bytes | None = None,
                token: str | None = "default",
                environ: dict[str, Any] | None = None) -> Response:
        """``environ``: keys a WSGI server would add (waitress's client test, say)."""
        all_headers = {"Accept": "application/json"}
        token = self.token if token == "default" else token
        if token is not None:
            all_headers["X-Auth-Token"] = token
        version = version or self.version
        if version:
            all_headers["OpenStack-API-Version"] = f"placement {version}"
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["body"] = json.dumps(body)
            all_headers["Content-Type"] = "application/json"
        elif raw is not None:
            kwargs["body"] = raw
        all_headers.update(self.headers)
        all_headers.update(headers or {})
        path, _, query = path.partition("?")
        # Called directly rather than through simulate_request: its wsgiref
        # validator refuses a 201 without Content-Type, which Placement sends.
        env = falcon.testing.create_environ(path=path, query_string=query or "",
                                            method=method, headers=all_headers, **kwargs)
        env.update(environ or {})
        start_response = falcon.testing.StartResponseMock()
        data = falcon.testing.helpers.closed_wsgi_iterable(self._app(env, start_response))
        return Response(falcon.testing.Result(data, start_response.status,
                                              start_response.headers))

    def get(self, path: str, **kw) -> Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw) -> Response:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw) -> Response:
        return self.request("PUT", path, body, **kw)

    def delete(self, path: str, **kw) -> Response:
        return self.request("DELETE", path, **kw)

    # Shortcuts used across test modules.
    def create_provider(self, name: str, uuid: str | None = None,
                        parent: str | None = None) -> dict:
        body: dict[str, Any] = {"name": name}
        if uuid:
            body["uuid"] = uuid
        if parent:
            body["parent_provider_uuid"] = parent
        resp = self.post("/resource_providers", body, version="1.20")
        assert resp.status == 200, resp
        return resp.json()
