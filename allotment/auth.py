"""Authentication (noauth2 or Keystone) and the identity of each request.

Both strategies end with the request headers keystonemiddleware's auth_token
defines (X-User-Id, X-Project-Id, X-Roles, OpenStack-System-Scope,
X-Service-Roles, ...). ``IdentityMiddleware`` reads them, with the same header
precedence as oslo.context, into an ``Identity`` (``allotment.http.environ``)
whose ``policy_creds`` are the credentials oslo.policy checks. The version document at ``/`` and the
OpenAPI description at ``/openapi.json`` need no token in either mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType

import webob.exc
from oslo_config import cfg

from allotment.http.environ import (
    IDENTITY_ENVIRON,
    REQUEST_ID_ENVIRON,
    Identity,
    new_request_id,
)

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]

# Documents served without a token: version discovery (as upstream) and the
# API's OpenAPI description (allotment's own; it says nothing about the data).
OPEN_PATHS = ("/", "/openapi.json")


def _unauthorized(environ: dict, start_response: Callable) -> Iterable[bytes]:
    # Upstream answers a missing or invalid identity with WebOb's plain 401
    # (its own body format, negotiated on Accept), not Placement's error body.
    return webob.exc.HTTPUnauthorized()(environ, start_response)


class RequestIdMiddleware:
    """Give every request a local id and return it as X-Openstack-Request-Id.

    Outermost, like upstream's request log, it also turns a missing or bare
    ``*/*`` Accept into ``application/json`` so that every error below it
    (including the WebOb 401s of the auth layers) is JSON by default.
    """

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        request_id = new_request_id()
        environ[REQUEST_ID_ENVIRON] = request_id
        if environ.get("HTTP_ACCEPT") in (None, "", "*/*"):
            environ["HTTP_ACCEPT"] = "application/json"

        def _start(status: str, headers: list[tuple[str, str]],
                   exc_info: ExcInfo | None = None) -> Callable[[bytes], object]:
            headers.append(("x-openstack-request-id", request_id))
            return start_response(status, headers, exc_info)

        return self.app(environ, _start)


class NoAuthMiddleware:
    """noauth2, for tests and trusted set-ups: the token names the caller.

    The token is ``user[:project]`` (project defaults to the user). Roles come
    from X-Roles; the token ``admin`` without X-Roles means the admin role.
    Headers the client sent (X-Project-Id, OpenStack-System-Scope) are kept:
    the project from the token only fills X-Tenant-Id, which X-Project-Id
    overrides, and a system-scoped request gets no project at all.
    """

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        # Only "/" exactly: upstream asks for a token at "" (mounted at a prefix).
        if environ.get("PATH_INFO") in OPEN_PATHS:
            return self.app(environ, start_response)
        token = environ.get("HTTP_X_AUTH_TOKEN")
        if token is None:
            return _unauthorized(environ, start_response)
        user_id, _sep, project_id = token.partition(":")
        project_id = project_id or user_id
        if "HTTP_X_ROLES" in environ:
            roles = environ["HTTP_X_ROLES"].split(",")
        elif user_id == "admin":
            roles = ["admin"]
        else:
            roles = []
        environ["HTTP_X_USER_ID"] = user_id
        if not environ.get("HTTP_OPENSTACK_SYSTEM_SCOPE"):
            environ["HTTP_X_TENANT_ID"] = project_id
        environ["HTTP_X_ROLES"] = ",".join(roles)
        return self.app(environ, start_response)


class KeystoneAuthMiddleware:
    """keystonemiddleware's auth_token, configured by ``[keystone_authtoken]``.

    It validates X-Auth-Token (and X-Service-Token) against Keystone, strips
    any identity headers the client sent and sets the real ones. The version
    document at the root is served without it.
    """

    def __init__(self, app: WSGIApp, conf: cfg.ConfigOpts) -> None:
        from keystonemiddleware import auth_token

        self.app = app
        # The operator's ConfigOpts itself (not a project name): placement.conf
        # may come from OS_PLACEMENT_CONFIG_DIR or --config-file.
        self.protected = auth_token.AuthProtocol(app, {"oslo_config_config": conf})

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") in (*OPEN_PATHS, ""):
            return self.app(environ, start_response)
        return self.protected(environ, start_response)


class IdentityMiddleware:
    """Attach the request's Identity; 401 when no user is known (but at the root)."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        identity = Identity.from_environ(environ)
        if identity.user_id is None and environ.get("PATH_INFO") not in (*OPEN_PATHS, ""):
            return _unauthorized(environ, start_response)
        environ[IDENTITY_ENVIRON] = identity
        return self.app(environ, start_response)
