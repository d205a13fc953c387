"""The read model on each backend: raw SQL seen at once, drift found, log trimmed.

In-process, against the ``database`` fixture (SQLite, PostgreSQL, MariaDB);
``test_read_model_proof`` does the same with live servers and concurrency.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from allotment.candidates import engine
from allotment.candidates import model as read_model
from allotment.candidates.feed import CHANGES, GALERA_GAP_SETTLE, Feed, Kind, Position
from allotment.candidates.model import ReadModel
from allotment.candidates.request import Settings
from allotment.db.engine import Database, create_engine
from allotment.http.candidates_query import parse_request
from allotment.http.candidates_render import render_body
from allotment.http.microversion import negotiate
from allotment.http.request import Query
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient

VERSION = negotiate({"openstack-api-version": "placement 1.39"})


def _answer(database, model: ReadModel | None, query: str) -> dict:
    request = parse_request(Query(query), VERSION)
    return render_body(VERSION, request, engine.answer(database.db, model, request, Settings()))


def _cloud(client: PlacementClient, count: int = 3) -> list[str]:
    made = []
    for i in range(count):
        rp = client.create_provider(f"cn{i}")
        resp = client.put(f"/resource_providers/{rp['uuid']}/inventories", {
            "resource_provider_generation": rp["generation"],
            "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024}}})
        assert resp.status == 200, resp
        made.append(rp["uuid"])
    return made


def _model_answering(client: PlacementClient, database, query: str
                     ) -> tuple[list[str], ReadModel, dict]:
    """A small cloud and a read model that has answered ``query`` as the tables do."""
    providers = _cloud(client)
    model = ReadModel(database.db)
    expected = _answer(database, None, query)
    assert _answer(database, model, query) == expected
    return providers, model, expected


def _feed_from_now(database, feed: Feed | None = None) -> tuple[Feed, Position]:
    """A feed of the backend's change log (or ``feed``), positioned at what is committed now."""
    feed = feed or Feed(database.backend, retention=3600)
    with database.engine.connect() as conn:
        position = feed.start(conn)
        conn.rollback()
    return feed, position


def _vcpu_capacity(body: dict) -> dict[str, int]:
    return {rp: summary["resources"]["VCPU"]["capacity"]
            for rp, summary in body["provider_summaries"].items()}


def test_a_raw_sql_change_is_in_the_next_answer(client, database):
    providers = _cloud(client)
    model = ReadModel(database.db)
    query = "resources=VCPU:1"
    assert _answer(database, model, query) == _answer(database, None, query)
    inv = sa.table("inventories", sa.column("total"), sa.column("resource_class_id"))
    with database.engine.begin() as conn:
        conn.execute(inv.update().where(inv.c.resource_class_id == 0).values(total=9))
    assert set(_vcpu_capacity(_answer(database, model, query)).values()) == {9}
    # A rolled-back change leaves nothing behind.
    try:
        with database.engine.begin() as conn:
            conn.execute(inv.update().values(total=1))
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert set(_vcpu_capacity(_answer(database, model, query)).values()) == {9}
    # Deleting a provider behind the API's back.
    rp = sa.table("resource_providers", sa.column("id"), sa.column("uuid"),
                  sa.column("root_provider_id"))
    inventories = sa.table("inventories", sa.column("resource_provider_id"))
    with database.engine.begin() as conn:
        ident = conn.execute(sa.select(rp.c.id).where(rp.c.uuid == providers[0])).scalar_one()
        conn.execute(inventories.delete().where(inventories.c.resource_provider_id == ident))
        conn.execute(rp.update().where(rp.c.id == ident).values(root_provider_id=None))
        conn.execute(rp.delete().where(rp.c.id == ident))
    body = _answer(database, model, query)
    assert set(body["provider_summaries"]) == set(providers[1:])
    assert body == _answer(database, None, query)
    assert model.rebuilds == 1


def _model_lines(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "allotment.candidates.model" and r.getMessage().startswith(start)]


