"""No plan that depends on statistics: each request's statements stay index-driven
on a large database the planner knows nothing about.

A database freshly loaded (a bulk registration, a switch from upstream, a
migration) has no statistics until an ANALYZE: PostgreSQL with autovacuum
off never gathers them, and InnoDB keeps the empty tables' until its
background recalculation. A statement whose good plan depends on them turns
into a scan of every consumer or allocation per call (GET
/resource_providers/{uuid}/allocations: 372 ms instead of 0.34 ms at 242,487
consumers, issue 40), and at nova's polling rate the service goes down.

Each case runs the ledger function a request runs, on a cloud loaded by bulk
SQL (``tests/support/bulk_cloud``: 10,000 providers, 100,000 consumers,
300,000 allocations, never analyzed), records the statements it sent with
their real parameters, and asks the database to EXPLAIN each: no sequential
(PostgreSQL) or full (MariaDB: ``ALL``, or ``index`` with a condition to
filter) scan of a large table, and no hash or merge join (PostgreSQL), may
appear. The same check runs on the requests themselves, through the app:
what a handler asks of the ledger (a default filled in, a microversion's
grouping) is part of the statement. SQLite has no such planner trouble (its
planner assumes indexes help and has no statistics unless ANALYZE is run)
and is not loaded here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa

from allotment.candidates import model
from allotment.candidates.feed import Feed, Kind, Position
from allotment.db.engine import Database, create_engine
from allotment.ledger import (
    aggregates,
    allocations,
    history,
    inventories,
    overview,
    providers,
    traits,
    usages,
)
from allotment.ledger.filters import AggregateFilter, TraitFilter
from allotment.wsgi import make_app
from tests.conftest import (
    _backends,
    _create_server_database,
    _drop_server_database,
    make_conf,
)
from tests.support import bulk_cloud
from tests.support.bulk_cloud import SHARING_TRAIT, uuid_of
from tests.support.client import PlacementClient

SERVERS = [backend for backend in _backends() if backend in ("postgresql", "mysql")]

# Every table the load fills in bulk: none may be read whole for one request.
LARGE = {"resource_providers", "inventories", "allocations", "consumers",
         "resource_provider_traits", "resource_provider_aggregates", "placement_aggregates",
         "allotment_allocation_history", "allotment_inventory_history", "allotment_changes"}
# Loading the cloud must stay this quick (seconds of a loaded 2-core machine).
LOAD_BOUND = 120.0

PROVIDER = 1234
RP_UUID = uuid_of("provider", PROVIDER)
CONSUMER = uuid_of("consumer", 4321)
PROJECT, USER = uuid_of("project", 7), uuid_of("user", 7)


@pytest.fixture(scope="module", params=SERVERS)
def fresh(request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    """A database of the bulk cloud, never analyzed."""
    url = _create_server_database(request.param)
    engine = create_engine(url)
    try:
        started = time.monotonic()
        bulk_cloud.load(engine)
        assert time.monotonic() - started < LOAD_BOUND
        yield engine
    finally:
        engine.dispose()
        _drop_server_database(request.param, url)


@pytest.fixture(scope="module", params=SERVERS)
def analyzed(request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    """A database of the bulk cloud, analyzed: statistics can mislead too.

    With them PostgreSQL estimates a condition on an id looked up inside the
    statement at a quarter of the table, and read a provider list's count
    (``LIMIT 256``) by a sequential scan, betting on meeting 256 rows soon;
    for a trait that no provider has, that was the whole table, on every
    call (the cloud day at 20,000 hosts went down after ANALYZE)."""
    url = _create_server_database(request.param)
    engine = create_engine(url)
    try:
        bulk_cloud.load(engine)
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.exec_driver_sql("ANALYZE")
            else:
                conn.exec_driver_sql("ANALYZE TABLE " + ", ".join(sorted(LARGE)))
        yield engine
    finally:
        engine.dispose()
        _drop_server_database(request.param, url)


def _claim(conn: sa.Connection) -> None:
    allocations.write(conn, [allocations.Claim(
        consumer_uuid="99999999-0000-4000-8000-000000000001",
        allocations={RP_UUID: {"VCPU": 1, "MEMORY_MB": 512}}, project_id=PROJECT,
        user_id=USER, consumer_type="INSTANCE")])


def _replace(conn: sa.Connection) -> None:
    allocations.write(conn, [allocations.Claim(
        consumer_uuid=CONSUMER, allocations={uuid_of("provider", 99): {"VCPU": 1}},
        project_id=PROJECT, user_id=USER, generation=1, check_generation=True,
        consumer_type="INSTANCE")])


def _bulk_claim(conn: sa.Connection) -> None:
    """One request claiming for 40 new consumers, each on a provider of its own."""
    allocations.write(conn, [allocations.Claim(
        consumer_uuid=f"99999999-0000-4000-8000-1{n:011d}",
        allocations={uuid_of("provider", 2000 + n): {"VCPU": 1}}, project_id=PROJECT,
        user_id=USER, consumer_type="INSTANCE") for n in range(40)])


def _bulk_move(conn: sa.Connection) -> None:
    """One request moving 40 loaded consumers, each to a provider of its own:
    the providers they held are locked by id beside the 40 named."""
    allocations.write(conn, [allocations.Claim(
        consumer_uuid=uuid_of("consumer", 5000 + n),
        allocations={uuid_of("provider", 3000 + n): {"VCPU": 1}}, project_id=PROJECT,
        user_id=USER, consumer_type="INSTANCE") for n in range(40)])


def _model_upkeep(conn: sa.Connection) -> None:
    """The read model re-reading what a poll of the change log named."""
    state = model.State()
    state.apply(conn, {Kind.PROVIDER: {PROVIDER + 2}, Kind.ALLOCATION: {PROVIDER, PROVIDER + 1},
                       Kind.INVENTORY: {PROVIDER + 3}, Kind.PROVIDER_TRAIT: {PROVIDER},
                       Kind.PROVIDER_AGGREGATE: {PROVIDER}})


def _poll(conn: sa.Connection) -> None:
    """A candidates request's poll of the change log, a transaction still pending."""
    feed = Feed(conn.dialect.name, 3600.0)
    feed.poll(conn, Position(high=99_990, xids={5000: time.monotonic()}, xmax=200_000))


