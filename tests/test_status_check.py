"""``allotment status upgrade check``: oslo.upgradecheck's table and exit codes.

The data checks run on each backend, on rows written with SQL the way an
old Placement release left them.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from allotment import cli, upgradecheck
from allotment.db import tables as t
from tests.conftest import BackendDatabase, make_conf


def _check(database: BackendDatabase, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = upgradecheck.run(make_conf(database.url))
    return code, capsys.readouterr().out


def _result(out: str, check: str) -> str:
    """The Result line of ``check`` in oslo.upgradecheck's table."""
    lines = [line.strip("| ").strip() for line in out.splitlines()]
    return lines[lines.index(f"Check: {check}") + 1]


def _provider(conn: sa.Connection, root: bool = True) -> int:
    name = uuid.uuid4().hex
    provider_id = conn.execute(t.resource_providers.insert().values(
        uuid=str(uuid.uuid4()), name=name, generation=0)).inserted_primary_key[0]
    if root:
        conn.execute(t.resource_providers.update()
                     .where(t.resource_providers.c.id == provider_id)
                     .values(root_provider_id=provider_id))
    return int(provider_id)


def test_a_clean_database_passes_every_check(database, capsys):
    with database.engine.begin() as conn:
        _provider(conn)
    code, out = _check(database, capsys)
    assert code == 0, out
    for check in ("Database schema", "Missing Root Provider IDs", "Incomplete Consumers",
                  "Policy File JSON to YAML Migration"):
        assert _result(out, check) == "Result: Success"


def test_a_provider_without_root_id_fails(database, capsys):
    with database.engine.begin() as conn:
        _provider(conn, root=False)
    code, out = _check(database, capsys)
    assert code == 2
    assert _result(out, "Missing Root Provider IDs") == "Result: Failure"
    assert "online_data_migrations" in out
    assert _result(out, "Incomplete Consumers") == "Result: Success"


def test_allocations_without_consumer_warn(database, capsys):
    with database.engine.begin() as conn:
        provider_id = _provider(conn)
        consumer = str(uuid.uuid4())
        for resource_class_id in (0, 1):  # VCPU and MEMORY_MB of one consumer
            conn.execute(t.allocations.insert().values(
                resource_provider_id=provider_id, consumer_id=consumer,
                resource_class_id=resource_class_id, used=1))
    code, out = _check(database, capsys)
    assert code == 1, out
    assert _result(out, "Incomplete Consumers") == "Result: Warning"
    assert "1 consumer(s)" in out


def test_the_worst_result_is_the_exit_code(database, capsys):
    with database.engine.begin() as conn:
        provider_id = _provider(conn, root=False)
        conn.execute(t.allocations.insert().values(
            resource_provider_id=provider_id, consumer_id=str(uuid.uuid4()),
            resource_class_id=0, used=1))
    code, out = _check(database, capsys)
    assert code == 2
    assert _result(out, "Incomplete Consumers") == "Result: Warning"
    assert _result(out, "Missing Root Provider IDs") == "Result: Failure"


def test_a_json_policy_file_fails(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/policy.db"
    assert cli.main(["db", "upgrade", "--database-url", url]) == 0
    (tmp_path / "policy.json").write_text('{"placement:resource_providers:list": ""}')
    conf_file = tmp_path / "placement.conf"
    conf_file.write_text(f"[placement_database]\nconnection = {url}\n"
                         f"[oslo_policy]\npolicy_file = {tmp_path}/policy.json\n")
    capsys.readouterr()
    assert cli.main(["status", "upgrade", "check", "--config-file", str(conf_file)]) == 2
    out = capsys.readouterr().out
    assert _result(out, "Policy File JSON to YAML Migration") == "Result: Failure"
    assert _result(out, "Database schema") == "Result: Success"


def test_an_empty_database_needs_the_schema(tmp_path, capsys):
    code = cli.main(["status", "upgrade", "check", "--database-url",
                     f"sqlite:///{tmp_path}/empty.db"])
    out = capsys.readouterr().out
    assert code == 2
    assert _result(out, "Database schema") == "Result: Failure"
    assert "allotment db upgrade" in out


def test_a_check_that_cannot_run_is_an_error(capsys):
    # Nothing listens on port 1: the checks cannot run at all.
    code = cli.main(["status", "upgrade", "check", "--database-url",
                     "postgresql://postgres@127.0.0.1:1/placement"])
    captured = capsys.readouterr()
    assert code == 255
    # One line saying why (oslo.upgradecheck's runner prints a traceback on stdout).
    assert captured.out == ""
    assert captured.err.startswith("allotment status: the checks could not run: ")
    assert len(captured.err.strip().splitlines()) == 1
