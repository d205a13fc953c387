"""A write's cost on the history does not grow with the history it touches.

The history triggers (migrations 0005, 0006) merge a transaction's changes to
one key into one entry, so each write looks up "this transaction's entry for
(consumer, provider, class)" or "(provider, class)". Those lookups must be one
index probe each, not a walk over every entry the consumer or provider ever
had: a long-lived instance moved often, or a busy host, must not get slower
with age.

The work is counted, not timed, in each of allotment's write transactions
(between the write context's first and last statement): on PostgreSQL the
rows the transaction read from the history tables and their indexes
(``pg_stat_get_xact_*``), on MariaDB the session's ``Handler_read_*``
counters (every row any statement of the transaction read, triggers
included), on SQLite the virtual machine's steps (a progress handler). A
write on a consumer and a provider with 10,000 entries each must cost what
the same write costs on fresh ones in the same database.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.pool import NullPool

from allotment.db import migrate, standard_names
from allotment.db import tables as t
from allotment.db.engine import write_transaction
from allotment.db.writer import NO_REQUEST, RequestIds, WriteContext
from tests import conftest
from tests.support.claims_support import provider_with, put
from tests.test_schema import fresh_engine

ENTRIES = 10_000

# Rows read from the history's tables and indexes in the current transaction.
_PG_HISTORY_READS = sa.text(
    "SELECT COALESCE(SUM(pg_stat_get_xact_tuples_returned(c.oid) "
    "+ pg_stat_get_xact_tuples_fetched(c.oid)), 0) FROM pg_class c "
    "WHERE c.relname LIKE 'allotment\\_%\\_history%'")
_MYSQL_READS = sa.text(
    "SELECT SUM(VARIABLE_VALUE) FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME LIKE 'HANDLER\\_READ\\_%'")


class CountingContext(WriteContext):
    """The write context, counting the work each write transaction did."""

    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        self.counts: list[int] = []
        self._start = 0
        self._steps = 0

    def begin(self, conn: sa.Connection, ids: RequestIds = NO_REQUEST) -> None:
        if self.dialect == "postgresql":
            # Counted from here, not from zero: PostgreSQL's "xact" counters
            # hold every transaction of the session since its statistics were
            # last flushed (at most once a second, when the session goes
            # idle). A connection reused at once carried the previous writes'
            # reads into this one's count.
            self._start = int(conn.execute(_PG_HISTORY_READS).scalar_one())
        elif self.dialect == "mysql":
            self._start = int(conn.execute(_MYSQL_READS).scalar_one())
        elif self.dialect == "sqlite":
            self._steps = 0
            conn.connection.driver_connection.set_progress_handler(self._step, 1)
        super().begin(conn, ids)

    def end(self, conn: sa.Connection) -> None:
        if self.dialect == "postgresql":
            self.counts.append(int(conn.execute(_PG_HISTORY_READS).scalar_one()) - self._start)
        elif self.dialect == "mysql":
            self.counts.append(int(conn.execute(_MYSQL_READS).scalar_one()) - self._start)
        else:
            conn.connection.driver_connection.set_progress_handler(None, 1)
            self.counts.append(self._steps)
        super().end(conn)

    def _step(self) -> int:
        self._steps += 1
        return 0

    def work_of(self, write: Callable[[], Any]) -> int:
        """The work of the write transactions ``write`` ran."""
        self.counts = []
        write()
        assert self.counts, "no write transaction was counted"
        return sum(self.counts)


@pytest.fixture
def counting(database: Any) -> Iterator[CountingContext]:
    original = database.db.write_context
    counting = CountingContext(database.backend)
    database.db.write_context = counting
    yield counting
    database.db.write_context = original


def _ids(database: Any, rp: str) -> tuple[int, int]:
    with database.engine.connect() as conn:
        rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                             .where(t.resource_providers.c.uuid == rp)).scalar_one()
        vcpu = conn.execute(sa.select(t.resource_classes.c.id)
                            .where(t.resource_classes.c.name == "VCPU")).scalar_one()
    return rp_id, vcpu


def _long_history(database: Any, consumer: str, rp: str) -> None:
    """ENTRIES allocation entries for ``consumer`` on ``rp`` and ENTRIES inventory
    entries for ``rp``, as many earlier transactions would have left them."""
    rp_id, vcpu = _ids(database, rp)
    when = datetime.datetime(2026, 1, 1)
    common = {"created_at": when, "resource_provider_id": rp_id, "resource_provider_uuid": rp,
              "resource_class_id": vcpu, "resource_class": "VCPU", "writer": "outside"}
    # Negative transaction ids: no real transaction's (whose entries would merge).
    allocations = [{**common, "txn": -n, "consumer_uuid": consumer, "project_id": "proj",
                    "user_id": "user", "used_before": n % 4, "used_after": (n + 1) % 4}
                   for n in range(1, ENTRIES + 1)]
    inventories = [{**common, "txn": -n, "resource_provider_generation": n,
                    "total_before": 64 + n % 2, "total_after": 64 + (n + 1) % 2}
                   for n in range(1, ENTRIES + 1)]
    with database.engine.begin() as conn:
        conn.execute(t.allocation_history.insert(), allocations)
        conn.execute(t.inventory_history.insert(), inventories)


def _generation(client: Any, rp: str) -> int:
    return client.get(f"/resource_providers/{rp}").json()["generation"]


def _replace_allocations(client: Any, consumer: str, rp: str) -> None:
    # A new project: the consumer's owner changes too (its trigger runs).
    resp = put(client, consumer, {rp: {"VCPU": 3, "MEMORY_MB": 1024}}, 1, project="other")
    assert resp.status == 204, resp


def _replace_inventories(client: Any, rp: str) -> None:
    resp = client.put(f"/resource_providers/{rp}/inventories", {
        "resource_provider_generation": _generation(client, rp),
        "inventories": {"VCPU": {"total": 128}, "MEMORY_MB": {"total": 8192},
                        "DISK_GB": {"total": 100}}})
    assert resp.status == 200, resp


def test_a_write_costs_the_same_whatever_history_it_touches(client, database, counting):
    aged_rp = provider_with(client, "aged", VCPU=64, MEMORY_MB=4096)
    fresh_rp = provider_with(client, "fresh", VCPU=64, MEMORY_MB=4096)
    aged, fresh = str(uuid.uuid4()), str(uuid.uuid4())
    for consumer, rp in ((aged, aged_rp), (fresh, fresh_rp)):
        assert put(client, consumer, {rp: {"VCPU": 2, "MEMORY_MB": 512}}).status == 204
    _long_history(database, aged, aged_rp)

    work = {
        "allocations": (counting.work_of(lambda: _replace_allocations(client, aged, aged_rp)),
                        counting.work_of(lambda: _replace_allocations(client, fresh, fresh_rp))),
        "inventories": (counting.work_of(lambda: _replace_inventories(client, aged_rp)),
                        counting.work_of(lambda: _replace_inventories(client, fresh_rp))),
    }
    # The same statements on rows of the same shapes: the same work, give or take
    # a few reads (the aged provider's row sits elsewhere in its table).
    for kind, (on_aged, on_fresh) in work.items():
        assert on_aged <= on_fresh * 1.1 + 20, (kind, work)
        if database.backend == "postgresql":
            # Counted there: the history rows read, a few per entry written, not
            # the whole table (a plan that scans reads all 20,000 for any write).
            assert on_fresh <= 100, (kind, work)

    # And the entries are what the history always recorded.
    entries = client.get(f"/history/allocations?consumer_uuid={aged}&limit=3").json()["entries"]
    assert sorted((e["resource_class"], e["used_before"], e["used_after"], e["project_id"])
                  for e in entries[:2]) == [("MEMORY_MB", 512, 1024, "other"),
                                            ("VCPU", 2, 3, "other")]
    inventory = client.get(f"/history/inventories?resource_provider_uuid={aged_rp}&limit=3")
    assert sorted((e["resource_class"], e["total_before"], e["total_after"])
                  for e in inventory.json()["entries"]) == [
        ("DISK_GB", None, 100), ("MEMORY_MB", 4096, 8192), ("VCPU", 64, 128)]


@pytest.mark.parametrize("backend", conftest._backends())
def test_migration_0006_goes_up_and_down(backend, tmp_path):
    """0006 only adds the two indexes: down to 0005 drops them, up again restores them."""
    def index_names(engine: sa.Engine) -> set[str]:
        insp = sa.inspect(engine)
        return {index["name"] for table in (t.allocation_history, t.inventory_history)
                for index in insp.get_indexes(table.name)}

    added = {f"{t.allocation_history.name}_txn_key_idx", f"{t.inventory_history.name}_txn_key_idx"}
    with fresh_engine(backend, tmp_path) as engine:
        migrate.upgrade(engine, "0005")
        at_0005 = index_names(engine)
        assert not added & at_0005
        migrate.upgrade(engine, "0006")
        assert migrate.current(engine) == "0006"
        assert index_names(engine) == at_0005 | added
        # Down: no command of allotment's downgrades, so alembic's own, as 0006 is written.
        with write_transaction(engine) as conn:
            command.downgrade(migrate._config(conn), "0005")
        assert migrate.current(engine) == "0005"
        assert index_names(engine) == at_0005
        migrate.upgrade(engine)
        assert index_names(engine) == at_0005 | added


# Writes whose history entries exercise every branch of the MySQL triggers'
# lookups: new entries and merges (allotment's transactions), entries by an
# outside writer, a key moved to another consumer (an UPDATE's two sides), a
# consumer deleted before its allocations (its names NULL), a class id and a
# provider id no row has, inventories created, changed and deleted.
_HISTORY_WRITES: list[tuple[bool, list[str]]] = [
    (False, [
        "INSERT INTO projects (id, external_id) VALUES (1, 'proj-a'), (2, 'proj-b')",
        "INSERT INTO users (id, external_id) VALUES (1, 'user-a')",
        "INSERT INTO consumer_types (id, name) VALUES (1, 'INSTANCE')",
        "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id) "
        "VALUES (1, 'aaaaaaaa-0000-0000-0000-000000000001', 'rp-1', 0, 1)",
        "INSERT INTO resource_classes (id, name) VALUES (10000, 'CUSTOM_GOLD')",
    ]),
    (True, [
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation) "
        "VALUES ('cccccccc-0000-0000-0000-000000000001', 1, 1, 1, 0), "
        "('cccccccc-0000-0000-0000-000000000002', 2, 1, NULL, 0)",
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, "
        "min_unit, max_unit, step_size, allocation_ratio) VALUES "
        "(1, 0, 64, 0, 1, 64, 1, 4.0), (1, 1, 4096, 512, 1, 4096, 1, 1.0), "
        "(1, 10000, 5, 0, 1, 5, 1, 1.0)",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) "
        "VALUES (1, 'cccccccc-0000-0000-0000-000000000001', 0, 2), "
        "(1, 'cccccccc-0000-0000-0000-000000000001', 1, 512), "
        "(1, 'cccccccc-0000-0000-0000-000000000002', 10000, 1)",
        "UPDATE allocations SET used = 4 WHERE resource_class_id = 0",
        "UPDATE inventories SET total = 128 WHERE resource_class_id = 0",
    ]),
    (True, [
        "UPDATE allocations SET consumer_id = 'cccccccc-0000-0000-0000-000000000002' "
        "WHERE resource_class_id = 1",
        "DELETE FROM inventories WHERE resource_class_id = 10000",
    ]),
    (False, [
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) "
        "VALUES (7, 'cccccccc-0000-0000-0000-000000000003', 99999, 3)",
        "UPDATE inventories SET reserved = 1 WHERE resource_class_id = 1",
        "DELETE FROM consumers WHERE uuid = 'cccccccc-0000-0000-0000-000000000002'",
        "DELETE FROM allocations WHERE consumer_id = 'cccccccc-0000-0000-0000-000000000002'",
    ]),
]


def _history_of_writes(engine: sa.Engine) -> list[tuple]:
    """The history the writes above leave, without ids, times and transaction tokens."""
    from allotment.db.engine import Database

    standard_names.sync(engine)
    database = Database(engine)
    # An outside writer's session, without the variables allotment's sessions keep.
    outside = sa.create_engine(engine.url, poolclass=NullPool)
    try:
        for as_allotment, statements in _HISTORY_WRITES:
            with (database.write() if as_allotment else outside.begin()) as conn:
                for statement in statements:
                    conn.exec_driver_sql(statement)
    finally:
        outside.dispose()
    skip = {"id", "created_at", "txn"}
    with engine.connect() as conn:
        return [tuple(row) for table in (t.allocation_history, t.inventory_history)
                for row in conn.execute(
                    sa.select(*(c for c in table.c if c.name not in skip))
                    .order_by(table.c.id))]


def _mysql_history_triggers(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE :pattern"),
            {"pattern": "allotment\\_history\\_%"}).all())


@pytest.mark.skipif("mysql" not in conftest._backends(), reason="MySQL's history triggers")
def test_migration_0008_records_the_same_history_with_one_lookup(tmp_path):
    """0008 reads an entry's names in one statement on MySQL/MariaDB: the same
    entries as 0007's five lookups; down to 0007 restores those triggers as they were."""
    with fresh_engine("mysql", tmp_path) as before, fresh_engine("mysql", tmp_path) as after:
        migrate.upgrade(before, "0007")
        migrate.upgrade(after, "0008")
        triggers_0007 = _mysql_history_triggers(before)
        triggers_0008 = _mysql_history_triggers(after)
        assert set(triggers_0008) == set(triggers_0007) and len(triggers_0008) == 7
        changed = {name for name in triggers_0008
                   if triggers_0008[name] != triggers_0007[name]}
        assert changed == {f"allotment_history_{table}_{event}"
                           for table in ("allocations", "inventories")
                           for event in ("INSERT", "UPDATE", "DELETE")}
        assert not any(lookup in body for body in triggers_0008.values()
                       for lookup in ("SET v_type", "SET v_uuid", "SET v_generation"))

        recorded = _history_of_writes(before)
        assert len(recorded) == 13
        assert _history_of_writes(after) == recorded

        with write_transaction(after) as conn:
            command.downgrade(migrate._config(conn), "0007")
        assert _mysql_history_triggers(after) == triggers_0007
        migrate.upgrade(after, "0008")
        assert _mysql_history_triggers(after) == triggers_0008