def test_a_worker_says_what_its_model_costs(client, database, caplog, monkeypatch):
    providers = _cloud(client)
    model = ReadModel(database.db)
    query = "resources=VCPU:1"
    caplog.set_level(logging.INFO, logger="allotment.candidates.model")
    _answer(database, model, query)
    (loaded,) = _model_lines(caplog, "Read model loaded")
    assert re.search(r"3 providers in \d+ ms \(\d+ ms of CPU\)", loaded), loaded
    if sys.platform == "linux":
        assert re.search(r"resident memory [+-]\d+ MiB$", loaded), loaded
    # Within the interval, nothing more.
    assert not _model_lines(caplog, "Read model upkeep")

    monkeypatch.setattr(read_model, "UPKEEP_REPORT_INTERVAL", 0.0)
    _answer(database, model, query)
    (upkeep,) = _model_lines(caplog, "Read model upkeep")
    assert re.search(r": 2 polls, 0 changes applied, 1 loads, 0 checks, \d+ ms of CPU "
                     r"\(\d+\.\d\d % of a core\); 3 providers held$", upkeep), upkeep
    # An interval that only polled says nothing.
    caplog.clear()
    _answer(database, model, query)
    assert not _model_lines(caplog, "Read model upkeep")

    resp = client.put(f"/resource_providers/{providers[0]}/inventories", {
        "resource_provider_generation": 1,
        "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}}})
    assert resp.status == 200, resp
    assert model.check()
    _answer(database, model, query)
    (upkeep,) = _model_lines(caplog, "Read model upkeep")
    # The check brought the model up to date: the changes are counted there.
    applied = re.search(r": 1 polls, (\d+) changes applied, 0 loads, 1 checks, ", upkeep)
    assert applied and int(applied.group(1)) >= 1, upkeep


def test_drift_is_logged_and_repaired(client, database, caplog):
    query = "resources=VCPU:1,MEMORY_MB:10"
    providers, model, expected = _model_answering(client, database, query)
    # Corrupt what the model holds (no change row says so).
    held = model._state
    assert held is not None
    held.providers[held.by_uuid[providers[1]]].inventories = {}
    model.check_interval = 0
    with caplog.at_level(logging.WARNING, logger="allotment.candidates.model"):
        # A request starts the check, in the background, after its answer.
        with model.current():
            pass
        model.wait_for_check(timeout=30)
        assert _answer(database, model, query) == expected
    assert model.drifts == 1
    assert "drifted from the database" in caplog.text
    caplog.clear()
    model.check_interval = 600
    with caplog.at_level(logging.WARNING, logger="allotment.candidates.model"):
        assert model.check() is True
        assert _answer(database, model, query) == expected
    assert model.drifts == 1 and "drifted" not in caplog.text


def test_requests_are_answered_while_the_check_loads(client, database, monkeypatch):
    from allotment.candidates import model as model_module

    query = "resources=VCPU:1"
    providers, model, _ = _model_answering(client, database, query)
    loading, release = threading.Event(), threading.Event()
    real_load = model_module.load

    def slow_load(conn):
        loading.set()
        assert release.wait(30)
        return real_load(conn)

    monkeypatch.setattr(model_module, "load", slow_load)
    model.check_interval = 0
    _answer(database, model, query)  # starts the check
    assert loading.wait(10)
    # The check is loading: requests are answered meanwhile, changes seen.
    client.delete(f"/resource_providers/{providers[0]}")
    later = _answer(database, model, query)
    assert set(later["provider_summaries"]) == set(providers[1:])
    release.set()
    model.wait_for_check(timeout=30)
    # A state loaded for one request goes through the patched ``load`` too.
    assert later == _answer(database, None, query)
    assert model.drifts == 0


def test_a_reader_that_slept_past_the_retention_reloads(client, database):
    _cloud(client)
    model = ReadModel(database.db, retention=60)
    query = "resources=VCPU:1"
    _answer(database, model, query)
    model._position.polled_at = time.monotonic() - 31
    client.create_provider("late")
    _answer(database, model, query)
    assert model.rebuilds == 2


def test_old_change_rows_are_trimmed(client, database):
    _cloud(client, 1)
    model = ReadModel(database.db, retention=60, trim_interval=0)
    with database.engine.begin() as conn:
        conn.execute(CHANGES.update().values(created_at=sa.func.current_timestamp()))
        conn.execute(CHANGES.insert().values(kind=1, ref=0, created_at=sa.literal(
            "2000-01-01 00:00:00").cast(sa.DateTime)))
        before = conn.execute(sa.select(sa.func.count()).select_from(CHANGES)).scalar_one()
    _answer(database, model, "resources=VCPU:1")
    with database.engine.connect() as conn:
        after = conn.execute(sa.select(sa.func.count()).select_from(CHANGES)).scalar_one()
    assert after == before - 1


def test_a_failed_trim_is_logged_and_the_answer_stands(client, database, monkeypatch, caplog):
    """The trim runs after a request's answer is made (a write, which a Galera
    node cut off from the cluster fails at COMMIT): it never becomes the error."""
    _cloud(client, 1)
    model = ReadModel(database.db, retention=60, trim_interval=0)

    def cut_off(conn: sa.Connection) -> int:
        raise sa.exc.OperationalError("DELETE FROM allotment_changes", {}, Exception(
            1180, 'Got error 6 "No such device or address" during COMMIT'))

    monkeypatch.setattr(model.feed, "trim", cut_off)
    with caplog.at_level(logging.WARNING, logger="allotment.candidates.model"):
        answer = _answer(database, model, "resources=VCPU:1")
    assert len(answer["allocation_requests"]) == 1
    assert "Change log not trimmed" in caplog.text
    assert "during COMMIT" in caplog.text


def test_the_reference_path_is_selectable(database):
    conf = make_conf(database.url, allotment__candidates_source="database")
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    _cloud(client, 2)
    reference = client.get("/allocation_candidates?resources=VCPU:1", version="1.39")
    conf = make_conf(database.url)
    assert conf.allotment.candidates_source == "model"
    modelled = PlacementClient(make_app(conf, db=database.db, prepare=False)).get(
        "/allocation_candidates?resources=VCPU:1", version="1.39")
    assert reference.status == modelled.status == 200
    assert reference.json() == modelled.json()


def test_mysql_gaps_in_flight_are_kept_and_rolled_back_ones_forgotten(database):
    """The commit-order gap on MySQL/MariaDB, step by step (see candidates.feed)."""
    if database.backend != "mysql":
        return
    feed, position = _feed_from_now(database)
    position.gaps = {}  # earlier tests' rolled-back ids are not the subject here
    late = database.engine.connect()
    try:
        late_txn = late.begin()
        late.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=101))   # id taken, in flight
        try:
            with database.engine.begin() as conn:
                conn.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=102))
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        with database.engine.begin() as conn:
            conn.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=103))  # committed first
        with database.db.snapshot() as conn:  # as the model polls
            changes, position = feed.poll(conn, position, database.db.read)
        assert changes == {Kind.PROVIDER: {103}}
        assert len(position.gaps) == 2
        for gap in position.gaps:
            position.gaps[gap] -= 5  # older than GAP_SETTLE: probed
        with database.db.snapshot() as conn:  # as the model polls
            changes, position = feed.poll(conn, position, database.db.read)
        assert changes == {} and len(position.gaps) == 1  # the rolled-back id is forgotten
        late_txn.commit()
        late.close()
        with database.db.snapshot() as conn:  # as the model polls
            changes, position = feed.poll(conn, position, database.db.read)
        assert changes == {Kind.PROVIDER: {101}} and not position.gaps
    finally:
        late.close()
    # On Galera a remote transaction in flight holds no local lock: gaps are
    # waited for GALERA_GAP_SETTLE seconds, then forgotten.
    feed.galera = True
    position.gaps = {position.high + 1000: time.monotonic() - GALERA_GAP_SETTLE - 1,
                     position.high + 1001: time.monotonic()}
    with database.engine.begin() as conn:
        _, position = feed.poll(conn, position)
    assert list(position.gaps) == [position.high + 1001]


