"""A small cloud behind a real Keystone: identities, a Placement, its data, its answers.

Shared by the test (allotment) and ``record`` (upstream 16.0.0): the same
identities made through Keystone's API, the same ``placement.conf`` (keystone
auth, ``service_type = placement`` so application credentials' access rules
apply), the same seeded providers and consumers, the same requests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clients import sidebyside
from tests.clients.live import free_port
from tests.keystone import matrix
from tests.keystone.identity import ADMIN_PASSWORD, Keystone

PASSWORD = "identity-secret"
SERVICE_PASSWORD = "placement-service-secret"
OPENSTACK = Path(sys.executable).parent / "openstack"


@dataclass
class Cloud:
    """The identities made in one Keystone and what each caller sends."""

    keystone: Keystone
    facts: dict[str, str] = field(default_factory=dict)      # project_a, user_a, ...
    callers: dict[str, dict[str, str]] = field(default_factory=dict)
    placement_endpoints: list[str] = field(default_factory=list)

    def fill(self, text: str) -> str:
        return text.format(**self.facts)

    def point_placement_at(self, url: str) -> None:
        """The catalog's placement endpoints (the CLI finds Placement there)."""
        keystone = self.keystone
        for endpoint in self.placement_endpoints:
            keystone.call("PATCH", f"/v3/endpoints/{endpoint}", {"endpoint": {"url": url}})


def make_cloud(keystone: Keystone) -> Cloud:
    """Projects A and B, the service project, a user per role and the callers' headers."""
    cloud = Cloud(keystone)
    roles = {name: keystone.role_id(name) for name in ("admin", "member", "reader", "service")}
    projects = {name: keystone.create("projects", "project",
                                      {"name": name, "domain_id": "default"})
                for name in ("project-a", "project-b", "service")}
    cloud.facts.update(project_a=projects["project-a"], project_b=projects["project-b"])

    def user(name: str, password: str = PASSWORD) -> str:
        return keystone.create("users", "user", {"name": name, "password": password,
                                                 "domain_id": "default"})

    def grant(target: str, user_id: str, role: str) -> None:
        keystone.call("PUT", f"/v3/{target}/users/{user_id}/roles/{roles[role]}")

    def project_scope(project: str) -> dict[str, Any]:
        return {"project": {"id": projects[project]}}

    tokens: dict[str, str] = {}
    for role in ("reader", "member", "admin"):
        user_id = user(f"a-{role}")
        grant(f"projects/{projects['project-a']}", user_id, role)
        cloud.facts[f"user_a_{role}"] = user_id
        tokens[f"project_a_{role}"] = keystone.password_token(f"a-{role}", PASSWORD,
                                                              project_scope("project-a"))
    cloud.facts["user_a"] = cloud.facts["user_a_member"]
    grant(f"projects/{projects['project-b']}", user("b-reader"), "reader")
    tokens["project_b_reader"] = keystone.password_token("b-reader", PASSWORD,
                                                         project_scope("project-b"))
    for role in ("reader", "admin"):
        grant("system", user(f"system-{role}"), role)
        tokens[f"system_{role}"] = keystone.password_token(f"system-{role}", PASSWORD,
                                                           {"system": {"all": True}})
    grant("domains/default", user("domain-admin"), "admin")
    tokens["domain_admin"] = keystone.password_token("domain-admin", PASSWORD,
                                                     {"domain": {"id": "default"}})
    placement = user("placement", SERVICE_PASSWORD)
    grant(f"projects/{projects['service']}", placement, "admin")
    grant(f"projects/{projects['service']}", placement, "service")
    tokens["placement_service"] = keystone.password_token("placement", SERVICE_PASSWORD,
                                                          project_scope("service"))
    grant(f"projects/{projects['service']}", user("service-only"), "service")
    tokens["service_role_only"] = keystone.password_token("service-only", PASSWORD,
                                                          project_scope("service"))

    revoked = keystone.password_token("a-admin", PASSWORD, project_scope("project-a"))
    keystone.revoke(revoked)
    credential, _ = keystone.call(
        "POST", f"/v3/users/{cloud.facts['user_a_admin']}/application_credentials",
        {"application_credential": {
            "name": "placement-provider-list",
            "access_rules": [{"service": "placement", "method": "GET",
                              "path": "/resource_providers"}]}},
        token=tokens["project_a_admin"])
    app = credential["application_credential"]

    service = keystone.create("services", "service", {"type": "placement",
                                                      "name": "placement"})
    cloud.placement_endpoints = [
        keystone.create("endpoints", "endpoint", {"service_id": service, "interface": interface,
                                                  "region_id": "RegionOne",
                                                  "url": "http://127.0.0.1:9"})
        for interface in ("public", "internal", "admin")]

    spoofed = {"X-Roles": "admin", "X-Service-Roles": "service", "X-Identity-Status":
               "Confirmed", "X-Project-Id": projects["project-a"],
               "X-User-Id": cloud.facts["user_a_admin"]}
    cloud.callers = {
        "no_token": {},
        "bad_token": {"X-Auth-Token": "gAAAAABnot-a-token-keystone-ever-issued"},
        "revoked_token": {"X-Auth-Token": revoked},
        "expired_token": {"X-Auth-Token": keystone.expired_token(
            cloud.facts["user_a_admin"], projects["project-a"])},
        "spoofed_headers": spoofed,
        "reader_spoofing_admin": {"X-Auth-Token": tokens["project_a_reader"], **spoofed},
        **{name: {"X-Auth-Token": token} for name, token in tokens.items()},
        "member_with_service_token": {"X-Auth-Token": tokens["project_a_member"],
                                      "X-Service-Token": tokens["placement_service"]},
        "member_with_bad_service_token": {"X-Auth-Token": tokens["project_a_member"],
                                          "X-Service-Token": "gAAAAABnot-a-service-token"},
        "app_credential": {"X-Auth-Token": keystone.app_credential_token(app["id"],
                                                                         app["secret"])},
    }
    missing = set(matrix.CALLERS) ^ set(cloud.callers)
    assert not missing, f"callers made and callers listed differ: {missing}"
    return cloud