# A claim's statements in allotment's transactions: a new instance (its delete
# finds nothing; its second row takes its names from the first's), then a
# replacement of its rows (delete, insert: merged), two consumers' rows in one
# statement (the second consumer has no row: its names are NULL).
_CLAIMS: list[tuple[bool, list[str]]] = [
    (True, [
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation) "
        "VALUES ('cccccccc-0000-0000-0000-000000000004', 2, 1, 1, 0)",
        "DELETE FROM allocations WHERE consumer_id = 'cccccccc-0000-0000-0000-000000000004'",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) "
        "VALUES (1, 'cccccccc-0000-0000-0000-000000000004', 0, 1), "
        "(1, 'cccccccc-0000-0000-0000-000000000004', 1, 256)",
    ]),
    (True, [
        "DELETE FROM allocations WHERE consumer_id = 'cccccccc-0000-0000-0000-000000000004'",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) "
        "VALUES (1, 'cccccccc-0000-0000-0000-000000000004', 0, 2), "
        "(1, 'cccccccc-0000-0000-0000-000000000004', 1, 256), "
        "(1, 'cccccccc-0000-0000-0000-000000000005', 0, 1)",
    ]),
]

_TRIGGER_WORK = sa.text(
    "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME IN ('HANDLER_READ_KEY', 'COM_INSERT')")


