"""noauth2 and the request identity: tokens, X-Roles, projects, system scope, 401s."""

from __future__ import annotations

import json

import pytest
from oslo_context import context as oslo_context

from allotment.auth import Identity

UNAUTHORIZED_TEXT = (
    "This server could not verify that you are authorized to access the document you "
    "requested. Either you supplied the wrong credentials (e.g., bad password), or your "
    "browser does not understand how to supply the credentials required.")


def test_root_needs_no_token(client):
    resp = client.get("/", token=None)
    assert resp.status == 200
    assert resp.json()["versions"][0]["id"] == "v1.0"


def test_no_token_is_401_in_webobs_format(client):
    # Upstream's plain WebOb 401, not Placement's error body.
    resp = client.get("/resource_providers", token=None)
    assert resp.status == 401
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == {"message": UNAUTHORIZED_TEXT + "<br /><br />\n\n\n",
                           "code": "401 Unauthorized", "title": "Unauthorized"}
    assert resp.headers["x-openstack-request-id"].startswith("req-")
    assert "openstack-api-version" not in resp.headers


@pytest.mark.parametrize("accept, content_type, start", [
    ("text/html", "text/html; charset=UTF-8", "<html>"),
    ("text/plain", "text/plain; charset=UTF-8", "401 Unauthorized\n\n" + UNAUTHORIZED_TEXT),
    ("*/*", "application/json", "{"),
])
def test_401_follows_accept(client, accept, content_type, start):
    resp = client.get("/resource_providers", token=None, headers={"Accept": accept})
    assert resp.status == 401
    assert resp.headers["content-type"] == content_type
    assert resp.text.startswith(start)


def test_admin_token_without_roles_is_admin(client):
    assert client.get("/resource_providers", token="admin").status == 200


def test_admin_token_takes_roles_from_x_roles(client):
    resp = client.get("/resource_providers", token="admin", headers={"X-Roles": "reader"})
    assert resp.status == 403


def test_other_token_without_roles_has_none(client):
    resp = client.get("/resource_providers", token="alice")
    assert resp.status == 403
    assert resp.json()["errors"][0]["detail"].endswith(
        "Policy does not allow placement:resource_providers:list to be performed.  ")


def test_roles_are_comma_separated_and_trimmed(client):
    resp = client.get("/resource_providers", token="alice",
                      headers={"X-Roles": "reader, admin"})
    assert resp.status == 200


def test_role_names_are_case_insensitive(client):
    assert client.get("/resource_providers", token="alice",
                      headers={"X-Roles": "Admin"}).status == 200


def test_service_role(client):
    assert client.get("/resource_providers", token="nova",
                      headers={"X-Roles": "service"}).status == 200


def test_token_names_the_project(client):
    # "user:project"; a reader may read its own project's usage only.
    reader = {"X-Roles": "reader"}
    assert client.get("/usages?project_id=proj", token="alice:proj", version="1.9",
                      headers=reader).status == 200
    assert client.get("/usages?project_id=alice", token="alice:proj", version="1.9",
                      headers=reader).status == 403
    # Without ":project" the user's name is the project.
    assert client.get("/usages?project_id=alice", token="alice", version="1.9",
                      headers=reader).status == 200


def test_x_project_id_header_wins_over_the_token(client):
    headers = {"X-Roles": "reader", "X-Project-Id": "real"}
    assert client.get("/usages?project_id=real", token="alice:proj", version="1.9",
                      headers=headers).status == 200
    assert client.get("/usages?project_id=proj", token="alice:proj", version="1.9",
                      headers=headers).status == 403


def test_system_scope_is_refused_even_for_admin(client):
    resp = client.get("/resource_providers", token="admin",
                      headers={"OpenStack-System-Scope": "all"})
    assert resp.status == 403
    assert "placement:resource_providers:list" in resp.detail


def test_system_scoped_reader_has_no_project(client):
    # noauth2 gives a system-scoped request no project from the token.
    resp = client.get("/usages?project_id=alice", token="alice", version="1.9",
                      headers={"X-Roles": "reader", "OpenStack-System-Scope": "all"})
    assert resp.status == 403


def test_refusal_changes_nothing(client):
    resp = client.post("/resource_providers", {"name": "nope"}, token="alice",
                       headers={"X-Roles": "member"})
    assert resp.status == 403
    assert client.get("/resource_providers").json() == {"resource_providers": []}
    resp = client.post("/resource_providers", {"name": "nope"}, token=None)
    assert resp.status == 401
    assert client.get("/resource_providers").json() == {"resource_providers": []}


def test_head_401_has_no_body(client):
    resp = client.request("HEAD", "/resource_providers", token=None)
    assert resp.status == 401
    assert resp.text == ""


# -- Identity: the same credentials oslo.context would give oslo.policy ------

KEYSTONE_ENVIRON = {
    "HTTP_X_AUTH_TOKEN": "tok",
    "HTTP_X_USER_ID": "u1", "HTTP_X_USER": "ignored",
    "HTTP_X_TENANT_ID": "ignored", "HTTP_X_PROJECT_ID": "p1",
    "HTTP_X_ROLES": "admin, reader",
    "HTTP_X_USER_DOMAIN_ID": "ud", "HTTP_X_PROJECT_DOMAIN_ID": "pd",
    "HTTP_X_IS_ADMIN_PROJECT": "False",
    "HTTP_X_SERVICE_USER_ID": "nova", "HTTP_X_SERVICE_USER_DOMAIN_ID": "sud",
    "HTTP_X_SERVICE_PROJECT_ID": "service", "HTTP_X_SERVICE_PROJECT_DOMAIN_ID": "spd",
    "HTTP_X_SERVICE_ROLES": "service,reader",
}


@pytest.mark.parametrize("environ", [
    KEYSTONE_ENVIRON,
    {"HTTP_X_USER": "legacy-user", "HTTP_X_TENANT": "legacy-project",
     "HTTP_X_ROLE": "member"},
    {"HTTP_X_USER_ID": "u", "HTTP_OPENSTACK_SYSTEM_SCOPE": "all", "HTTP_X_ROLES": ""},
    {"HTTP_X_USER_ID": "u", "HTTP_X_DOMAIN_ID": "d1", "HTTP_X_ROLES": "admin"},
    {},
])
def test_identity_matches_oslo_context(environ):
    expected = dict(oslo_context.RequestContext.from_environ(environ).to_policy_values())
    assert Identity.from_environ(environ).policy_creds() == expected


def test_identity_is_json_plain_data():
    json.dumps(Identity.from_environ(KEYSTONE_ENVIRON).policy_creds())


def test_401_without_accept_is_json(client):
    resp = client.get("/resource_providers", token=None, headers={"Accept": ""})
    assert resp.status == 401
    assert resp.headers["content-type"] == "application/json"


def test_wrong_scope_detail_is_the_rule_name(client):
    # What upstream says to a system-scoped token (oslo.policy InvalidScope).
    resp = client.get("/resource_providers", token="admin",
                      headers={"OpenStack-System-Scope": "all"})
    assert resp.status == 403
    assert resp.detail == ("Access was denied to this resource.\n\n "
                           "placement:resource_providers:list  ")
