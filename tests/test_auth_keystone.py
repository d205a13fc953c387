"""[api] auth_strategy = keystone: keystonemiddleware's auth_token in the pipeline.

A fake Keystone (v3) listens on loopback: it issues the service's own token
and validates the tokens below, so auth_token runs unchanged (discovery,
service catalog, token validation, header stripping).
"""

from __future__ import annotations

import datetime
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from allotment import config
from allotment.wsgi import make_app
from tests.support.client import PlacementClient

SERVICE_PASSWORD = "placement-secret"


class FakeKeystone:
    """The few Identity v3 calls auth_token makes, over real HTTP on loopback."""

    def __init__(self) -> None:
        self.tokens: dict[str, dict] = {}
        self.validations = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeKeystone:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def issue(self, roles: list[str], project_id: str | None = None,
              system: bool = False, user_id: str | None = None) -> str:
        """A valid token with these roles; returns its id."""
        now = datetime.datetime.now(datetime.timezone.utc)
        domain = {"id": "default", "name": "Default"}
        token: dict = {
            "methods": ["password"],
            "issued_at": now.strftime("%Y-%m-%dT%H:%M:%S.000000Z"),
            "expires_at": (now + datetime.timedelta(hours=1)).strftime(
                "%Y-%m-%dT%H:%M:%S.000000Z"),
            "user": {"id": user_id or uuid.uuid4().hex, "name": "u", "domain": domain},
            "roles": [{"id": uuid.uuid4().hex, "name": role} for role in roles],
            "catalog": [{
                "type": "identity", "name": "keystone", "id": uuid.uuid4().hex,
                "endpoints": [
                    {"id": uuid.uuid4().hex, "interface": interface,
                     "region": "RegionOne", "region_id": "RegionOne",
                     "url": self.url + "/v3"}
                    for interface in ("public", "internal", "admin")],
            }],
        }
        if system:
            token["system"] = {"all": True}
        else:
            token["project"] = {"id": project_id or uuid.uuid4().hex, "name": "p",
                                "domain": domain}
        token_id = uuid.uuid4().hex
        self.tokens[token_id] = {"token": token}
        return token_id

    def version(self) -> dict:
        return {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": self.url + "/v3/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.identity-v3+json"}]}

    def _handler(self):
        keystone = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _reply(self, status: int, body: dict | None,
                       headers: dict[str, str] | None = None) -> None:
                payload = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                if path == "":
                    self._reply(300, {"versions": {"values": [keystone.version()]}})
                elif path == "/v3":
                    self._reply(200, {"version": keystone.version()})
                elif path == "/v3/auth/tokens":
                    keystone.validations += 1
                    subject = self.headers.get("X-Subject-Token")
                    if subject in keystone.tokens:
                        self._reply(200, keystone.tokens[subject],
                                    {"X-Subject-Token": subject})
                    else:
                        self._reply(404, {"error": {"code": 404, "title": "Not Found",
                                                    "message": "token not found"}})
                else:
                    self._reply(404, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v3/auth/tokens":
                    self._reply(404, None)
                    return
                password = body["auth"]["identity"]["password"]["user"]["password"]
                if password != SERVICE_PASSWORD:
                    self._reply(401, {"error": {"code": 401, "title": "Unauthorized",
                                                "message": "bad password"}})
                    return
                token_id = keystone.issue(["service", "admin"], user_id="placement")
                self._reply(201, keystone.tokens[token_id], {"X-Subject-Token": token_id})

        return Handler


@pytest.fixture(scope="module")
def keystone():
    with FakeKeystone() as fake:
        yield fake


def _keystone_app(keystone: FakeKeystone, database, tmp_path, extra: str = ""):
    conf_file = tmp_path / "placement.conf"
    conf_file.write_text(f"""
[api]
auth_strategy = keystone

[placement_database]
connection = {database.url}

[keystone_authtoken]
www_authenticate_uri = {keystone.url}
auth_url = {keystone.url}
auth_type = password
username = placement
password = {SERVICE_PASSWORD}
project_name = service
user_domain_id = default
project_domain_id = default
interface = public
{extra}""")
    conf = config.load([str(conf_file)])
    return make_app(conf, db=database.db, prepare=False)


@pytest.fixture
def keystone_client(keystone, database, tmp_path) -> PlacementClient:
    return PlacementClient(_keystone_app(keystone, database, tmp_path), token=None)


def test_root_needs_no_token(keystone_client):
    resp = keystone_client.get("/")
    assert resp.status == 200
    assert resp.json()["versions"][0]["id"] == "v1.0"


def test_openapi_document_needs_no_token(keystone_client):
    resp = keystone_client.get("/openapi.json")
    assert resp.status == 200
    assert resp.json()["openapi"] == "3.1.0"


def test_missing_token_is_401_from_auth_token(keystone_client, keystone):
    resp = keystone_client.get("/resource_providers")
    assert resp.status == 401
    assert resp.headers["www-authenticate"] == f'Keystone uri="{keystone.url}"'


def test_invalid_token_is_401(keystone_client):
    resp = keystone_client.get("/resource_providers", token="not-a-token")
    assert resp.status == 401


def test_valid_admin_token_is_served(keystone_client, keystone):
    token = keystone.issue(["admin", "member", "reader"])
    validations = keystone.validations
    resp = keystone_client.get("/resource_providers", token=token)
    assert resp.status == 200, resp
    assert resp.json() == {"resource_providers": []}
    # auth_token really asked the identity service.
    assert keystone.validations == validations + 1


def test_service_token_may_write(keystone_client, keystone):
    token = keystone.issue(["service"])
    resp = keystone_client.post("/resource_providers", {"name": "rp"}, token=token,
                                version="1.20")
    assert resp.status == 200, resp


def test_reader_token_is_refused(keystone_client, keystone):
    token = keystone.issue(["reader"])
    resp = keystone_client.get("/resource_providers", token=token)
    assert resp.status == 403
    assert "placement:resource_providers:list" in resp.detail


def test_identity_headers_sent_by_the_client_are_ignored(keystone_client, keystone):
    # auth_token strips X-Roles & co. before setting the validated ones.
    token = keystone.issue(["reader"])
    resp = keystone_client.get("/resource_providers", token=token,
                               headers={"X-Roles": "admin", "X-User-Id": "admin"})
    assert resp.status == 403
    resp = keystone_client.get("/resource_providers", headers={"X-Roles": "admin",
                                                               "X-User-Id": "admin"})
    assert resp.status == 401


def test_system_scoped_admin_token_is_refused(keystone_client, keystone):
    token = keystone.issue(["admin", "member", "reader"], system=True)
    resp = keystone_client.get("/resource_providers", token=token)
    assert resp.status == 403


def test_project_reader_sees_own_usages_only(keystone_client, keystone):
    project = uuid.uuid4().hex
    token = keystone.issue(["reader"], project_id=project)
    assert keystone_client.get(f"/usages?project_id={project}", token=token,
                               version="1.9").status == 200
    assert keystone_client.get(f"/usages?project_id={uuid.uuid4().hex}", token=token,
                               version="1.9").status == 403


def test_invalid_service_token_is_401(keystone_client, keystone):
    token = keystone.issue(["admin"])
    resp = keystone_client.get("/resource_providers", token=token,
                               headers={"X-Service-Token": "bogus"})
    assert resp.status == 401


def test_valid_service_token_is_accepted(keystone_client, keystone):
    token = keystone.issue(["admin"])
    service_token = keystone.issue(["service"])
    resp = keystone_client.get("/resource_providers", token=token,
                               headers={"X-Service-Token": service_token})
    assert resp.status == 200, resp


def test_delayed_auth_decision_still_refuses_invalid_tokens(keystone, database, tmp_path):
    # auth_token lets the request through marked invalid; without a user the
    # service itself answers 401, as upstream's context middleware does.
    app = _keystone_app(keystone, database, tmp_path, "delay_auth_decision = True\n")
    client = PlacementClient(app, token=None)
    resp = client.get("/resource_providers", token="not-a-token")
    assert resp.status == 401
    assert resp.json()["title"] == "Unauthorized"
    token = keystone.issue(["admin"])
    assert client.get("/resource_providers", token=token).status == 200


def test_allotments_own_reads_under_upstreams_rules(keystone, database, tmp_path):
    """Each identity kind, with a real token through auth_token: the dashboard's API
    and /metrics answer as tests/test_who_may_read.py expects, a project reader's
    usage per project is its own project alone, and no provider's name reaches a
    caller without a token."""
    from tests.test_who_may_read import EXPECTED_ALLOWED, ROUTES, _cloud

    app = _keystone_app(keystone, database, tmp_path,
                        "\n[allotment]\ndashboard = True\nmetrics = True\n")
    # Projects A and B hold _cloud's consumers; C holds nothing.
    a, b, c = "p1", "p2", "p3"
    tokens: dict[str, str | None] = {
        "no_token": None,
        "project_reader_a": keystone.issue(["reader"], project_id=a),
        "project_member_a": keystone.issue(["member", "reader"], project_id=a),
        "project_admin_a": keystone.issue(["admin", "member", "reader"], project_id=a),
        "project_reader_b": keystone.issue(["reader"], project_id=b),
        "project_reader_c": keystone.issue(["reader"], project_id=c),
        "system_reader": keystone.issue(["reader"], system=True),
        "system_admin": keystone.issue(["admin", "member", "reader"], system=True),
        "service": keystone.issue(["service"]),
    }
    cloud = _cloud(PlacementClient(app, token=tokens["project_admin_a"], version="1.39"))
    got, expected = {}, {}
    for identity, token in tokens.items():
        client = PlacementClient(app, token=token, version="1.39")
        for path in ROUTES:
            resp = client.get(path.format(**cloud))
            got[(identity, path)] = resp.status
            expected[(identity, path)] = (401 if token is None else 200
                                          if identity in EXPECTED_ALLOWED[path] else 403)
            if resp.status != 200:
                assert "secret-" not in resp.text, (identity, path)
    assert got == expected
    for identity, project in (("project_reader_a", a), ("project_reader_b", b),
                              ("project_reader_c", None)):
        body = PlacementClient(app, token=tokens[identity]).get(
            "/dashboard/api/projects").json()
        assert [p["project_id"] for p in body["projects"]] == ([project] if project else [])
