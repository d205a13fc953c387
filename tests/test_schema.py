"""The schema our migrations build is upstream Placement's, on every backend.

The snapshots in tests/data/upstream_schema_<backend>.json were reflected
(with ``schema_summary`` below) from databases created by upstream
openstack-placement 16.0.0's own ``placement-manage db sync``.
"""

from __future__ import annotations

import json
import os

import sqlalchemy as sa

from allotment.db import tables as t

DATA = os.path.join(os.path.dirname(__file__), "data")
OWN_TABLES = {"alembic_version", "allotment_alembic_version"}


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


def test_schema_matches_upstream(database):
    with open(os.path.join(DATA, f"upstream_schema_{database.backend}.json")) as f:
        expected = json.load(f)
    assert schema_summary(database.engine) == expected


def test_database_is_stamped_for_upstream(database):
    with database.engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    assert version == t.UPSTREAM_ALEMBIC_HEAD