def _mysql_allocation_triggers(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS "
            "WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'allocations'")).all())


def _claim_work(engine: sa.Engine) -> tuple[list[tuple], list[tuple], dict[str, int]]:
    """The writes above, then the claims: the history, the change rows (kind,
    ref) of the claims, and the index lookups and inserts the new instance's
    insert ran."""
    from allotment.db.engine import Database

    history = _history_of_writes(engine)
    database = Database(engine)
    with engine.connect() as conn:
        last_change = conn.execute(sa.text("SELECT MAX(id) FROM allotment_changes")).scalar()
    work: dict[str, int] = {}
    for _as_allotment, statements in _CLAIMS:
        with database.write() as conn:
            for statement in statements:
                before = dict(conn.execute(_TRIGGER_WORK).all())
                conn.exec_driver_sql(statement)
                after = dict(conn.execute(_TRIGGER_WORK).all())
                if not work and statement.startswith("INSERT INTO allocations"):
                    work = {name: int(after[name]) - int(before[name]) for name in after}
    skip = {"id", "created_at", "txn"}
    with engine.connect() as conn:
        history = [tuple(row) for row in conn.execute(
            sa.select(*(c for c in t.allocation_history.c if c.name not in skip))
            .order_by(t.allocation_history.c.id))]
        changes = [tuple(row) for row in conn.execute(sa.text(
            "SELECT kind, ref FROM allotment_changes WHERE id > :last ORDER BY id"),
            {"last": last_change})]
    return history, changes, work