def test_galera_a_provider_written_by_a_slow_transaction_is_seen_by_the_sweep(
        client, database):
    """On Galera a gap is forgotten after GALERA_GAP_SETTLE seconds; a write that
    stayed open longer (on another node) is found by the generation sweep."""
    if database.backend != "mysql":
        return
    slow, other = _cloud(client, count=2)
    feed = Feed(database.backend, retention=3600)
    feed.galera = True  # what ``start`` learns from ``wsrep_on`` on a Galera node
    feed, position = _feed_from_now(database, feed)
    assert position.generations is not None
    position.gaps = {}  # earlier tests' rolled-back ids are not the subject here
    with database.engine.connect() as conn:
        slow_id, other_id = (conn.execute(sa.text(
            "SELECT id FROM resource_providers WHERE uuid = :uuid"), {"uuid": u}).scalar_one()
            for u in (slow, other))
    late = database.engine.connect()
    try:
        late_txn = late.begin()
        # A write as a Placement API makes it: the inventory and the generation
        # in one transaction (the trigger takes a change id now).
        late.execute(sa.text("UPDATE inventories SET total = 9 WHERE resource_provider_id = "
                             ":id AND resource_class_id = 0"), {"id": slow_id})
        late.execute(sa.text("UPDATE resource_providers SET generation = generation + 1 "
                             "WHERE id = :id"), {"id": slow_id})
        with database.engine.begin() as conn:  # committed first, with a later id
            conn.execute(sa.text("UPDATE inventories SET total = 7 WHERE resource_provider_id "
                                 "= :id AND resource_class_id = 0"), {"id": other_id})
            conn.execute(sa.text("UPDATE resource_providers SET generation = generation + 1 "
                                 "WHERE id = :id"), {"id": other_id})
        with database.db.snapshot() as conn:
            changes, position = feed.poll(conn, position, database.db.read)
        assert changes == {Kind.INVENTORY: {other_id}} and position.gaps
        for gap in position.gaps:
            position.gaps[gap] -= GALERA_GAP_SETTLE + 1  # waited for long enough
        with database.db.snapshot() as conn:
            changes, position = feed.poll(conn, position, database.db.read)
        assert changes == {} and not position.gaps  # forgotten: in flight elsewhere
        late_txn.commit()
    finally:
        late.close()
    with database.db.snapshot() as conn:
        changes, position = feed.poll(conn, position, database.db.read)
    assert changes == {}  # the change's id was forgotten: only the sweep finds it
    position.swept_at -= GALERA_GAP_SETTLE  # the next sweep is due
    with database.db.snapshot() as conn:
        changes, position = feed.poll(conn, position, database.db.read)
    # ``other`` moved before the last sweep too: the sweep names both writes.
    assert changes == {Kind.PROVIDER: {slow_id, other_id}}
    with database.db.snapshot() as conn:
        changes, _ = feed.poll(conn, position, database.db.read)
    assert changes == {}  # and only once


