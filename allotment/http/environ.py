"""What the WSGI layers leave in the environ for the ones inside them.

The request id (``auth.RequestIdMiddleware``, outermost), the caller's own
request id when it is a valid one (``requestlog.RequestLog``) and the caller's
``Identity`` (``auth.IdentityMiddleware``), read by the Falcon middleware,
the request log, policy and /metrics. A leaf: it imports nothing of
allotment, so that each of those can import it without importing the
authentication middlewares (or each other).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

REQUEST_ID_ENVIRON = "openstack.request_id"
GLOBAL_REQUEST_ID_ENVIRON = "allotment.global_request_id"
IDENTITY_ENVIRON = "allotment.identity"


def new_request_id() -> str:
    """A fresh local request id, in the form upstream's clients expect."""
    return "req-" + str(uuid.uuid4())


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in value.split(",")] if value else []


def _first(environ: dict, *names: str) -> str | None:
    """The first of several equivalent headers that is present (even if empty)."""
    for name in names:
        if name in environ:
            return environ[name]
    return None


@dataclass
class Identity:
    """Who is calling, as the auth headers say; plain data for policy checks."""

    user_id: str | None
    project_id: str | None
    roles: list[str] = field(default_factory=list)
    system_scope: str | None = None
    domain_id: str | None = None
    user_domain_id: str | None = None
    project_domain_id: str | None = None
    is_admin_project: bool = True
    service_user_id: str | None = None
    service_user_domain_id: str | None = None
    service_project_id: str | None = None
    service_project_domain_id: str | None = None
    service_roles: list[str] = field(default_factory=list)
    auth_token: str | None = None

    @classmethod
    def from_environ(cls, environ: dict) -> Identity:
        roles = _first(environ, "HTTP_X_ROLES", "HTTP_X_ROLE")
        return cls(
            user_id=_first(environ, "HTTP_X_USER_ID", "HTTP_X_USER"),
            project_id=_first(environ, "HTTP_X_PROJECT_ID", "HTTP_X_TENANT_ID",
                              "HTTP_X_TENANT"),
            roles=_split(roles),
            system_scope=_first(environ, "HTTP_OPENSTACK_SYSTEM_SCOPE"),
            domain_id=_first(environ, "HTTP_X_DOMAIN_ID"),
            user_domain_id=_first(environ, "HTTP_X_USER_DOMAIN_ID"),
            project_domain_id=_first(environ, "HTTP_X_PROJECT_DOMAIN_ID"),
            # Keystone only sends this header when it knows the answer; without
            # it old "is_admin_project:True" policies must keep working.
            is_admin_project=environ.get("HTTP_X_IS_ADMIN_PROJECT", "true").lower() == "true",
            service_user_id=_first(environ, "HTTP_X_SERVICE_USER_ID"),
            service_user_domain_id=_first(environ, "HTTP_X_SERVICE_USER_DOMAIN_ID"),
            service_project_id=_first(environ, "HTTP_X_SERVICE_PROJECT_ID"),
            service_project_domain_id=_first(environ, "HTTP_X_SERVICE_PROJECT_DOMAIN_ID"),
            service_roles=_split(environ.get("HTTP_X_SERVICE_ROLES")),
            auth_token=_first(environ, "HTTP_X_AUTH_TOKEN", "HTTP_X_STORAGE_TOKEN"),
        )

    def policy_creds(self) -> dict:
        """The credentials oslo.policy matches check strings against."""
        return {
            "user_id": self.user_id,
            "user_domain_id": self.user_domain_id,
            "system_scope": self.system_scope,
            "domain_id": self.domain_id,
            "project_id": self.project_id,
            "project_domain_id": self.project_domain_id,
            "roles": list(self.roles),
            "is_admin_project": self.is_admin_project,
            "service_user_id": self.service_user_id,
            "service_user_domain_id": self.service_user_domain_id,
            "service_project_id": self.service_project_id,
            "service_project_domain_id": self.service_project_domain_id,
            "service_roles": list(self.service_roles),
        }
