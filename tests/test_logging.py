"""Logging as placement.conf configures it, the request log, and no secrets in it.

Most tests configure the process's logging with ``allotment.logs.setup``
(oslo.log, a ``log_file``) and read the file back, so the lines are checked
as an operator sees them; the ``oslo_logging`` fixture puts the test
session's logging back afterwards. The request log of a live server's
workers is checked in tests/live/test_logging_workers.py.
"""

from __future__ import annotations

import logging
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from allotment import config, logs
from allotment.http import requestlog
from allotment.wsgi import make_app
from tests.conftest import SERVER_URLS, _backends, make_conf
from tests.support.client import PlacementClient
from tests.test_auth_keystone import SERVICE_PASSWORD, FakeKeystone

REQUEST_LINE = re.compile(
    r"(?P<pid>\d+) (?P<level>[A-Z]+) allotment\.http\.requestlog "
    r"\[(?P<global>\S+) (?P<request_id>req-[0-9a-f-]+) (?P<user>\S+) (?P<project>\S+) [^\]]*\] "
    r'(?P<remote>\S+) "(?P<method>[A-Z]+) (?P<uri>\S+)" status: (?P<status>\d+) '
    r"len: (?P<len>\S+) microversion: (?P<microversion>\S+) time: \d+\.\d{3}$")


def _request_lines(text: str) -> list[re.Match[str]]:
    return [m for m in map(REQUEST_LINE.search, text.splitlines()) if m]


@pytest.fixture
def oslo_logging(tmp_path) -> Iterator[Callable[[cfg.ConfigOpts], Path]]:
    """``logs.setup(conf)`` with a log file; the session's logging restored after."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_levels = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
                    if isinstance(logger, logging.Logger)}
    saved_hook = sys.excepthook
    log_file = tmp_path / "placement.log"

    def setup(conf: cfg.ConfigOpts) -> Path:
        conf.set_override("log_file", str(log_file))
        logs.setup(conf)
        return log_file

    yield setup
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in saved_handlers:
            handler.close()
    for handler in saved_handlers:
        root.addHandler(handler)
    root.setLevel(saved_level)
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(saved_levels.get(name, logging.NOTSET))
    sys.excepthook = saved_hook
    logging.captureWarnings(False)


def test_one_line_per_request_with_identity(database, oslo_logging):
    conf = make_conf(database.url)
    log_file = oslo_logging(conf)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    query = f"name=a%20b&member_of=in:{uuid.uuid4()}"
    ok = client.get(f"/resource_providers?{query}", version="1.39",
                    token="alice:project-a", headers={"X-Roles": "admin"})
    refused = client.get("/resource_providers", token=None)
    missing = client.get(f"/resource_providers/{uuid.uuid4()}", token="admin")
    lines = _request_lines(log_file.read_text())
    assert len(lines) == 3, log_file.read_text()
    first, second, third = lines
    assert first["level"] == "INFO" and first["method"] == "GET"
    assert first["uri"] == f"/resource_providers?{query}"
    assert (first["user"], first["project"]) == ("alice", "project-a")
    assert first["request_id"] == ok.headers["x-openstack-request-id"]
    assert (first["status"], first["len"], first["microversion"]) == (
        "200", str(len(ok.text)), "1.39")
    # 401 from the authentication layer: logged, with no user.
    assert (second["status"], second["user"], second["level"]) == ("401", "-", "INFO")
    assert second["request_id"] == refused.headers["x-openstack-request-id"]
    assert (third["status"], third["microversion"], third["user"]) == ("404", "1.0", "admin")
    assert third["request_id"] == missing.headers["x-openstack-request-id"]
    # Without debug the refusal's detail is not logged.
    assert "No resource provider with uuid" not in log_file.read_text()


def test_a_callers_global_request_id_is_kept(database, oslo_logging):
    conf = make_conf(database.url)
    log_file = oslo_logging(conf)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    caller = f"req-{uuid.uuid4()}"
    client.get("/resource_providers", headers={"X-OpenStack-Request-ID": caller})
    client.get("/resource_providers", headers={"X-OpenStack-Request-ID": "not-an-id"})
    with_id, without = _request_lines(log_file.read_text())
    assert with_id["global"] == caller
    assert without["global"] == "None"


def test_4xx_detail_at_debug(database, oslo_logging):
    conf = make_conf(database.url, debug=True)
    log_file = oslo_logging(conf)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    client.get(f"/resource_providers/{uuid.uuid4()}")
    text = log_file.read_text()
    [detail] = [line for line in text.splitlines() if " 404 answered: " in line]
    assert " DEBUG allotment.http.requestlog [" in detail
    assert "No resource provider with uuid" in detail


def test_5xx_at_error_with_one_traceback(database, oslo_logging, monkeypatch):
    from allotment.handlers import providers as handler

    def broken(conn, uuid):
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(handler.providers, "require", broken)
    conf = make_conf(database.url)
    log_file = oslo_logging(conf)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    assert client.get(f"/resource_providers/{uuid.uuid4()}").status == 500
    text = log_file.read_text()
    [line] = _request_lines(text)
    assert (line["level"], line["status"]) == ("ERROR", "500")
    assert text.count("Traceback (most recent call last)") == 1
    assert "RuntimeError: the disk is on fire" in text


def test_an_exception_below_every_handler_is_a_logged_500(caplog):
    def exploding(environ, start_response):
        raise ValueError("middleware bug")

    app = requestlog.RequestLog(exploding)
    resp = PlacementClient(app).get("/resource_providers")
    assert resp.status == 500
    [record] = [r for r in caplog.records if r.name == requestlog.__name__]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert '"GET /resource_providers" status: 500' in record.getMessage()


def _secret_backends() -> list[str]:
    # PostgreSQL's test server trusts loopback: a password in the URL is sent
    # (and must stay out of the log) but not checked.
    return ["postgresql"] if "postgresql" in _backends() else ["sqlite"]


@pytest.mark.parametrize("backend", _secret_backends())
def test_no_token_or_password_in_a_debug_log(backend, backend_databases, oslo_logging,
                                              tmp_path):
    database = backend_databases(backend)
    database.reset()
    db_password = "db-pass-" + uuid.uuid4().hex
    url = database.url
    if backend == "postgresql":
        url = url.replace("postgres@", f"postgres:{db_password}@", 1)
        assert SERVER_URLS["postgresql"]  # the trust-auth server of conftest
    with FakeKeystone() as keystone:
        conf_file = tmp_path / "placement.conf"
        conf_file.write_text(f"""