def test_postgresql_transactions_in_flight_are_read_when_they_commit(database):
    if database.backend != "postgresql":
        return
    feed, position = _feed_from_now(database)
    late = database.engine.connect()
    late_txn = late.begin()
    late.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=201, xid=sa.text(
        "pg_current_xact_id()::text::bigint")))
    with database.engine.begin() as conn:
        conn.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=202, xid=sa.text(
            "pg_current_xact_id()::text::bigint")))
    with database.engine.begin() as conn:
        changes, position = feed.poll(conn, position)
    assert changes == {Kind.PROVIDER: {202}} and position.xids
    late_txn.commit()
    late.close()
    with database.engine.begin() as conn:
        changes, position = feed.poll(conn, position)
    assert changes == {Kind.PROVIDER: {201}}


def test_postgresql_a_transaction_above_the_snapshots_xmax_is_not_missed(database):
    """A running transaction whose xid is at or above a snapshot's xmax is not in
    its xip list: PostgreSQL leaves out every xid no completed one exceeds.

    Here the later transaction takes its change id first; the earlier one takes
    the next id and commits. A poll then sees the higher id, while the lower
    one's transaction is in flight yet absent from xip; the poll after its
    commit must still read it.
    """
    if database.backend != "postgresql":
        return
    feed = Feed("postgresql", retention=3600)
    # Another writer on the server that completes a higher xid in between moves
    # xmax past the late transaction, and the case does not arise: set it up again.
    for _ in range(20):
        if _poll_around_a_transaction_above_xmax(database, feed):
            return
    pytest.fail("no poll's xmax stayed at or below the late transaction's xid in 20 tries")


