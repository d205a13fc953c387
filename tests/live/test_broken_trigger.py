"""A table instance MariaDB cached with a trigger it failed to parse.

On a Galera cluster under certification conflicts, MariaDB 10.11 sometimes
fails to parse a trigger of ``allocations`` while opening the table, although
the stored definition is fine, and keeps that instance in its table cache:
every claim that gets it fails with 1064 "Trigger ... has an error in its
body" (tests/live/test_galera.py saw it for seconds on end). Here the same state
is made on purpose on a private server: the trigger file is spoiled, the
table opened, the file put back. A claim must then still succeed (the
server is made to open the table anew), with the database user a Placement
deployment has: all privileges on its database and none beyond (no RELOAD).
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from tests.clients import live
from tests.support.dbservers import MariaDBServer, call, started

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def server() -> Iterator[MariaDBServer]:
    with started(MariaDBServer, "MariaDB") as created:
        created.execute("CREATE USER 'placement'@'%' IDENTIFIED BY 'secret'")
        yield created


def _root(server: MariaDBServer, database: str) -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=server.port, user="root", password="",
                           database=database, autocommit=True)


def _fires_triggers(conn: pymysql.connections.Connection) -> str:
    """An insert into allocations, rolled back: "ok" or the error's text."""
    try:
        with conn.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("INSERT INTO allocations (resource_provider_id, consumer_id, "
                           "resource_class_id, used) SELECT MIN(id), 'probe', 0, 1 "
                           "FROM resource_providers")
    except pymysql.err.ProgrammingError as exc:
        return str(exc.args[1])
    finally:
        conn.rollback()
    return "ok"


def _claim(url: str, rp: str) -> int:
    status, _, body = call(url, "PUT", f"/allocations/{uuid.uuid4()}", {
        "allocations": {rp: {"resources": {"VCPU": 1}}},
        "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
        "consumer_generation": None, "consumer_type": "INSTANCE"})
    assert status == 204, body
    return status


# How the trigger file is spoiled, and what the log then says: a trigger body
# that does not parse, or a definition that fails before the trigger's name
# (then MariaDB says "Unknown trigger", and every table with triggers is reopened).
SPOILS = {
    "body": (b"DECLARE cap DOUBLE", b"DECLARE cap DOUBL",
             "trigger allotment_guard_insert broken in the database's table cache; "
             "reopened allocations and trying again"),
    "name": (b"TRIGGER allotment_guard_insert BEFORE", b"TRIGGR allotment_guard_insert BEFORE",
             "trigger (unnamed) broken in the database's table cache; reopened "
             "allocations, consumers, inventories, placement_aggregates, resource_classes, "
             "resource_provider_aggregates, resource_provider_traits, resource_providers, "
             "traits and trying again"),
}


@pytest.mark.parametrize("spoil", sorted(SPOILS))
def test_a_claim_succeeds_past_a_cached_broken_trigger(server: MariaDBServer, tmp_path: Path,
                                                        spoil: str) -> None:
    part, spoiled, logged = SPOILS[spoil]
    database = f"placement_{spoil}"
    server.create_database(database)
    server.execute(f"GRANT ALL PRIVILEGES ON {database}.* TO 'placement'@'%'")
    url = f"mysql+pymysql://placement:secret@127.0.0.1:{server.port}/{database}"
    api = live.start(tmp_path / "server", database_url=url, workers=1, threads=2,
                     extra_conf="[allotment]\nmetrics = True\n")
    try:
        rp = str(uuid.uuid4())
        status, _, body = call(api.url, "POST", "/resource_providers",
                               {"uuid": rp, "name": "broken-trigger-host"})
        assert status == 200, body
        status, _, body = call(api.url, "PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
        assert status == 200, body
        _claim(api.url, rp)

        trigger_file = server.data / database / "allocations.TRG"
        good = trigger_file.read_bytes()
        assert part in good
        root = _root(server, database)
        try:
            trigger_file.write_bytes(good.replace(part, spoiled))
            with root.cursor() as cursor:
                cursor.execute("FLUSH TABLES allocations")
            assert "has an error in its body" in _fires_triggers(root)
            trigger_file.write_bytes(good)
            # The file is right again, the cached instance is not.
            assert "has an error in its body" in _fires_triggers(root)

            _claim(api.url, rp)
            assert _fires_triggers(root) == "ok"
        finally:
            trigger_file.write_bytes(good)
            root.close()
        log = api.log_path.read_text(errors="replace")
        assert logged in log
        scrape = urllib.request.Request(api.url + "/metrics",
                                        headers={"X-Auth-Token": "admin"})
        with urllib.request.urlopen(scrape, timeout=10) as response:
            exposed = response.read().decode()
        assert 'placement_write_retries_total{cause="broken_trigger"} 1.0' in exposed
        assert "Uncaught exception" not in log
        status, _, usages = call(api.url, "GET", f"/resource_providers/{rp}/usages")
        assert status == 200 and usages == {"resource_provider_generation": 3,
                                            "usages": {"VCPU": 2}}
    finally:
        api.stop()
