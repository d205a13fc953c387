"""The commands pointed at the wrong database, or misconfigured: one line, the
documented exit status, and the database as it was (tables, triggers, rows).

Each database case runs on SQLite, PostgreSQL and MariaDB, on a database made
for the test and dropped after it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from allotment import cli, manage
from allotment.db import migrate
from allotment.db.engine import normalize_url
from tests import conftest


def _fresh_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        (tmp_path / "placement.sqlite").touch()  # an empty database
        return f"sqlite:///{tmp_path}/placement.sqlite"
    return conftest._create_server_database(backend)


@pytest.fixture(params=conftest._backends())
def fresh_url(request, tmp_path) -> Iterator[str]:
    url = _fresh_url(request.param, tmp_path)
    try:
        yield url
    finally:
        if request.param != "sqlite":
            conftest._drop_server_database(request.param, url)


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(normalize_url(url), poolclass=NullPool)


def _triggers(conn: sa.Connection) -> list[str]:
    backend = conn.dialect.name
    if backend == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    elif backend == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
    else:
        query = ("SELECT trigger_name FROM information_schema.triggers "
                 "WHERE trigger_schema = DATABASE()")
    return sorted(str(name) for name in conn.exec_driver_sql(query).scalars())


def snapshot(url: str) -> dict[str, object]:
    """Every table with its columns and rows, and every trigger."""
    if url.startswith("sqlite:///") and not os.path.exists(url.removeprefix("sqlite:///")):
        return {"file": None}
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            found: dict[str, object] = {"triggers": _triggers(conn)}
            for name in sorted(inspector.get_table_names()):
                columns = [column["name"] for column in inspector.get_columns(name)]
                rows = conn.exec_driver_sql(f"SELECT * FROM {name}").fetchall()
                found[name] = (columns, sorted(map(repr, rows)))
            return found
    finally:
        engine.dispose()


def _foreign(url: str, *ddl: str) -> None:
    engine = _engine(url)
    with engine.begin() as conn:
        for statement in ddl:
            conn.exec_driver_sql(statement)
    engine.dispose()


ANOTHER_APPLICATION = (
    "CREATE TABLE users (id INTEGER PRIMARY KEY, email VARCHAR(255))",
    "CREATE TABLE projects (id INTEGER PRIMARY KEY, name VARCHAR(255))",
    "INSERT INTO users (id, email) VALUES (1, 'a@example.org')",
    "INSERT INTO projects (id, name) VALUES (1, 'apollo')",
)


def _conf(tmp_path: Path, url: str) -> str:
    path = tmp_path / "placement.conf"
    path.write_text(f"[placement_database]\nconnection = {url}\n")
    return str(path)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


MANAGE_COMMANDS = [["db", "sync"], ["db", "stamp", "head"], ["db", "stamp", "bogus"],
                   ["db", "online_data_migrations"],
                   ["db", "online_data_migrations", "--max-count", "10"]]


@pytest.mark.parametrize("command", MANAGE_COMMANDS, ids=" ".join)
def test_manage_refuses_another_applications_database(fresh_url, tmp_path, capsys,
                                                      command) -> None:
    _foreign(fresh_url, *ANOTHER_APPLICATION)
    before = snapshot(fresh_url)
    capsys.readouterr()
    assert manage.main(["--config-file", _conf(tmp_path, fresh_url), *command]) == 1
    line = _one_line(capsys)
    if command[-1] == "bogus":
        assert "bogus" in line, line
    else:
        assert "not a Placement database: table projects has columns (id, name)" in line, line
    assert snapshot(fresh_url) == before


def test_allotment_db_upgrade_refuses_another_applications_database(fresh_url, capsys) -> None:
    _foreign(fresh_url, *ANOTHER_APPLICATION)
    before = snapshot(fresh_url)
    assert cli.main(["db", "upgrade", "--database-url", fresh_url]) == 1
    assert "not a Placement database" in _one_line(capsys)
    assert snapshot(fresh_url) == before


def test_other_tables_without_a_placement_version_are_refused(fresh_url, tmp_path,
                                                               capsys) -> None:
    _foreign(fresh_url, "CREATE TABLE orders (id INTEGER PRIMARY KEY)",
             "INSERT INTO orders (id) VALUES (7)")
    before = snapshot(fresh_url)
    assert manage.main(["--config-file", _conf(tmp_path, fresh_url), "db", "sync"]) == 1
    line = _one_line(capsys)
    assert "holds other tables (orders) and no Placement version" in line, line
    assert snapshot(fresh_url) == before


def test_an_upstream_database_is_still_adopted(fresh_url, tmp_path, capsys) -> None:
    """Upstream's tables and version, with a table of the operator's beside them."""
    engine = _engine(fresh_url)
    migrate.upgrade(engine, "0001")
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {migrate.VERSION_TABLE}")
        conn.exec_driver_sql("CREATE TABLE operator_notes (id INTEGER PRIMARY KEY)")
    engine.dispose()
    assert manage.main(["--config-file", _conf(tmp_path, fresh_url), "db", "sync"]) == 0
    assert capsys.readouterr().err == ""
    engine = _engine(fresh_url)
    assert migrate.current(engine) == migrate.head()
    engine.dispose()


def test_stamp_of_an_unknown_revision_writes_nothing(fresh_url, tmp_path, capsys) -> None:
    before = snapshot(fresh_url)
    assert manage.main(["--config-file", _conf(tmp_path, fresh_url),
                        "db", "stamp", "bogus"]) == 1
    assert "bogus" in _one_line(capsys)
    assert snapshot(fresh_url) == before


def test_online_data_migrations_on_an_empty_database(fresh_url, tmp_path, capsys) -> None:
    before = snapshot(fresh_url)
    conf = _conf(tmp_path, fresh_url)
    assert manage.main(["--config-file", conf, "db", "online_data_migrations"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and 'run "placement-manage db sync" first' in lines[0], captured
    assert "Traceback" not in captured.out
    assert snapshot(fresh_url) == before


def test_a_huge_max_count_means_every_row(fresh_url, tmp_path, capsys) -> None:
    conf = _conf(tmp_path, fresh_url)
    assert manage.main(["--config-file", conf, "db", "sync"]) == 0
    capsys.readouterr()
    assert manage.main(["--config-file", conf, "db", "online_data_migrations",
                        "--max-count", str(10**30)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "Error" not in captured.out, captured


@pytest.mark.parametrize("text", [None, "[placement_database\nconnection = x\n"],
                         ids=["missing", "garbage"])
def test_a_configuration_that_cannot_be_read(tmp_path, capsys, text) -> None:
    path = tmp_path / "placement.conf"
    if text is not None:
        path.write_text(text)
    assert manage.main(["--config-file", str(path), "db", "sync"]) == 2
    assert "placement-manage: cannot read the configuration" in _one_line(capsys)
    assert cli.main(["audit", "--config-file", str(path)]) == 2
    assert "allotment: cannot read the configuration" in _one_line(capsys)
    assert cli.main(["status", "upgrade", "check", "--config-file", str(path)]) == 255
    assert "cannot read the configuration" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == ([path] if text is not None else [])


def test_status_on_an_unreachable_database_is_one_line(capsys) -> None:
    # Nothing listens on port 1.
    code = cli.main(["status", "upgrade", "check", "--database-url",
                     "postgresql://postgres@127.0.0.1:1/placement"])
    assert code == 255
    line = _one_line(capsys)
    assert line.startswith("allotment status: the checks could not run:"), line
    assert "Traceback" not in line


def test_audit_creates_no_database(tmp_path, capsys, monkeypatch) -> None:
    typo = tmp_path / "new" / "dirs" / "typo.sqlite"
    assert cli.main(["audit", "--database-url", f"sqlite:///{typo}"]) == 2
    assert f"no database at {typo}" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []
    # No configuration at all: the default database is not made either.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for name in [key for key in os.environ if key.startswith("OS_PLACEMENT")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["audit"]) == 2
    assert "no database at" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_serve_refuses_a_bad_headroom_request_before_serving(tmp_path, capsys,
                                                              monkeypatch) -> None:
    from allotment import server

    def must_not_serve(*args, **kwargs):
        raise AssertionError("served")

    monkeypatch.setattr(server, "serve", must_not_serve)
    conf = tmp_path / "placement.conf"
    conf.write_text(f"[placement_database]\nconnection = sqlite:///{tmp_path}/s.db\n"
                    "[api]\nauth_strategy = noauth2\n"
                    "[allotment]\nmetrics = True\nheadroom_requests = big = resources=VCPU\n")
    assert cli.main(["serve", "--config-file", str(conf)]) == 2
    assert "headroom_requests" in _one_line(capsys)
    assert not (tmp_path / "s.db").exists()