@pytest.mark.skipif("mysql" not in conftest._backends(), reason="MySQL's allocation triggers")
def test_migration_0009_records_the_same_with_fewer_statements(tmp_path):
    """0009 on MySQL/MariaDB: the same history and the same providers logged,
    without looking for entries to merge within the statement that wrote them,
    with names looked up once per statement, consumer and provider, and with
    one change row per provider and statement; down to 0008 restores its
    triggers as they were."""
    with fresh_engine("mysql", tmp_path) as before, fresh_engine("mysql", tmp_path) as after:
        migrate.upgrade(before, "0008")
        migrate.upgrade(after, "0009")
        triggers_0008 = _mysql_allocation_triggers(before)
        triggers_0009 = _mysql_allocation_triggers(after)
        assert {name for name in triggers_0009 if triggers_0009[name] != triggers_0008[name]} \
            == {f"allotment_{kind}_allocations_{event}" for kind, events in
                (("history", ("INSERT", "UPDATE", "DELETE")), ("log", ("INSERT", "DELETE")))
                for event in events}

        history_0008, changes_0008, work_0008 = _claim_work(before)
        history_0009, changes_0009, work_0009 = _claim_work(after)
        # The claims' entries: merged across statements, named, as before.
        assert history_0009 == history_0008 and len(history_0008) == 8 + 5
        assert history_0009[8][1:4] == ("INSTANCE", "proj-b", "user-a")
        assert history_0009[9][1:4] == history_0009[8][1:4]
        assert set(changes_0009) == set(changes_0008) == {(3, 1)}
        assert len(changes_0009) == 3 < len(changes_0008)
        # The new instance's two rows: the second one looks for no entry to
        # merge with (one index lookup) and looks up its class's name alone
        # (two or more: the consumer, its owner's rows, the provider); one
        # change row (one fewer insert).
        assert work_0009["HANDLER_READ_KEY"] <= work_0008["HANDLER_READ_KEY"] - 3
        assert work_0009["COM_INSERT"] == work_0008["COM_INSERT"] - 1

        with write_transaction(after) as conn:
            command.downgrade(migrate._config(conn), "0008")
        assert _mysql_allocation_triggers(after) == triggers_0008
        migrate.upgrade(after)
        assert _mysql_allocation_triggers(after) == triggers_0009
