"""The test session's own set-up: the database servers it is run against."""

from __future__ import annotations

import socket

from tests import conftest


def test_unreachable_servers_are_named_in_one_message() -> None:
    # A bound port nobody listens on refuses connections at once.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        servers = {
            "postgresql": f"postgresql+psycopg://postgres:secret@127.0.0.1:{port}/postgres",
            "mysql": f"mysql+pymysql://root@127.0.0.1:{port}/mysql",
        }
        message = conftest.unreachable_servers_message(servers, timeout=3)
    assert message is not None
    pg, mysql, advice = message.splitlines()
    assert pg.startswith("cannot connect to the postgresql test database at "
                         f"postgresql+psycopg://postgres:***@127.0.0.1:{port}/postgres: ")
    assert "secret" not in message
    assert mysql.startswith("cannot connect to the mysql test database at "
                            f"mysql+pymysql://root@127.0.0.1:{port}/mysql: ")
    assert "ALLOTMENT_TEST_DATABASES=sqlite make test" in advice
    assert "ALLOTMENT_TEST_POSTGRESQL_URL / ALLOTMENT_TEST_MYSQL_URL" in advice