def placement_conf(directory: Path, keystone_url: str, database_url: str, policy: str,
                   extra: str = "") -> Path:
    """The placement.conf both implementations read (``extra``: allotment's own groups)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "placement.conf"
    path.write_text(
        "[DEFAULT]\ndebug = False\n"
        "[api]\nauth_strategy = keystone\n"
        f"[placement_database]\nconnection = {database_url}\nsync_on_startup = True\n"
        "[keystone_authtoken]\n"
        f"www_authenticate_uri = {keystone_url}\nauth_url = {keystone_url}\n"
        "auth_type = password\nusername = placement\n"
        f"password = {SERVICE_PASSWORD}\nproject_name = service\n"
        "user_domain_id = default\nproject_domain_id = default\n"
        "interface = public\nservice_type = placement\n"
        f"[oslo_policy]\n{matrix.POLICIES[policy]}" + extra)
    return path


# --- sending ----------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: bytes


def send(base_url: str, call: matrix.Call, cloud: Cloud, headers: dict[str, str]) -> Answer:
    parsed = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port or 80,
                                      timeout=60)
    sent = dict(headers)
    if call.version is not None:
        sent["OpenStack-API-Version"] = f"placement {call.version}"
    body = None
    if call.body is not None:
        body = json.dumps(call.body).encode()
        sent["Content-Type"] = "application/json"
    try:
        conn.request(call.method, cloud.fill(call.path), body=body, headers=sent)
        response = conn.getresponse()
        return Answer(response.status, response.read())
    finally:
        conn.close()


def admin_headers(cloud: Cloud) -> dict[str, str]:
    return {"X-Auth-Token": cloud.keystone.admin_token()}


def seed(base_url: str, cloud: Cloud) -> None:
    """Two providers (a root and its child), inventory, a trait, an aggregate, and a
    consumer in each of projects A and B; as the admin, through the API."""
    p = matrix.PROVIDER
    steps = [
        matrix.Call("POST", "/resource_providers",
                    {"name": matrix.PROVIDER_NAME, "uuid": p}),
        matrix.Call("POST", "/resource_providers",
                    {"name": matrix.CHILD_NAME, "uuid": matrix.CHILD,
                     "parent_provider_uuid": p}),
        matrix.Call("PUT", f"/resource_providers/{p}/inventories",
                    {"resource_provider_generation": 0, "inventories": {
                        "VCPU": {"total": 16}, "MEMORY_MB": {"total": 32768}}}),
        matrix.Call("PUT", f"/traits/{matrix.TRAIT}"),
        matrix.Call("PUT", f"/resource_providers/{p}/traits",
                    {"resource_provider_generation": 1, "traits": [matrix.TRAIT]}),
        matrix.Call("PUT", f"/resource_providers/{p}/aggregates",
                    {"resource_provider_generation": 2, "aggregates": [matrix.AGGREGATE]}),
    ]
    for consumer, project in ((matrix.CONSUMER_A, "project_a"),
                              (matrix.CONSUMER_B, "project_b")):
        steps.append(matrix.Call("PUT", f"/allocations/{consumer}", {
            "allocations": {p: {"resources": {"VCPU": 2, "MEMORY_MB": 1024}}},
            "project_id": cloud.facts[project], "user_id": cloud.facts["user_a"],
            "consumer_generation": None, "consumer_type": "INSTANCE"}))
    for step in steps:
        answer = send(base_url, step, cloud, admin_headers(cloud))
        if answer.status not in (200, 201, 204):
            raise RuntimeError(f"seeding {step.key} at {base_url}: {answer.status} "
                               f"{answer.body[:300]!r}")


def decisions(base_url: str, cloud: Cloud, calls: list[matrix.Call]
              ) -> dict[str, dict[str, Answer]]:
    """caller -> request key -> answer, for every caller and call (two at a time)."""
    def one_caller(name: str) -> dict[str, Answer]:
        return {call.key: send(base_url, call, cloud, cloud.callers[name]) for call in calls}

    with ThreadPoolExecutor(2) as pool:
        answers = dict(zip(matrix.CALLERS, pool.map(one_caller, matrix.CALLERS), strict=True))
    return answers


# --- the openstack CLI --------------------------------------------------------------------


REQUEST_ID_RE = re.compile(r"req-[0-9a-f-]{36}")


def run_cli(cloud: Cloud, user: str, command: list[str]) -> dict[str, Any]:
    """``openstack ... -f json`` with a password login as ``user``: its exit status,
    its output (parsed, lists in one order) and its error output (request ids out)."""
    keystone = cloud.keystone
    if user == "admin":
        password, project = ADMIN_PASSWORD, "admin"
    else:
        password, project = PASSWORD, {"project_a_reader": "project-a"}[user]
        user = {"project_a_reader": "a-reader"}[user]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=keystone.url + "/v3", OS_IDENTITY_API_VERSION="3",
               OS_USERNAME=user, OS_PASSWORD=password, OS_PROJECT_NAME=project,
               OS_USER_DOMAIN_ID="default", OS_PROJECT_DOMAIN_ID="default",
               OS_INTERFACE="public", OS_REGION_NAME="RegionOne")
    out = subprocess.run([str(OPENSTACK), *command, "-f", "json"], env=env,
                         capture_output=True, text=True, timeout=180)
    output: Any = None
    if out.stdout.strip():
        output = _ordered(json.loads(out.stdout))
    errors = [REQUEST_ID_RE.sub("req-<id>", line) for line in out.stderr.splitlines()
              if line.strip() and "Warning" not in line and "warn" not in line]
    return {"exit": out.returncode, "output": output, "errors": errors}


def _ordered(value: Any) -> Any:
    if isinstance(value, list):
        return sorted((_ordered(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {k: _ordered(v) for k, v in value.items()}
    return value


def cli_key(user: str, command: list[str]) -> str:
    return f"{user}: openstack {' '.join(command)}"


def cli_outputs(cloud: Cloud) -> dict[str, dict[str, Any]]:
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda item: run_cli(cloud, *item), matrix.CLI_COMMANDS)
        return {cli_key(user, command): result
                for (user, command), result in zip(matrix.CLI_COMMANDS, results, strict=True)}


@contextlib.contextmanager
def running_keystone(workdir: Path) -> Iterator[tuple[Keystone, Cloud]]:
    keystone = Keystone(workdir / "keystone")
    try:
        keystone.start()
        yield keystone, make_cloud(keystone)
    finally:
        keystone.stop()


# --- the Placement servers ------------------------------------------------------------------


@contextlib.contextmanager
def placements(kind: str, workdir: Path, keystone: Keystone, extra: str = ""
               ) -> Iterator[dict[str, str]]:
    """One server of ``kind`` (upstream: uwsgi from bench's venv; allotment: ``allotment
    serve``) per policy setting, all on one fresh SQLite database; policy -> URL."""
    bench = sidebyside._bench_servers()
    if kind == "upstream":
        bench.ensure_upstream_venv(sidebyside.UPSTREAM_VENV)
        command = bench.ServerCommand("upstream", str(sidebyside.UPSTREAM_VENV / "bin" / "uwsgi"),
                                      1, 4)
    else:
        command = bench.ServerCommand("allotment", str(sidebyside.ALLOTMENT_BIN), 1, 4)
    database = f"sqlite:///{workdir / kind / 'placement.sqlite'}"
    running = []
    try:
        # One after the other: the first creates the schema the others find.
        for policy in matrix.POLICIES:
            directory = workdir / kind / policy
            conf = placement_conf(directory, keystone.url, database, policy, extra)
            server = bench.RunningServer(command, conf, free_port(), directory / "server.log")
            running.append(server)
            server.start(120.0)
        yield {policy: server.url for policy, server in zip(matrix.POLICIES, running, strict=True)}
    finally:
        for server in running:
            server.stop()