_WINDOW = history.Window(limit=50)
_DECADE = 10 * 365 * 86400.0
_SHARING = providers.ProviderQuery(
    member_of=AggregateFilter(required=[{uuid_of("aggregate", a) for a in range(1, 5)}]),
    required=TraitFilter(required=[{SHARING_TRAIT}]))
# Every filter of a provider list at once but resources: the shapes with
# forbidden traits and aggregates, several groups of each.
_FORBIDDING = providers.ProviderQuery(
    member_of=AggregateFilter(required=[{uuid_of("aggregate", a) for a in range(1, 5)},
                                        {uuid_of("aggregate", 3)}],
                              forbidden={uuid_of("aggregate", 7)}),
    required=TraitFilter(required=[{SHARING_TRAIT}, {"COMPUTE_NET_VIF_MODEL_VIRTIO",
                                                     "HW_CPU_X86_AVX2"}],
                         forbidden={"HW_CPU_X86_SSE2", "HW_CPU_X86_SSE"}))

CASES: dict[str, Callable[[sa.Connection], object]] = {
    # What every nova-compute polls.
    "provider": lambda c: providers.require(c, RP_UUID),
    "provider allocations": lambda c: allocations.of_provider(c, RP_UUID),
    "provider traits": lambda c: traits.traits_of_provider(c, RP_UUID),
    "provider aggregates": lambda c: aggregates.aggregates_of_provider(c, RP_UUID),
    "sharing providers": lambda c: providers.list_providers(c, _SHARING),
    "sharing providers, some forbidden": lambda c: providers.list_providers(c, _FORBIDDING),
    # The other reads of one provider or consumer.
    "consumer allocations": lambda c: allocations.for_consumer(c, CONSUMER),
    "provider usages": lambda c: usages.for_provider(c, PROVIDER),
    "provider inventories": lambda c: inventories.get_inventories(c, PROVIDER),
    "provider tree": lambda c: providers.list_providers(
        c, providers.ProviderQuery(in_tree=RP_UUID)),
    "dashboard consumer": lambda c: overview.consumer(c, CONSUMER),
    # Usages of a project (GET /usages), as every microversion asks for them.
    "project usages": lambda c: usages.for_project(c, PROJECT, None),
    "project and user usages": lambda c: usages.for_project(c, PROJECT, USER),
    "project usages by type": lambda c: usages.for_project_by_type(c, PROJECT, None, "all"),
    # 1.38+ without consumer_type: one group per type, the default answer.
    "project usages per type": lambda c: usages.for_project_by_type(c, PROJECT, None, None),
    "project and user usages per type": lambda c: usages.for_project_by_type(
        c, PROJECT, USER, None),
    "project usages of no type": lambda c: usages.for_project_by_type(
        c, PROJECT, None, "unknown"),
    "project usages of one type": lambda c: usages.for_project_by_type(
        c, PROJECT, USER, "INSTANCE"),
    # Claims (tests/test_claim_statements.py's) and a release.
    "claim": _claim,
    "replacing a consumer's claim": _replace,
    "release": lambda c: allocations.delete_for_consumer(c, CONSUMER),
    "claim on 40 providers": _bulk_claim,
    "moving 40 consumers to 40 other providers": _bulk_move,
    # The read model's upkeep: a request's poll of the change log, what it
    # re-reads, and where a full load starts.
    "change log poll": _poll,
    "read model upkeep": _model_upkeep,
    "read model start": lambda c: Feed(c.dialect.name, 3600.0).start(c),
    # The history's reads (GET /history/*, explain's evidence).
    "history of a consumer": lambda c: history.allocation_changes(
        c, _WINDOW, consumer_uuid=CONSUMER),
    "history of a provider": lambda c: history.allocation_changes(
        c, _WINDOW, provider_uuid=RP_UUID),
    "history of a project": lambda c: history.allocation_changes(c, _WINDOW, project_id=PROJECT),
    "history, all": lambda c: history.allocation_changes(c, _WINDOW),
    "inventory history of a provider": lambda c: history.inventory_changes(
        c, _WINDOW, provider_uuid=RP_UUID),
    "latest of a provider": lambda c: history.latest_for_provider(c, RP_UUID, 5),
    # The change log trim a request runs after answering, once a minute: in
    # the steady state few rows are old enough (a retention longer than the
    # load's age here; with an hour's, every loaded row goes and reading them
    # all is right).
    "change log trim": lambda c: Feed(c.dialect.name, _DECADE).trim(c),
}

