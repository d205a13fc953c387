"""The schema our migrations build is upstream Placement's, on every backend.

The snapshots in tests/data/upstream_schema_<backend>.json were reflected
(with ``schema_summary`` below) from databases created by upstream
openstack-placement 16.0.0's own ``placement-manage db sync``.

The first migration is upstream's schema frozen; tables.py is the schema the
code uses. Tests here keep the two in agreement and keep the first migration
from depending on tables.py.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from allotment.db import migrate
from allotment.db import tables as t
from allotment.db.engine import create_engine
from tests import conftest

DATA = os.path.join(os.path.dirname(__file__), "data")
STAMP_TABLES = {"alembic_version", "allotment_alembic_version"}
# Ours: the change log the read model polls (migration 0003), the history and
# SQLite's write context (0005).
OWN_TABLES = STAMP_TABLES | {"allotment_changes", "allotment_allocation_history",
                             "allotment_inventory_history", "allotment_write_context"}
# Upstream 16.0.0's Alembic head, which the snapshots were made at.
UPSTREAM_16_HEAD = "a082b8bb98d0"


def schema_summary(engine: sa.Engine) -> dict:
    insp = sa.inspect(engine)
    out = {}
    for table in sorted(insp.get_table_names()):
        if table in OWN_TABLES:
            continue
        columns = {}
        for column in insp.get_columns(table):
            entry = {"type": type(column["type"]).__name__.upper(),
                     "nullable": column["nullable"]}
            length = getattr(column["type"], "length", None)
            if length:
                entry["length"] = length
            columns[column["name"]] = entry
        out[table] = {
            "columns": columns,
            "primary_key": sorted(insp.get_pk_constraint(table)["constrained_columns"]),
            "unique": sorted(sorted(u["column_names"])
                             for u in insp.get_unique_constraints(table)),
            "indexes": sorted(sorted(i["column_names"]) for i in insp.get_indexes(table)
                              if not i.get("unique")),
            "foreign_keys": sorted([fk["constrained_columns"], fk["referred_table"],
                                    fk["referred_columns"]]
                                   for fk in insp.get_foreign_keys(table)),
        }
    return out


def schema_detail(engine: sa.Engine) -> dict:
    """``schema_summary`` plus every table's constraint and index names and the stamps."""
    insp = sa.inspect(engine)
    names = {table: {"indexes": sorted(i["name"] for i in insp.get_indexes(table)),
                     "unique": sorted(u["name"] or "" for u in insp.get_unique_constraints(table)),
                     "foreign_keys": sorted(fk["name"] or ""
                                            for fk in insp.get_foreign_keys(table))}
             for table in insp.get_table_names()}
    with engine.connect() as conn:
        stamps = {table: sorted(conn.execute(sa.text(f"SELECT version_num FROM {table}"))
                                .scalars())
                  for table in STAMP_TABLES if table in names}
    return {"summary": schema_summary(engine), "names": names, "stamps": stamps}


def upstream_snapshot(backend: str) -> dict:
    with open(os.path.join(DATA, f"upstream_schema_{backend}.json")) as f:
        return json.load(f)


