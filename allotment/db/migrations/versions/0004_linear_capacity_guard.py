"""The capacity guard in time linear in the rows a transaction writes.

Migration 0002's guard did, per allocation row, a sum over every row of the
row's (provider, class) and (PostgreSQL) a rewrite of one JSON document
holding every (provider, class) the transaction had touched: a claim of
thousands of rows cost the square of that, while it held its inventories'
locks (``bench/guard.py`` times one POST /allocations of 5,000 consumers).
The rule is unchanged (0002's docstring); how it is computed changes:

PostgreSQL: statement-level triggers with transition tables. After each
INSERT statement the inserted rows are summed per (provider, class), those
inventory rows locked (in id order), and each (provider, class) checked once
with one sum of its usage, which now includes the statement's rows. With
only inserts in a statement, usage and the transaction's net change grow row
by row, so the state after the statement is the most restrictive one: a
statement passes exactly when each of its rows would have passed alone. The
net change per (provider, class) is still one transaction-local JSON setting,
now read and written once per statement. A writer sending one INSERT and one
DELETE per transaction (allotment does) pays for each row once; one sending a
statement per row (upstream Placement does) pays as under 0002.

MySQL/MariaDB have no statement-level triggers. The row trigger keeps the
usage it last computed in session variables, tagged with the (provider,
class) and the start time of the triggering statement (``NOW(6)``, constant
within a statement and its triggers): the next row of the same (provider,
class) in the same statement adds to it instead of summing again. Exact, as
the inventory row stays locked by us from the first row on, so nobody else
inserts there meanwhile; a refusal is still decided on a fresh sum. Rows of
one (provider, class) must be adjacent for this to help: allotment inserts
a claim's rows ordered by provider and class. The credit for deleted rows
is 0002's, unchanged.

SQLite has no guard (0002).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import importlib
from types import ModuleType

from alembic import op

from allotment.db import guard

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

GUARD_SQLSTATE = guard.SQLSTATE
GUARD_MYSQL_ERRNO = guard.MYSQL_ERRNO
GUARD_MESSAGE = guard.MESSAGE

_PG_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION allotment_guard_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes jsonb := allotment_guard_net();
    refused record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM inserted) THEN
        RETURN NULL;
    END IF;
    -- Lock the inventory rows first, in id order: the sums below are then
    -- read in new statements that see every commit made before each lock.
    PERFORM 1 FROM inventories inv
      WHERE (inv.resource_provider_id, inv.resource_class_id) IN
            (SELECT resource_provider_id, resource_class_id FROM inserted)
      ORDER BY inv.id FOR UPDATE;
    SELECT checked.rp, checked.rc, checked.amount, checked.used_now INTO refused
      FROM (SELECT added.rp, added.rc, added.amount,
                   COALESCE((changes ->> (added.rp || ':' || added.rc))::bigint, 0)
                       + added.amount AS net,
                   (inv.total - inv.reserved) * inv.allocation_ratio AS cap,
                   (SELECT COALESCE(SUM(a.used), 0) FROM allocations a
                     WHERE a.resource_provider_id = added.rp
                       AND a.resource_class_id = added.rc) AS used_now
              FROM (SELECT resource_provider_id AS rp, resource_class_id AS rc,
                           SUM(used) AS amount
                      FROM inserted GROUP BY resource_provider_id, resource_class_id) AS added
              JOIN inventories inv ON inv.resource_provider_id = added.rp
                                  AND inv.resource_class_id = added.rc) AS checked
     WHERE checked.net > 0 AND checked.used_now > checked.cap
     ORDER BY checked.rp, checked.rc
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '{GUARD_SQLSTATE}',
            MESSAGE = '{GUARD_MESSAGE}: provider ' || refused.rp || ' class ' || refused.rc
                      || ' used ' || (refused.used_now - refused.amount) || ' + '
                      || refused.amount || ' over capacity';
    END IF;
    PERFORM set_config('allotment_guard.net', (changes || (
        SELECT jsonb_object_agg(key, COALESCE((changes ->> key)::bigint, 0) + amount)
          FROM (SELECT resource_provider_id || ':' || resource_class_id AS key,
                       SUM(used) AS amount
                  FROM inserted GROUP BY resource_provider_id, resource_class_id) AS added
    ))::text, true);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION allotment_guard_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changes jsonb := allotment_guard_net();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM deleted) THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('allotment_guard.net', (changes || (
        SELECT jsonb_object_agg(key, COALESCE((changes ->> key)::bigint, 0) - amount)
          FROM (SELECT resource_provider_id || ':' || resource_class_id AS key,
                       SUM(used) AS amount
                  FROM deleted GROUP BY resource_provider_id, resource_class_id) AS removed
    ))::text, true);
    RETURN NULL;
END $$;
"""

