"""The ``allotment`` command: serve, db, status, and configuration sources."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import os_resource_classes as orc
import os_traits
import pytest
import sqlalchemy as sa

from allotment import cli, config
from allotment.db import migrate
from allotment.db import tables as t
from allotment.db.engine import create_engine
from tests import conftest

ALLOTMENT = [sys.executable, "-m", "allotment.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _write_conf(path, url: str, extra: str = "") -> str:
    path.write_text(f"[placement_database]\nconnection = {url}\nsync_on_startup = True\n"
                    f"[api]\nauth_strategy = noauth2\n{extra}")
    return str(path)


def test_env_overrides_config_file(tmp_path, monkeypatch):
    conf_file = _write_conf(tmp_path / "placement.conf", "sqlite:////tmp/nowhere.db")
    monkeypatch.setenv("OS_PLACEMENT__MAX_ALLOCATION_CANDIDATES", "7")
    monkeypatch.setenv("OS_PLACEMENT_DATABASE__CONNECTION", "sqlite:////tmp/elsewhere.db")
    conf = config.load([conf_file])
    assert conf.placement.max_allocation_candidates == 7
    assert conf.placement_database.connection == "sqlite:////tmp/elsewhere.db"
    assert conf.api.auth_strategy == "noauth2"


def test_config_dir_from_environment(tmp_path, monkeypatch):
    _write_conf(tmp_path / "placement.conf", "sqlite:////tmp/fromdir.db")
    monkeypatch.setenv("OS_PLACEMENT_CONFIG_DIR", str(tmp_path))
    conf = config.load()
    assert conf.placement_database.connection == "sqlite:////tmp/fromdir.db"


def test_noauth_refused_on_public_address(tmp_path, capsys):
    code = cli.main(["serve", "--host", "0.0.0.0", "--database-url",
                     f"sqlite:///{tmp_path}/x.db"])
    assert code == 2
    assert "refusing to serve auth_strategy=noauth2" in capsys.readouterr().err


def test_db_upgrade_is_idempotent_and_status_checks(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    for _ in range(2):
        assert cli.main(["db", "upgrade", "--database-url", url]) == 0
        assert "revision" in capsys.readouterr().out
    assert cli.main(["db", "version", "--database-url", url]) == 0
    assert capsys.readouterr().out.strip() == migrate.head() == "0003"
    code = cli.main(["status", "upgrade", "check", "--database-url", url])
    assert code == 0 and "Success" in capsys.readouterr().out


# What only ``allotment serve`` and ``allotment.wsgi:application`` need.
# The policy enforcer, not the option list the status check reads (oslo_policy.opts).
WEB_STACK: tuple[str, ...] = ("falcon", "keystonemiddleware", "oslo_policy.policy",
                             "allotment.wsgi")

_DB_COMMANDS_SCRIPT = """
import json, sys
from allotment import cli
url = sys.argv[1]
codes = [cli.main(["db", "upgrade", "--database-url", url]),
         cli.main(["db", "version", "--database-url", url]),
         cli.main(["status", "upgrade", "check", "--database-url", url])]
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def test_database_commands_do_not_load_the_web_stack(tmp_path: Path) -> None:
    """``allotment db`` and ``allotment status`` import the database layer only.

    A fresh interpreter, since this test process has the web stack loaded.
    """
    out = subprocess.run([sys.executable, "-c", _DB_COMMANDS_SCRIPT,
                          f"sqlite:///{tmp_path}/light.db"],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["codes"] == [0, 0, 0]
    loaded = [name for name in result["modules"]
              if any(name == top or name.startswith(top + ".") for top in WEB_STACK)]
    assert loaded == []


def test_serve_with_operator_config_and_sigterm(tmp_path):
    port = _free_port()
    conf_file = _write_conf(tmp_path / "placement.conf", f"sqlite:///{tmp_path}/serve.db")
    proc = subprocess.Popen([*ALLOTMENT, "serve", "--config-file", conf_file, "--host",
                             "127.0.0.1", "--port", str(port), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail("server did not start")
                time.sleep(0.2)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/resource_providers",
                                     headers={"X-Auth-Token": "admin"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert f"http://127.0.0.1:{port}" in output and "serve.db" in output


@pytest.mark.parametrize("backend", conftest._backends())
def test_sync_in_several_processes_at_once(backend, tmp_path):
    """Workers starting together on a fresh database must not trip over each other."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        url = conftest._create_server_database(backend)
    try:
        procs = [subprocess.Popen([*ALLOTMENT, "db", "upgrade", "--database-url", url],
                                  env=dict(os.environ), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for _ in range(4)]
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, out
        engine = create_engine(url)
        with engine.connect() as conn:
            classes = conn.execute(sa.select(sa.func.count()).select_from(
                t.resource_classes)).scalar()
            traits = conn.execute(sa.select(sa.func.count()).select_from(t.traits)).scalar()
        engine.dispose()
        assert classes == len(orc.STANDARDS)
        assert traits == len(os_traits.get_traits())
    finally:
        if backend != "sqlite":
            conftest._drop_server_database(backend, url)


def test_wsgi_application_reads_config_dir(tmp_path, monkeypatch):
    """``allotment.wsgi:application`` for uwsgi/gunicorn/mod_wsgi configures itself."""
    import falcon.testing

    from allotment import wsgi

    _write_conf(tmp_path / "placement.conf", f"sqlite:///{tmp_path}/wsgi.db")
    monkeypatch.setenv("OS_PLACEMENT_CONFIG_DIR", str(tmp_path))
    client = falcon.testing.TestClient(wsgi._LazyApplication())
    resp = client.simulate_get("/resource_providers", headers={"X-Auth-Token": "admin"})
    assert resp.status_code == 200
    assert resp.json == {"resource_providers": []}