def _statements(engine: sa.Engine, run: Callable[[sa.Connection], object]
                ) -> list[tuple[str, Any]]:
    """The statements ``run`` sends (rolled back), with their parameters."""
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if not executemany and statement.lstrip().upper().startswith(
                ("SELECT", "DELETE", "UPDATE", "WITH")):
            sent.append((statement, parameters))

    with engine.connect() as conn:
        sa.event.listen(conn, "before_cursor_execute", record)
        with conn.begin() as transaction:
            run(conn)
            transaction.rollback()
        sa.event.remove(conn, "before_cursor_execute", record)
    return sent


def _postgresql_scans(plan: dict[str, Any], found: list[str]) -> None:
    executed = "Actual Loops" in plan
    if executed and plan["Actual Loops"] == 0:
        return  # a branch of the statement this execution did not take
    node, table = plan.get("Node Type"), plan.get("Relation Name")
    # Without statistics a hash or merge join was the planner guessing; run,
    # with statistics, it is a choice over small tables (users, projects),
    # as a large one would show a scan of its own.
    if node in ("Hash Join", "Merge Join") and not executed:
        found.append(node)
    if table in LARGE and node == "Seq Scan":
        found.append(f"Seq Scan on {table}")
    if table in LARGE and node in ("Index Scan", "Index Only Scan") \
            and "Index Cond" not in plan and "Filter" in plan:
        found.append(f"{node} on {table} filtering the whole index")
    for child in plan.get("Plans", []):
        _postgresql_scans(child, found)


def _mysql_scans(node: Any, found: list[str]) -> None:
    if isinstance(node, dict):
        table, access = node.get("table_name"), node.get("access_type")
        if table in LARGE and (access == "ALL" or (
                access == "index" and "attached_condition" in node)):
            found.append(f"{access} on {table}")
        for value in node.values():
            _mysql_scans(value, found)
    elif isinstance(node, list):
        for value in node:
            _mysql_scans(value, found)


def scans(engine: sa.Engine, statement: str, parameters: Any,
          executed: bool = False) -> list[str]:
    """What in the plan of ``statement`` reads a large table whole. With
    ``executed`` (PostgreSQL), a read is run (EXPLAIN ANALYZE, rolled back) and
    only the parts it ran are looked at."""
    found: list[str] = []
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            run = executed and statement.lstrip().upper().startswith(("SELECT", "WITH"))
            plan = conn.exec_driver_sql(
                ("EXPLAIN (ANALYZE, FORMAT JSON) " if run else "EXPLAIN (FORMAT JSON) ")
                + statement, parameters).scalar_one()
            _postgresql_scans(plan[0]["Plan"], found)
        else:
            plan = conn.exec_driver_sql("EXPLAIN FORMAT=JSON " + statement,
                                        parameters).scalar_one()
            _mysql_scans(json.loads(plan), found)
        conn.rollback()
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_no_statement_scans_without_statistics(fresh: sa.Engine, case: str) -> None:
    sent = _statements(fresh, CASES[case])
    assert sent, "the case sent no statement to explain"
    bad = {" ".join(statement.split())[:200]: found for statement, parameters in sent
           if (found := scans(fresh, statement, parameters))}
    assert not bad, bad