_PG_TRIGGERS = [
    "CREATE TRIGGER allotment_guard_insert AFTER INSERT ON allocations "
    "REFERENCING NEW TABLE AS inserted "
    "FOR EACH STATEMENT EXECUTE FUNCTION allotment_guard_inserted()",
    "CREATE TRIGGER allotment_guard_delete AFTER DELETE ON allocations "
    "REFERENCING OLD TABLE AS deleted "
    "FOR EACH STATEMENT EXECUTE FUNCTION allotment_guard_deleted()",
]

_PG_DROP_0002 = [
    "DROP TRIGGER IF EXISTS allotment_guard_insert ON allocations",
    "DROP TRIGGER IF EXISTS allotment_guard_delete ON allocations",
    "DROP FUNCTION IF EXISTS allotment_guard_allocation_insert()",
    "DROP FUNCTION IF EXISTS allotment_guard_allocation_delete()",
]

_PG_DROP_0004 = [
    "DROP TRIGGER IF EXISTS allotment_guard_insert ON allocations",
    "DROP TRIGGER IF EXISTS allotment_guard_delete ON allocations",
    "DROP FUNCTION IF EXISTS allotment_guard_inserted()",
    "DROP FUNCTION IF EXISTS allotment_guard_deleted()",
]


def _guard_0002() -> ModuleType:
    return importlib.import_module(
        "allotment.db.migrations.versions.0002_allocation_capacity_guard")


def _mysql_insert() -> str:
    """0002's insert trigger with the statement's running usage kept between rows."""
    old = _guard_0002()._MYSQL_INSERT
    before = """        SELECT COALESCE(SUM(used), 0) INTO used_now FROM allocations
         WHERE resource_provider_id = NEW.resource_provider_id
           AND resource_class_id = NEW.resource_class_id
           LOCK IN SHARE MODE;
        IF used_now + NEW.used > cap"""
    after = """        -- The usage this statement's previous row of this (provider,
        -- class) left, else (or before refusing) a fresh sum.
        IF @allotment_guard_statement = NOW(6) AND @allotment_guard_key = k THEN
            SET used_now = @allotment_guard_used;
        ELSE
            SET used_now = NULL;
        END IF;
        IF used_now IS NULL OR used_now + NEW.used > cap THEN
            SELECT COALESCE(SUM(used), 0) INTO used_now FROM allocations
             WHERE resource_provider_id = NEW.resource_provider_id
               AND resource_class_id = NEW.resource_class_id
               LOCK IN SHARE MODE;
        END IF;
        SET @allotment_guard_statement = NOW(6), @allotment_guard_key = k,
            @allotment_guard_used = used_now + NEW.used;
        IF used_now + NEW.used > cap"""
    assert before in old, "migration 0002's insert trigger changed"
    return old.replace(before, after)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for statement in _PG_DROP_0002:
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(_PG_FUNCTIONS)
        for statement in _PG_TRIGGERS:
            bind.exec_driver_sql(statement)
    elif bind.dialect.name == "mysql":
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_insert")
        bind.exec_driver_sql(_mysql_insert())


def downgrade() -> None:
    bind = op.get_bind()
    old = _guard_0002()
    if bind.dialect.name == "postgresql":
        for statement in _PG_DROP_0004:
            bind.exec_driver_sql(statement)
        bind.exec_driver_sql(old._PG_FUNCTIONS)
        for statement in old._PG_TRIGGERS:
            bind.exec_driver_sql(statement)
    elif bind.dialect.name == "mysql":
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_insert")
        bind.exec_driver_sql(old._MYSQL_INSERT)
