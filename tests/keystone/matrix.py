"""What the real-Keystone test sends: the seeded facts, the requests, the callers.

Everything here is data. ``{name}`` in a path is filled at run time from the
run's facts (Keystone makes the project and user ids anew on every start; the
providers and consumers are fixed uuids seeded by ``cloud.seed``).

Writes are sent with a body the schema refuses (``{}``) or to something that
does not exist: a caller the policy lets through gets 400 or 404, one it does
not gets 403, and nothing changes, so every request can be sent by every
caller in any order and the answers depend on the policy alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VERSION = "1.39"  # upstream 16.0.0's latest microversion, and allotment's

PROVIDER = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0a001"
CHILD = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0a002"
MISSING = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0a0ff"
AGGREGATE = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0a0a1"
CONSUMER_A = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0c00a"
CONSUMER_B = "7d1f6bb2-44b3-4b5a-9f0e-3a51d5d0c00b"
PROVIDER_NAME = "ks-compute-a"
CHILD_NAME = "ks-numa-a"
TRAIT = "CUSTOM_KS_TRAIT"
# Text that only the seeded data contains: a refused answer must hold none of it.
SECRETS = (PROVIDER, CHILD, PROVIDER_NAME, CHILD_NAME, CONSUMER_A, CONSUMER_B, AGGREGATE)

# The policy settings both implementations are run under ([oslo_policy] lines).
POLICIES: dict[str, str] = {
    "default": "",
    "legacy": "enforce_new_defaults = False\nenforce_scope = False\n",
}


@dataclass(frozen=True)
class Call:
    """One request; ``key`` names it in the data file."""

    method: str
    path: str
    body: Any = None
    version: str | None = VERSION

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


def _get(path: str, version: str | None = VERSION) -> Call:
    return Call("GET", path, version=version)


# Upstream's API: every policy rule upstream 16.0.0 has, read and write.
UPSTREAM_CALLS: list[Call] = [
    _get("/", version=None),
    _get("/resource_providers"),
    _get(f"/resource_providers?name={PROVIDER_NAME}"),
    _get(f"/resource_providers/{PROVIDER}"),
    Call("POST", "/resource_providers", {}),
    Call("PUT", f"/resource_providers/{PROVIDER}", {}),
    Call("DELETE", f"/resource_providers/{MISSING}"),
    _get(f"/resource_providers/{PROVIDER}/inventories"),
    _get(f"/resource_providers/{PROVIDER}/inventories/VCPU"),
    Call("PUT", f"/resource_providers/{PROVIDER}/inventories", {}),
    Call("POST", f"/resource_providers/{PROVIDER}/inventories", {}),
    Call("PUT", f"/resource_providers/{PROVIDER}/inventories/VCPU", {}),
    Call("DELETE", f"/resource_providers/{MISSING}/inventories/VCPU"),
    Call("DELETE", f"/resource_providers/{MISSING}/inventories"),
    _get(f"/resource_providers/{PROVIDER}/usages"),
    _get(f"/resource_providers/{PROVIDER}/traits"),
    Call("PUT", f"/resource_providers/{PROVIDER}/traits", {}),
    Call("DELETE", f"/resource_providers/{MISSING}/traits"),
    _get(f"/resource_providers/{PROVIDER}/aggregates"),
    Call("PUT", f"/resource_providers/{PROVIDER}/aggregates", {}),
    _get(f"/resource_providers/{PROVIDER}/allocations"),
    _get("/resource_classes"),
    _get("/resource_classes/VCPU"),
    Call("POST", "/resource_classes", {}),
    Call("DELETE", "/resource_classes/CUSTOM_KS_MISSING"),
    _get("/traits"),
    _get(f"/traits/{TRAIT}"),
    Call("DELETE", "/traits/CUSTOM_KS_MISSING"),
    _get("/usages?project_id={project_a}"),
    _get("/usages?project_id={project_b}"),
    _get("/usages?project_id={project_a}&user_id={user_a}"),
    _get(f"/allocations/{CONSUMER_A}"),
    _get(f"/allocations/{CONSUMER_B}"),
    Call("PUT", f"/allocations/{MISSING}", {}),
    Call("DELETE", f"/allocations/{MISSING}"),
    Call("POST", "/allocations", {}),
    _get("/allocation_candidates?resources=VCPU:1"),
    Call("POST", "/reshaper", {}),
]

# allotment's own routes -> the upstream requests whose decisions bound each: a
# caller that upstream refuses any of them must be refused this route too
# (provider data as GET /resource_providers, a consumer and its allocations as
# GET /allocations/{uuid}, a project's usage as GET /usages?project_id=..., the
# history and the audit as every consumer's allocations and every provider).
EVERY_CONSUMER = [f"GET /allocations/{CONSUMER_A}", f"GET /allocations/{CONSUMER_B}"]
EVERY_PROJECT = ["GET /usages?project_id={project_a}", "GET /usages?project_id={project_b}"]
ALLOTMENT_ROUTES: dict[str, list[str]] = {
    "GET /dashboard/api/providers": ["GET /resource_providers"],
    f"GET /dashboard/api/providers/{PROVIDER}/children": ["GET /resource_providers"],
    "GET /dashboard/api/provider_names": ["GET /resource_providers"],
    "GET /dashboard/api/summary": ["GET /resource_providers"],
    "GET /dashboard/api/projects": EVERY_PROJECT,
    "GET /dashboard/api/consumer_types": EVERY_CONSUMER,
    f"GET /dashboard/api/consumers/{CONSUMER_A}": [f"GET /allocations/{CONSUMER_A}"],
    f"GET /dashboard/api/consumers/{CONSUMER_B}": [f"GET /allocations/{CONSUMER_B}"],
    "GET /history/allocations": [*EVERY_CONSUMER, "GET /resource_providers"],
    "GET /history/inventories": ["GET /resource_providers",
                                 f"GET /resource_providers/{PROVIDER}/inventories"],
    "GET /audit/allocations": [*EVERY_CONSUMER, "GET /resource_providers"],
    "GET /headroom?resources=VCPU:1": ["GET /allocation_candidates?resources=VCPU:1"],
    "GET /explain/allocation_candidates?resources=VCPU:1": [
        "GET /allocation_candidates?resources=VCPU:1"],
    "GET /metrics": ["GET /resource_providers"],
}
REFUSED = (401, 403)

# Routes that answer a caller the part it may read rather than refuse it: each
# bounding request -> the text naming its part of the answer. A 200 there must
# not name a part whose bounding request upstream refused the caller (a project
# reader sees its own project's row of /dashboard/api/projects, never another's).
FILTERED: dict[str, dict[str, str]] = {
    "GET /dashboard/api/projects": {
        "GET /usages?project_id={project_a}": "{project_a}",
        "GET /usages?project_id={project_b}": "{project_b}",
    },
}


def allotment_call(key: str) -> Call:
    method, path = key.split(" ", 1)
    return Call(method, path, version=None if path == "/metrics" else VERSION)


# Who calls. Each is built by cloud.make_callers into the headers it sends.
CALLERS = [
    "no_token",                     # nothing at all
    "bad_token",                    # a token Keystone never issued
    "revoked_token",                # project A admin's, revoked
    "expired_token",                # project A admin's, signed by Keystone, expired
    "spoofed_headers",              # no token, but X-Roles: admin and an identity
    "reader_spoofing_admin",        # project A reader's token plus X-Roles: admin
    "project_a_reader",
    "project_a_member",
    "project_a_admin",
    "project_b_reader",
    "system_reader",
    "system_admin",
    "domain_admin",                 # admin of the Default domain, domain-scoped
    "placement_service",            # the service user: admin and service in "service"
    "service_role_only",            # only the service role, in "service"
    "member_with_service_token",    # project A member + the placement user's service token
    "member_with_bad_service_token",
    "app_credential",               # project A admin's, access rules: GET /resource_providers
]

# The openstack CLI with a password login: (user, command).
CLI_COMMANDS: list[tuple[str, list[str]]] = [
    ("admin", ["resource", "provider", "list"]),
    ("admin", ["resource", "provider", "show", PROVIDER]),
    ("admin", ["resource", "provider", "inventory", "list", PROVIDER]),
    ("admin", ["resource", "provider", "usage", "show", PROVIDER]),
    ("admin", ["--os-placement-api-version", "1.6", "trait", "list", "--name",
               f"in:{TRAIT}"]),
    ("admin", ["--os-placement-api-version", "1.10", "allocation", "candidate", "list",
               "--resource", "VCPU=1"]),
    ("project_a_reader", ["resource", "provider", "list"]),
]
