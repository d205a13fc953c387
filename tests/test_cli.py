"""The ``allotment`` command, in-process: db, status, serve's refusals, configuration sources.

The commands run in processes of their own are in tests/live/test_cli_processes.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from allotment import cli, config
from allotment.db import migrate


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
    assert capsys.readouterr().out.strip() == migrate.head() == "0009"
    code = cli.main(["status", "upgrade", "check", "--database-url", url])
    assert code == 0 and "Success" in capsys.readouterr().out


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