[DEFAULT]
debug = True
default_log_levels = keystonemiddleware=DEBUG,keystoneauth=DEBUG,sqlalchemy=DEBUG,urllib3=DEBUG
[api]
auth_strategy = keystone
[placement_database]
connection = {url}
connection_debug = 100
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
""")
        conf = config.load([str(conf_file)])
        log_file = oslo_logging(conf)
        client = PlacementClient(make_app(conf, prepare=False), token=None)
        token = keystone.issue(["admin"])
        assert client.get("/resource_providers", token=token).status == 200
        assert client.post("/resource_providers", {"name": "rp"}, token=token,
                           version="1.20").status == 200
        assert client.get("/resource_providers", token="forged-" + token).status == 401
        assert client.get("/healthcheck").status == 200
    text = log_file.read_text()
    # Debug output of every layer was on...
    assert "keystonemiddleware" in text and "keystoneauth" in text
    assert "SELECT" in text and "INSERT INTO resource_providers" in text
    assert "placement_database.connection  = ****" in text
    # ...and no secret is in it.
    for secret in (token, SERVICE_PASSWORD, db_password):
        assert secret not in text


def test_request_lines_can_be_kept_to_failures(database, oslo_logging, monkeypatch):
    """The request log's logger is an ordinary one: ``default_log_levels`` at
    WARN (the operating guide's advice for very large clouds, where each line
    costs a measurable share of a periodic read's CPU) drops the lines of
    answered requests, 4xx included, and keeps those of 5xx."""
    from oslo_log import log

    from allotment.handlers import providers as handler

    conf = make_conf(database.url)
    conf.set_override("default_log_levels",
                      [*log.get_default_log_levels(), "allotment.http.requestlog=WARN"])
    log_file = oslo_logging(conf)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    assert client.get("/resource_providers").status == 200
    assert client.get(f"/resource_providers/{uuid.uuid4()}").status == 404
    assert _request_lines(log_file.read_text()) == []

    def broken(conn, uuid):
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(handler.providers, "require", broken)
    assert client.get(f"/resource_providers/{uuid.uuid4()}").status == 500
    [line] = _request_lines(log_file.read_text())
    assert (line["level"], line["status"]) == ("ERROR", "500")