@pytest.mark.parametrize("case", list(CASES))
def test_no_statement_scans_with_statistics(analyzed: sa.Engine, case: str) -> None:
    sent = _statements(analyzed, CASES[case])
    assert sent, "the case sent no statement to explain"
    bad = {" ".join(statement.split())[:200]: found for statement, parameters in sent
           if (found := scans(analyzed, statement, parameters, executed=True))}
    assert not bad, bad


# The requests nova and operators send, at microversion 1.39 (GET /usages
# then groups by consumer type). The writes use a consumer of their own
# and leave the tables as they found them (the history and change log grow).
_OWN = "99999999-0000-4000-8000-000000000002"
_CANDIDATES = "/allocation_candidates?resources=VCPU:1&limit=1"
_AGGREGATES = ",".join(uuid_of("aggregate", a) for a in range(1, 5))
_OWN_CLAIM = {"allocations": {RP_UUID: {"resources": {"VCPU": 1}}}, "project_id": PROJECT,
              "user_id": USER, "consumer_type": "INSTANCE"}
REQUESTS: dict[str, tuple[str, str, Any]] = {
    "GET provider": ("GET", f"/resource_providers/{RP_UUID}", None),
    "GET provider allocations": ("GET", f"/resource_providers/{RP_UUID}/allocations", None),
    "GET consumer allocations": ("GET", f"/allocations/{CONSUMER}", None),
    "GET provider aggregates": ("GET", f"/resource_providers/{RP_UUID}/aggregates", None),
    "GET provider traits": ("GET", f"/resource_providers/{RP_UUID}/traits", None),
    "GET provider inventories": ("GET", f"/resource_providers/{RP_UUID}/inventories", None),
    "GET sharing providers": ("GET", f"/resource_providers?member_of=in:{_AGGREGATES}"
                              f"&required={SHARING_TRAIT}", None),
    "GET provider tree": ("GET", f"/resource_providers?in_tree={RP_UUID}", None),
    "GET provider usages": ("GET", f"/resource_providers/{RP_UUID}/usages", None),
    "GET project usages": ("GET", f"/usages?project_id={PROJECT}", None),
    "GET project and user usages": ("GET", f"/usages?project_id={PROJECT}&user_id={USER}", None),
    "GET project usages, all types": ("GET", f"/usages?project_id={PROJECT}&consumer_type=all",
                                      None),
    "GET project usages of a type": ("GET", f"/usages?project_id={PROJECT}"
                                     "&consumer_type=INSTANCE", None),
    "PUT a new consumer's claim": ("PUT", f"/allocations/{_OWN}",
                                   {**_OWN_CLAIM, "consumer_generation": None}),
    "POST a replacing claim": ("POST", "/allocations", {_OWN: {
        **_OWN_CLAIM, "allocations": {uuid_of("provider", 99): {"resources": {"VCPU": 1}}},
        "consumer_generation": 1}}),
    "DELETE the claim": ("DELETE", f"/allocations/{_OWN}", None),
    # The read model catching up with the writes above (its full load, which
    # reads everything as it should, ran before the first case).
    "GET allocation candidates": ("GET", _CANDIDATES, None),
    "GET history of a consumer": ("GET", f"/history/allocations?consumer_uuid={CONSUMER}", None),
    "GET history of a provider": ("GET", "/history/allocations?resource_provider_uuid="
                                  f"{RP_UUID}", None),
    "GET history of a project": ("GET", f"/history/allocations?project_id={PROJECT}", None),
    "GET history": ("GET", "/history/allocations", None),
    "GET inventory history": ("GET", "/history/inventories?resource_provider_uuid="
                              f"{RP_UUID}", None),
}


# PostgreSQL: what the triggers run inside a write (the capacity guard, the
# history and the change log of migrations 0002-0006) never reaches the
# driver; auto_explain reports the plan of every statement as it ran, nested
# ones included, to the session that ran it.
_AUTO_EXPLAIN = ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                 "SET auto_explain.log_nested_statements = on",
                 "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice")


