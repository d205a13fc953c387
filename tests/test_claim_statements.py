"""How many statements a claim sends to the database, on each backend.

A boot in nova's loop is mostly its claim once candidates are cheap, and a
claim's cost on PostgreSQL and MariaDB is mostly its round trips. These
tests count what the app sends for the claims nova makes (a new instance's
PUT, a move by POST, a release, a replacement) and pin an upper bound, so a
change that adds a round trip to the claim path shows here. Counted: every
statement the driver executes (``executemany`` counts once: one multi-row
statement) and the commit; triggers run inside the server and are not
round trips.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support.client import PlacementClient

VERSION = "1.39"
# The most statements (commit included) each claim may take on PostgreSQL and
# MariaDB, the history's write context (allotment.db.writer) included; SQLite
# adds its BEGIN IMMEDIATE and its context row's two. Before the claim was cut
# down to one statement per step they were 15, 17, 21 and 5 (without the
# context).
NEW_INSTANCE = 10
REPLACE = 10
MOVE = 11
RELEASE = 5



def _most(database: Any, statements: int) -> int:
    """The bound on ``database``'s backend: PostgreSQL sends the write context
    in its BEGIN's round trip (allotment.db.engine), one statement fewer."""
    return statements - 1 if database.backend == "postgresql" else statements


# Not counted: a transaction's BEGIN (PyMySQL sends none; PostgreSQL's, sent
# unseen by psycopg before, is a statement of ours since reads run in
# autocommit, the same round trip; SQLite's is in process), and SQLite's
# context row, in process too (it stands for the others' one context statement).
_BEGINS = ("BEGIN IMMEDIATE", "BEGIN ISOLATION LEVEL")
_IN_PROCESS = (*_BEGINS, "INSERT OR REPLACE INTO allotment_write_context",
               "DELETE FROM allotment_write_context")


class StatementCounter:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.commits = 0

    @property
    def total(self) -> int:
        """Round trips: every statement but the begin and SQLite's in-process
        extras, and the commit."""
        return len([s for s in self.statements
                    if not s.startswith(_IN_PROCESS)]) + self.commits + self._sqlite_context()

    def _sqlite_context(self) -> int:
        """SQLite's context row stands for the others' one context statement."""
        context = _IN_PROCESS[len(_BEGINS)]
        return 1 if any(s.startswith(context) for s in self.statements) else 0

    def report(self) -> str:
        return "\n".join([*self.statements, f"+ {self.commits} commit(s)"])


@contextmanager
def counting(engine: sa.Engine) -> Iterator[StatementCounter]:
    counter = StatementCounter()

    def on_execute(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                   executemany: bool) -> None:
        counter.statements.append(" ".join(statement.split())[:160])

    def on_commit(conn: Any) -> None:
        counter.commits += 1

    sa.event.listen(engine, "before_cursor_execute", on_execute)
    sa.event.listen(engine, "commit", on_commit)
    try:
        yield counter
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_execute)
        sa.event.remove(engine, "commit", on_commit)


def _provider(client: PlacementClient, name: str) -> str:
    rp = str(uuid.uuid4())
    assert client.request("POST", "/resource_providers", {"name": name, "uuid": rp},
                          version=VERSION).status == 200
    inventories = {rc: {"total": total} for rc, total in
                   (("VCPU", 64), ("MEMORY_MB", 262144), ("DISK_GB", 4000))}
    assert client.request("PUT", f"/resource_providers/{rp}/inventories",
                          {"resource_provider_generation": 0, "inventories": inventories},
                          version=VERSION).status == 200
    return rp


FLAVOR = {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 20}
PROJECT, USER = str(uuid.uuid4()), str(uuid.uuid4())


def _claim(rp: str, generation: int | None) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": FLAVOR}}, "project_id": PROJECT,
            "user_id": USER, "consumer_generation": generation, "consumer_type": "INSTANCE"}


@pytest.fixture
def cloud(client: PlacementClient, database: Any) -> Any:
    source, dest = _provider(client, "source"), _provider(client, "dest")
    # A warm-up claim: the project, user and consumer type rows exist, as in a
    # running cloud, and the app's first-use work is done.
    for consumer_type in ("INSTANCE", "MIGRATION"):
        claim = {**_claim(source, None), "consumer_type": consumer_type}
        assert client.request("PUT", f"/allocations/{uuid.uuid4()}", claim,
                              version=VERSION).status == 204
    return source, dest


def test_new_instance(client: PlacementClient, database: Any, cloud: Any) -> None:
    source, _ = cloud
    with counting(database.engine) as counter:
        response = client.request("PUT", f"/allocations/{uuid.uuid4()}", _claim(source, None),
                                  version=VERSION)
    assert response.status == 204, response
    assert counter.total <= _most(database, NEW_INSTANCE), counter.report()


def test_replace(client: PlacementClient, database: Any, cloud: Any) -> None:
    source, dest = cloud
    consumer = str(uuid.uuid4())
    assert client.request("PUT", f"/allocations/{consumer}", _claim(source, None),
                          version=VERSION).status == 204
    with counting(database.engine) as counter:
        response = client.request("PUT", f"/allocations/{consumer}", _claim(dest, 1),
                                  version=VERSION)
    assert response.status == 204, response
    assert counter.total <= _most(database, REPLACE), counter.report()


def test_move(client: PlacementClient, database: Any, cloud: Any) -> None:
    """nova's move: the instance's allocations go to the destination and the
    source's are held by the migration consumer, in one POST."""
    source, dest = cloud
    instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
    assert client.request("PUT", f"/allocations/{instance}", _claim(source, None),
                          version=VERSION).status == 204
    body = {instance: _claim(dest, 1), migration: {**_claim(source, None),
                                                   "consumer_type": "MIGRATION"}}
    for value in body.values():
        value["allocations"] = {rp: {"resources": res["resources"]}
                                for rp, res in value["allocations"].items()}
    with counting(database.engine) as counter:
        response = client.request("POST", "/allocations", body, version=VERSION)
    assert response.status == 204, response
    assert counter.total <= _most(database, MOVE), counter.report()


def test_release(client: PlacementClient, database: Any, cloud: Any) -> None:
    source, _ = cloud
    consumer = str(uuid.uuid4())
    assert client.request("PUT", f"/allocations/{consumer}", _claim(source, None),
                          version=VERSION).status == 204
    with counting(database.engine) as counter:
        response = client.request("DELETE", f"/allocations/{consumer}", version=VERSION)
    assert response.status == 204, response
    assert counter.total <= _most(database, RELEASE), counter.report()