def _poll_around_a_transaction_above_xmax(database, feed: Feed) -> bool:
    """The sequence of the test above; False when the case did not arise."""
    xid_now = sa.text("pg_current_xact_id()::text::bigint")
    _, position = _feed_from_now(database, feed)
    early, late = database.engine.connect(), database.engine.connect()
    try:
        early_txn, late_txn = early.begin(), late.begin()
        early_xid = early.execute(sa.select(xid_now)).scalar_one()
        late_xid = late.execute(sa.select(xid_now)).scalar_one()
        assert late_xid > early_xid
        late.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=301, xid=xid_now))
        early.execute(CHANGES.insert().values(kind=Kind.PROVIDER, ref=302, xid=xid_now))
        early_txn.commit()
        with database.engine.begin() as conn:
            xmax = int(conn.execute(sa.text("SELECT pg_current_snapshot()::text")
                                    ).scalar_one().split(":")[1])
            changes, position = feed.poll(conn, position)
        assert changes == {Kind.PROVIDER: {302}}
        if late_xid < xmax or late_xid in position.xids:
            late_txn.rollback()
            return False
        late_txn.commit()
        with database.engine.begin() as conn:
            changes, position = feed.poll(conn, position)
        assert changes == {Kind.PROVIDER: {301}}
        return True
    finally:
        early.close()
        late.close()


def _name_and_link_committed_behind(database, provider_uuid: str) -> None:
    """Commits, from another connection, a new trait and a new resource class and
    gives both to the provider, as nova's compute adds a CUSTOM trait or class."""
    rp, rpt, inv = sa.table("resource_providers", sa.column("id"), sa.column("uuid")), \
        sa.table("resource_provider_traits", sa.column("resource_provider_id"),
                 sa.column("trait_id")), \
        sa.table("inventories", sa.column("resource_provider_id"),
                 sa.column("resource_class_id"), sa.column("total"), sa.column("reserved"),
                 sa.column("min_unit"), sa.column("max_unit"), sa.column("step_size"),
                 sa.column("allocation_ratio"))
    traits = sa.table("traits", sa.column("id"), sa.column("name"))
    classes = sa.table("resource_classes", sa.column("id"), sa.column("name"))
    with database.engine.begin() as conn:
        ident = conn.execute(sa.select(rp.c.id).where(rp.c.uuid == provider_uuid)).scalar_one()
        conn.execute(traits.insert().values(name="CUSTOM_BEHIND"))
        trait = conn.execute(sa.select(traits.c.id).where(
            traits.c.name == "CUSTOM_BEHIND")).scalar_one()
        conn.execute(rpt.insert().values(resource_provider_id=ident, trait_id=trait))
        conn.execute(classes.insert().values(id=10001, name="CUSTOM_BEHIND"))
        conn.execute(inv.insert().values(resource_provider_id=ident, resource_class_id=10001,
                                         total=1, reserved=0, min_unit=1, max_unit=1,
                                         step_size=1, allocation_ratio=1.0))


@pytest.mark.parametrize("moment", ["after the poll", "during a full load"])
def test_a_name_committed_while_the_model_reads_is_never_a_missing_name(
        client, database, monkeypatch, moment):
    """The model reads in one snapshot: a trait or class created and given to a
    provider between two of its statements is in all of them or in none."""
    from allotment.candidates import model as model_module

    if database.backend == "sqlite":
        pytest.skip("a SQLite read transaction is one snapshot by itself")
    query = "resources=VCPU:1"
    providers, model, _ = _model_answering(client, database, query)
    rp = client.get(f"/resource_providers/{providers[0]}", version="1.39").json()
    assert client.put(f"/resource_providers/{providers[0]}/traits", {
        "resource_provider_generation": rp["generation"],
        "traits": ["HW_CPU_X86_AVX2"]}, version="1.39").status == 200
    if moment == "after the poll":
        real_poll = model.feed.poll

        def poll_then_commit(conn, position, probing=None):
            found = real_poll(conn, position, probing)
            _name_and_link_committed_behind(database, providers[0])
            return found

        monkeypatch.setattr(model.feed, "poll", poll_then_commit)
    else:
        model._state = None  # the next request loads everything
        real_load_providers = model_module._load_providers

        def load_providers_then_commit(conn, state, ids):
            real_load_providers(conn, state, ids)
            _name_and_link_committed_behind(database, providers[0])

        monkeypatch.setattr(model_module, "_load_providers", load_providers_then_commit)
    during = _answer(database, model, query)
    assert during["provider_summaries"][providers[0]]["traits"] == ["HW_CPU_X86_AVX2"]
    monkeypatch.undo()
    assert _answer(database, model, query) == _answer(database, None, query)
    summary = _answer(database, model, query)["provider_summaries"][providers[0]]
    assert "CUSTOM_BEHIND" in summary["traits"] and "CUSTOM_BEHIND" in summary["resources"]