@dataclass
class Served:
    """The app over the fresh database, on an engine of its own, and (PostgreSQL)
    the plans auto_explain reported since ``plans`` was last cleared."""

    engine: sa.Engine
    client: PlacementClient
    plans: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def served(fresh: sa.Engine) -> Iterator[Served]:
    yield from _served(fresh, executed=False)


@pytest.fixture(scope="module")
def served_analyzed(analyzed: sa.Engine) -> Iterator[Served]:
    yield from _served(analyzed, executed=True)


def _served(database: sa.Engine, executed: bool) -> Iterator[Served]:
    """The read model is loaded before the first case: its full load reads
    everything, as it should. Its periodic full comparison never comes due,
    and the change log trim keeps the loaded rows (see "change log trim").
    ``executed``: auto_explain reports the plans as run (``log_analyze``),
    so that only the branches taken are judged, as ``scans`` does."""
    url = database.url.render_as_string(hide_password=False)
    engine = create_engine(url)
    plans: list[dict[str, Any]] = []

    def reported(notice: Any) -> None:
        text = notice.message_primary or ""
        if text.startswith("duration:") and "{" in text:
            plans.append(json.loads(text[text.index("{"):]))

    if engine.dialect.name == "postgresql":
        @sa.event.listens_for(engine, "connect")
        def explain_everything(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.add_notice_handler(reported)
            with dbapi_conn.cursor() as cursor:
                for statement in _AUTO_EXPLAIN:
                    cursor.execute(statement)
                if executed:
                    cursor.execute("SET auto_explain.log_analyze = on")
            dbapi_conn.commit()

    conf = make_conf(url, allotment__change_log_retention=int(_DECADE),
                     allotment__read_model_check_interval=10**9)
    client = PlacementClient(make_app(conf, db=Database(engine), prepare=False),
                             version="1.39")
    try:
        assert client.get(_CANDIDATES).status == 200
        yield Served(engine, client, plans)
    finally:
        engine.dispose()


@pytest.mark.parametrize("name", list(REQUESTS))
def test_no_request_scans_without_statistics(served: Served, name: str) -> None:
    _no_request_scans(served, name, executed=False)


@pytest.mark.parametrize("name", list(REQUESTS))
def test_no_request_scans_with_statistics(served_analyzed: Served, name: str) -> None:
    _no_request_scans(served_analyzed, name, executed=True)


def _no_request_scans(served: Served, name: str, executed: bool) -> None:
    method, path, body = REQUESTS[name]
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if not executemany and statement.lstrip().upper().startswith(
                ("SELECT", "DELETE", "UPDATE", "WITH")):
            sent.append((statement, parameters))

    served.plans.clear()
    sa.event.listen(served.engine, "before_cursor_execute", record)
    try:
        resp = served.client.request(method, path, body)
    finally:
        sa.event.remove(served.engine, "before_cursor_execute", record)
    assert resp.status < 300, resp
    assert sent, "the request sent no statement to explain"
    bad = {" ".join(statement.split())[:200]: found for statement, parameters in sent
           if (found := scans(served.engine, statement, parameters, executed=executed))}
    for ran in served.plans:
        found = []
        _postgresql_scans(ran["Plan"], found)
        if found:
            bad[" ".join(ran["Query Text"].split())[:200]] = found
    if served.engine.dialect.name == "postgresql":
        assert served.plans, "auto_explain reported no plan"
    assert not bad, bad


# A plan made while the tables were small must not outlive them. psycopg
# prepares a statement on the server from its fifth execution, PL/pgSQL
# keeps its statements' plans for the session, and PostgreSQL reuses a
# generic plan as long as nothing invalidates it: without ANALYZE nothing
# does. A server started on a new database and then given its cloud (nova's
# hosts registering, each with its instances) read every consumer in each
# claim's history trigger: 8,095 sequential scans of consumers, 659 million
# rows, while loading 8,000 hosts. The cases above are asked once, on a
# database already large; here a connection claims while the tables are
# small, they grow, and its next claim must read rows in proportion to
# what it writes.
GROWN = 200_000


@pytest.mark.skipif("postgresql" not in SERVERS, reason="PostgreSQL's plan cache")
def test_plans_made_on_small_tables_do_not_outlive_them() -> None:
    from allotment.db import migrate, standard_names
    from allotment.db.writer import WriteContext

    url = _create_server_database("postgresql")
    engine = create_engine(url, pool_size=1, max_overflow=0)
    context = WriteContext("postgresql")
    provider = uuid_of("provider", 1)

    def claim_within(conn: sa.Connection, n: int) -> None:
        context.begin(conn)
        allocations.write(conn, [allocations.Claim(
            consumer_uuid=uuid_of("consumer", GROWN + 23 * n + k),
            allocations={provider: {"VCPU": 1, "MEMORY_MB": 1}}, project_id=PROJECT,
            user_id=USER, consumer_type="INSTANCE") for k in range(23)])

    def claim(conn: sa.Connection, n: int) -> None:
        with conn.begin():
            claim_within(conn, n)

    try:
        migrate.upgrade(engine)
        standard_names.sync(engine)
        with engine.connect() as conn:
            conn.exec_driver_sql(
                "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id) "
                f"SELECT n, 'rp-' || n, 'rp-' || n, 0, n FROM generate_series(2, 50) n;"
                "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id) "
                f"VALUES (1, '{provider}', 'host', 0, 1);"
                "INSERT INTO inventories (resource_provider_id, resource_class_id, total, "
                "reserved, min_unit, max_unit, step_size, allocation_ratio) "
                "SELECT p, c, 1000000000, 0, 1, 1000000000, 1, 1.0 "
                "FROM generate_series(1, 50) p, generate_series(0, 1) c")
            conn.commit()
            for n in range(12):  # prepared from the 5th, generic plans from the 11th
                claim(conn, n)
            conn.exec_driver_sql(
                "INSERT INTO consumers (uuid, project_id, user_id, generation) "
                f"SELECT 'c-' || n, 1, 1, 0 FROM generate_series(1, {GROWN}) n;"
                "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, "
                "used) SELECT 1 + mod(n, 50), 'c-' || n, mod(n, 2), 1 "
                f"FROM generate_series(1, {GROWN}) n")
            conn.commit()
            # The session's counts not yet flushed to the shared statistics,
            # which is done only between transactions: read inside the
            # claim's own transaction, before and after, their difference
            # is the claim's.
            read = ("SELECT relname, seq_tup_read + COALESCE(idx_tup_fetch, 0) "
                    "FROM pg_stat_xact_user_tables")
            with conn.begin():
                before = dict(conn.exec_driver_sql(read).all())
                claim_within(conn, 12)
                after = dict(conn.exec_driver_sql(read).all())
        # The claim writes 23 consumers and 46 rows; the provider's usage is
        # summed by index twice (the claim's check and the capacity guard's)
        # over its 4,552 allocations: a scan of the table is 200,000.
        grown = {"consumers": 100, "allocations": 20_000}
        read_rows = {table: after[table] - before.get(table, 0) for table in grown}
        assert all(read_rows[table] < bound for table, bound in grown.items()), read_rows
    finally:
        engine.dispose()
        _drop_server_database("postgresql", url)


@pytest.mark.skipif("postgresql" not in SERVERS, reason="PostgreSQL's trigger functions")
def test_migration_0007_sets_and_resets_the_trigger_functions_plans() -> None:
    """Every allotment function plans index-first and keeps its plans (0007);
    down to 0006 they plan as the session says, up again restores it."""
    from alembic import command

    from allotment.db import migrate
    from allotment.db.engine import write_transaction

    def settings(engine: sa.Engine) -> dict[str, list[str] | None]:
        with engine.connect() as conn:
            return dict(conn.exec_driver_sql(
                "SELECT proname, proconfig FROM pg_proc "
                "WHERE pronamespace = current_schema()::regnamespace "
                "AND starts_with(proname, 'allotment_')").all())

    url = _create_server_database("postgresql")
    engine = create_engine(url)
    try:
        migrate.upgrade(engine)
        at_head = settings(engine)
        # The capacity guard, the change log and the history, each set.
        assert {"allotment_guard_inserted", "allotment_log_allocations_rows",
                "allotment_history_inventories"} <= set(at_head)
        assert all(sorted(config or []) == ["enable_seqscan=off", "plan_cache_mode=auto"]
                   for config in at_head.values()), at_head
        with write_transaction(engine) as conn:
            command.downgrade(migrate._config(conn), "0006")
        assert set(settings(engine).values()) == {None}
        migrate.upgrade(engine)
        assert settings(engine) == at_head
    finally:
        engine.dispose()
        _drop_server_database("postgresql", url)
