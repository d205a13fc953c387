"""Authentication (noauth2 or Keystone) and the identity of each request.

Both strategies end with the same request headers (X-User-Id, X-Project-Id,
X-Roles, OpenStack-System-Scope); ``IdentityMiddleware`` turns them into an
``Identity`` that policy checks read.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from allotment.http.middleware import IDENTITY_ENVIRON, REQUEST_ID_ENVIRON

WSGIApp = Callable[[dict, Callable], Iterable[bytes]]


def _is_root(environ: dict) -> bool:
    return environ.get("PATH_INFO", "") in ("", "/")


def _unauthorized(environ: dict, start_response: Callable) -> Iterable[bytes]:
    body = {"errors": [{
        "status": 401, "title": "Unauthorized",
        "detail": "This server could not verify that you are authorized to access "
                  "the document you requested.",
    }]}
    request_id = environ.get(REQUEST_ID_ENVIRON)
    if request_id:
        body["errors"][0]["request_id"] = request_id
    payload = json.dumps(body).encode()
    start_response("401 Unauthorized", [("Content-Type", "application/json"),
                                        ("Content-Length", str(len(payload)))])
    return [payload]


@dataclass
class Identity:
    user_id: str | None
    project_id: str | None
    roles: list[str] = field(default_factory=list)
    system_scope: str | None = None
    service_roles: list[str] = field(default_factory=list)
    auth_token: str | None = None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    def policy_creds(self) -> dict:
        return {
            "user_id": self.user_id,
            "project_id": self.project_id,
            "roles": list(self.roles),
            "system_scope": self.system_scope,
            "service_roles": list(self.service_roles),
            "is_admin": self.is_admin,
        }


class RequestIdMiddleware:
    """Give every request a local id and return it as X-Openstack-Request-Id."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        request_id = "req-" + str(uuid.uuid4())
        environ[REQUEST_ID_ENVIRON] = request_id

        def _start(status: str, headers: list, exc_info=None):
            headers.append(("x-openstack-request-id", request_id))
            return start_response(status, headers, exc_info)

        return self.app(environ, _start)


class NoAuthMiddleware:
    """noauth2: the token names the user (``user[:project]``); roles from X-Roles."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if _is_root(environ):
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
            environ["HTTP_X_PROJECT_ID"] = project_id
        environ["HTTP_X_ROLES"] = ",".join(roles)
        return self.app(environ, start_response)


class KeystoneAuthMiddleware:
    """keystonemiddleware's auth_token for everything but the root document."""

    def __init__(self, app: WSGIApp, conf) -> None:
        from keystonemiddleware import auth_token

        self.app = app
        self.protected = auth_token.AuthProtocol(app, {"oslo_config_config": conf})

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if _is_root(environ):
            return self.app(environ, start_response)
        return self.protected(environ, start_response)


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


class IdentityMiddleware:
    """Build the request's Identity from the auth headers; 401 without a user."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        user_id = environ.get("HTTP_X_USER_ID") or environ.get("HTTP_X_USER")
        if user_id is None and not _is_root(environ):
            return _unauthorized(environ, start_response)
        environ[IDENTITY_ENVIRON] = Identity(
            user_id=user_id,
            project_id=environ.get("HTTP_X_PROJECT_ID") or environ.get("HTTP_X_TENANT_ID")
            or environ.get("HTTP_X_TENANT"),
            roles=[r.lower() for r in _split(environ.get("HTTP_X_ROLES"))],
            system_scope=environ.get("HTTP_OPENSTACK_SYSTEM_SCOPE") or None,
            service_roles=[r.lower() for r in _split(environ.get("HTTP_X_SERVICE_ROLES"))],
            auth_token=environ.get("HTTP_X_AUTH_TOKEN"),
        )
        return self.app(environ, start_response)