def upstream_stamp(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@contextlib.contextmanager
def fresh_engine(backend: str, tmp_path) -> Iterator[sa.Engine]:
    """An engine on a new, empty database of ``backend``, dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/fresh.sqlite"
    else:
        url = conftest._create_server_database(backend)
    engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
        if backend != "sqlite":
            conftest._drop_server_database(backend, url)


def test_schema_matches_upstream(database):
    assert schema_summary(database.engine) == upstream_snapshot(database.backend)


def test_database_is_stamped_for_upstream(database):
    with database.engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    assert version == t.UPSTREAM_ALEMBIC_HEAD


def test_migrations_agree_with_tables_py(database):
    """What the migrations build is what tables.py describes, so they cannot drift apart."""
    insp = sa.inspect(database.engine)
    assert set(insp.get_table_names()) - OWN_TABLES == set(t.metadata.tables)
    for table in t.metadata.sorted_tables:
        _assert_columns_agree(insp, table)
        assert (sorted(insp.get_pk_constraint(table.name)["constrained_columns"])
                == sorted(column.name for column in table.primary_key)), table.name
        assert ({(u["name"], tuple(u["column_names"]))
                 for u in insp.get_unique_constraints(table.name)}
                == {(u.name, tuple(c.name for c in u.columns))
                    for u in table.constraints if isinstance(u, sa.UniqueConstraint)}), table.name
        assert ({(i["name"], tuple(i["column_names"]))
                 for i in insp.get_indexes(table.name) if not i.get("unique")}
                == {(i.name, tuple(c.name for c in i.columns)) for i in table.indexes}), table.name
        assert ({(tuple(fk["constrained_columns"]), fk["referred_table"],
                  tuple(fk["referred_columns"])) for fk in insp.get_foreign_keys(table.name)}
                == {(tuple(fk.column_keys), fk.referred_table.name,
                     tuple(e.column.name for e in fk.elements))
                    for fk in table.foreign_key_constraints}), table.name


def test_migrations_do_not_import_tables_py():
    """A migration is frozen: built from tables.py, it would follow later changes to it."""
    versions = os.path.join(migrate.MIGRATIONS_DIR, "versions")
    for name in sorted(os.listdir(versions)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(versions, name)) as f:
            tree = ast.parse(f.read(), name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for module in modules:
                assert module != "allotment.db.tables", f"{name} imports {module}"
                assert not (module.startswith(".") and "tables" in module.split(".")), (
                    f"{name} imports {module}")


@pytest.mark.parametrize("backend", conftest._backends())
def test_first_migration_ignores_later_changes_to_tables_py(backend, tmp_path, monkeypatch):
    """0001 builds upstream's 16.0.0 schema whatever tables.py has become since.

    Were it built from the live metadata, a column that tables.py gains along with
    a later migration would be created by 0001 on a fresh database, and the later
    migration would then fail adding it again.
    """
    grown = sa.MetaData()
    for table in t.metadata.sorted_tables:
        table.to_metadata(grown)
    grown.tables["resource_providers"].append_column(sa.Column("added_later", sa.Integer))
    sa.Table("added_later", grown, sa.Column("id", sa.Integer, primary_key=True))
    monkeypatch.setattr(t, "metadata", grown)
    monkeypatch.setattr(t, "UPSTREAM_ALEMBIC_HEAD", "changed-later")
    with fresh_engine(backend, tmp_path) as engine:
        migrate.upgrade(engine, "0001")
        assert schema_summary(engine) == upstream_snapshot(backend)
        assert upstream_stamp(engine) == UPSTREAM_16_HEAD


def test_upgrade_again_changes_nothing(database):
    def state() -> tuple[dict, int, int]:
        with database.engine.connect() as conn:
            classes = conn.execute(sa.select(sa.func.count()).select_from(
                t.resource_classes)).scalar_one()
            traits = conn.execute(sa.select(sa.func.count()).select_from(t.traits)).scalar_one()
        return schema_detail(database.engine), classes, traits

    before = state()
    migrate.upgrade(database.engine)
    assert state() == before
    assert migrate.current(database.engine) == migrate.head()


@pytest.mark.parametrize("backend", conftest._backends())
def test_existing_upstream_database_is_left_alone(backend, tmp_path):
    """A database upstream Placement made: every table there, and upstream's stamp only."""
    with fresh_engine(backend, tmp_path) as engine:
        migrate.upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE allotment_alembic_version"))
            conn.execute(sa.text("UPDATE alembic_version SET version_num = 'upstreams-own'"))
            conn.execute(t.traits.insert().values(name="CUSTOM_OPERATORS_OWN"))
        before = schema_detail(engine)

        migrate.upgrade(engine, "0001")

        after = schema_detail(engine)
        assert after["stamps"].pop("allotment_alembic_version") == ["0001"]
        del after["names"]["allotment_alembic_version"]
        assert after == before
        assert upstream_stamp(engine) == "upstreams-own"
        with engine.connect() as conn:
            assert conn.execute(sa.select(t.traits.c.name)).scalars().all() == [
                "CUSTOM_OPERATORS_OWN"]


def _assert_columns_agree(insp: sa.Inspector, table: sa.Table) -> None:
    """The reflected columns of ``table`` are tables.py's: names, types, lengths, nulls."""
    reflected = {column["name"]: column for column in insp.get_columns(table.name)}
    assert set(reflected) == set(table.columns.keys()), table.name
    for column in table.columns:
        found = reflected[column.name]
        where = f"{table.name}.{column.name}"
        assert found["type"]._type_affinity is column.type._type_affinity, where
        assert getattr(found["type"], "length", None) == getattr(column.type, "length",
                                                                 None), where
        assert found["nullable"] == column.nullable, where


def test_history_tables_agree_with_tables_py(database):
    """The history's tables (migration 0005) are what tables.py's ``own_metadata`` reads."""
    insp = sa.inspect(database.engine)
    for table in t.own_metadata.sorted_tables:
        _assert_columns_agree(insp, table)