def test_a_snapshot_sees_one_state_and_its_connection_goes_back_read_committed(database):
    # REPEATABLE READ for the snapshot's transaction only: two statements in it
    # agree although a commit came between them, and the same pooled connection
    # then reads each commit as it comes (a claim's retry must see the latest).
    if database.backend == "sqlite":
        pytest.skip("SQLite's read transaction is one snapshot already")
    db = Database(create_engine(database.url, pool_size=1, max_overflow=0))
    count = sa.text("SELECT count(*) FROM traits WHERE name LIKE 'CUSTOM_SNAPSHOT_%'")

    def add(name: str) -> None:
        with database.engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO traits (name, created_at) VALUES (:n, :t)"),
                         {"n": name, "t": "2026-01-01 00:00:00"})

    try:
        with db.snapshot() as conn:
            before = conn.execute(count).scalar()
            add("CUSTOM_SNAPSHOT_1")
            assert conn.execute(count).scalar() == before
        with db.read() as conn:
            assert conn.execute(count).scalar() == before + 1
            add("CUSTOM_SNAPSHOT_2")
            assert conn.execute(count).scalar() == before + 2
    finally:
        db.engine.dispose()


def test_each_kind_of_transaction_sends_what_it_needs_on_postgresql(database):
    # A plain read sends no BEGIN and no COMMIT (its statements autocommit, each
    # its own snapshot as READ COMMITTED gives anyway); a write and a snapshot
    # are transactions at their level, and the connection keeps none open after.
    if database.backend != "postgresql":
        pytest.skip("autocommit reads are PostgreSQL's (psycopg's state tells)")
    from psycopg.pq import TransactionStatus

    db = Database(create_engine(database.url, pool_size=1, max_overflow=0))
    level = sa.text("SHOW transaction_isolation")

    def status(conn: sa.Connection) -> TransactionStatus:
        return conn.connection.dbapi_connection.info.transaction_status

    try:
        for _ in range(2):  # and again on the same pooled connection
            with db.read() as conn:
                assert conn.execute(level).scalar() == "read committed"
                assert status(conn) == TransactionStatus.IDLE
            with db.snapshot() as conn:
                assert conn.execute(level).scalar() == "repeatable read"
                assert status(conn) == TransactionStatus.INTRANS
            with db.write() as conn:
                assert conn.execute(level).scalar() == "read committed"
                assert status(conn) == TransactionStatus.INTRANS
            with db.engine.connect() as conn:  # anyone else's: a transaction, as before
                conn.execute(level)
                assert status(conn) == TransactionStatus.INTRANS
                conn.rollback()
                assert status(conn) == TransactionStatus.IDLE
    finally:
        db.engine.dispose()


def test_a_provider_deleted_and_made_again_under_its_uuid_is_found_by_it(client, database):
    """Both changes read in one poll: the new row keeps the uuid, whichever row the
    model reads first (the old one's id is gone, the new one's is another on
    PostgreSQL and MariaDB)."""
    providers, model, _ = _model_answering(client, database, "resources=VCPU:1")
    for uuid in (providers[0], providers[2]):
        assert client.delete(f"/resource_providers/{uuid}").status == 204
        again = client.create_provider(f"again-{uuid}", uuid=uuid)
        resp = client.put(f"/resource_providers/{uuid}/inventories", {
            "resource_provider_generation": again["generation"],
            "inventories": {"VCPU": {"total": 2}}})
        assert resp.status == 200, resp
        query = f"resources=VCPU:1&in_tree={uuid}"
        found = _answer(database, model, query)
        assert list(found["provider_summaries"]) == [uuid]
        assert found == _answer(database, None, query)
