"""The capacity guard: the database refuses an allocation row over capacity.

Why: upstream Placement 16.0.0 can commit claims that take a provider over
``(total - reserved) * allocation_ratio`` when claims race (its retry after a
generation conflict runs inside the same transaction, where its own first
attempt's rows count as "previous usage"; see doc/source/differences.md).
While upstream and allotment serve one database, only the database itself can
refuse those rows for every writer. Upstream's tables stay exactly as they
are: this adds triggers (and, on PostgreSQL, their functions) and nothing else.

The rule, for each inserted allocation row of (provider, class):

* no inventory record of the class: let it be (the writers refuse that);
* usage after the row <= capacity: accept;
* otherwise accept only when the transaction so far has not added to that
  (provider, class) -- it deleted at least as much as it inserted, counting
  this row: upstream's "no worse than before" rule (a consumer on a provider
  already over capacity may be given back, kept or swapped within);
* else raise ``guard.SQLSTATE`` (PostgreSQL) / SQLSTATE 45000 with
  ``guard.MYSQL_ERRNO`` (MySQL), which allotment maps to its usual 409.

Concurrency: the trigger first locks the inventory row (``FOR UPDATE``), so
inserts into one (provider, class) queue; the usage is then read with a read
that sees every commit before the lock was granted (a new statement snapshot
under READ COMMITTED on PostgreSQL; a locking read on MySQL, whatever the
isolation level, as upstream runs REPEATABLE READ there).

What the transaction deleted: on PostgreSQL a transaction-local setting
(``set_config(..., true)``) holding the net change per (provider, class) as
JSON, exact. MySQL has no
transaction-scoped variable, so a session variable holds, per (provider,
class), the net change and one consumer whose rows were deleted (its id and
generation); the credit counts only while that consumer still has the same
id and generation and no rows there -- after a commit its generation has
moved (or it is gone), after a rollback its rows are back.

SQLite gets no guard: writers there hold the database's single write lock,
so a capacity check and its insert cannot interleave with another writer.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

from allotment.db import guard

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# The refusal's codes and words are allotment.db.guard's, which
# allotment.db.errors reads them back with (then mapped to InvalidAllocation).
GUARD_SQLSTATE = guard.SQLSTATE
GUARD_MYSQL_ERRNO = guard.MYSQL_ERRNO
GUARD_MESSAGE = guard.MESSAGE

# What this transaction inserted minus what it deleted, per "<provider>:<class>",
# is one transaction-local setting holding a JSON object: one setting name per
# connection, however many providers it ever touches.
_PG_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION allotment_guard_net() RETURNS jsonb
LANGUAGE sql AS $$
    SELECT COALESCE(NULLIF(current_setting('allotment_guard.net', true), ''), '{{}}')::jsonb
$$;

CREATE OR REPLACE FUNCTION allotment_guard_allocation_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    key text := NEW.resource_provider_id || ':' || NEW.resource_class_id;
    changes jsonb := allotment_guard_net();
    net bigint := COALESCE((changes ->> key)::bigint, 0);
    inv record;
    used_now bigint;
BEGIN
    SELECT total, reserved, allocation_ratio INTO inv FROM inventories
     WHERE resource_provider_id = NEW.resource_provider_id
       AND resource_class_id = NEW.resource_class_id
       FOR UPDATE;
    IF FOUND THEN
        -- A new statement: under READ COMMITTED it sees every commit made
        -- before the lock above was granted.
        SELECT COALESCE(SUM(used), 0) INTO used_now FROM allocations
         WHERE resource_provider_id = NEW.resource_provider_id
           AND resource_class_id = NEW.resource_class_id;
        IF used_now + NEW.used > (inv.total - inv.reserved) * inv.allocation_ratio
           AND net + NEW.used > 0 THEN
            RAISE EXCEPTION USING ERRCODE = '{GUARD_SQLSTATE}',
                MESSAGE = '{GUARD_MESSAGE}: provider ' || NEW.resource_provider_id
                          || ' class ' || NEW.resource_class_id || ' used ' || used_now
                          || ' + ' || NEW.used || ' over capacity';
        END IF;
    END IF;
    PERFORM set_config('allotment_guard.net',
                       jsonb_set(changes, ARRAY[key], to_jsonb(net + NEW.used))::text, true);
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION allotment_guard_allocation_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    key text := OLD.resource_provider_id || ':' || OLD.resource_class_id;
    changes jsonb := allotment_guard_net();
BEGIN
    PERFORM set_config('allotment_guard.net',
                       jsonb_set(changes, ARRAY[key],
                                 to_jsonb(COALESCE((changes ->> key)::bigint, 0) - OLD.used)
                                 )::text, true);
    RETURN OLD;
END $$;
"""

_PG_TRIGGERS = [
    "CREATE TRIGGER allotment_guard_insert BEFORE INSERT ON allocations "
    "FOR EACH ROW EXECUTE FUNCTION allotment_guard_allocation_insert()",
    "CREATE TRIGGER allotment_guard_delete AFTER DELETE ON allocations "
    "FOR EACH ROW EXECUTE FUNCTION allotment_guard_allocation_delete()",
]

# `uuid` is quoted because since MariaDB 10.7 UUID is also a type name. (The
# 1064 "Trigger ... has an error in its body" seen on Galera was not that: see
# allotment.ledger.retry.)
# The session variable @allotment_guard: a JSON object, key "<provider>:<class>",
# value {"net": n, "c": consumer uuid, "id": consumer id, "g": its generation}.
_MYSQL_VALID = """
    SET entry = JSON_EXTRACT(COALESCE(@allotment_guard, '{{}}'), CONCAT('$."', k, '"'));
    SET valid = 0;
    IF entry IS NOT NULL THEN
        SELECT COUNT(*) INTO valid FROM consumers
         WHERE `uuid` = JSON_UNQUOTE(JSON_EXTRACT(entry, '$.c'))
           AND id = JSON_UNQUOTE(JSON_EXTRACT(entry, '$.id'))
           AND generation = JSON_UNQUOTE(JSON_EXTRACT(entry, '$.g'))
           AND NOT EXISTS (SELECT 1 FROM allocations
                            WHERE consumer_id = JSON_UNQUOTE(JSON_EXTRACT(entry, '$.c'))
                              AND resource_provider_id = {rp} AND resource_class_id = {rc});
    END IF;
"""

_MYSQL_INSERT = f"""
CREATE TRIGGER allotment_guard_insert BEFORE INSERT ON allocations FOR EACH ROW
BEGIN
    DECLARE k VARCHAR(64) DEFAULT CONCAT(NEW.resource_provider_id, ':', NEW.resource_class_id);
    DECLARE cap DOUBLE;
    DECLARE used_now BIGINT;
    DECLARE entry TEXT;
    DECLARE valid INT DEFAULT 0;
    DECLARE msg VARCHAR(255);
    -- MAX(): one row even without an inventory record (then NULL).
    SELECT MAX((total - reserved) * allocation_ratio) INTO cap FROM inventories
     WHERE resource_provider_id = NEW.resource_provider_id
       AND resource_class_id = NEW.resource_class_id
       FOR UPDATE;
    {_MYSQL_VALID.format(rp="NEW.resource_provider_id", rc="NEW.resource_class_id")}
    IF cap IS NOT NULL THEN
        -- A locking read: the latest committed rows, even under REPEATABLE READ.
        SELECT COALESCE(SUM(used), 0) INTO used_now FROM allocations
         WHERE resource_provider_id = NEW.resource_provider_id
           AND resource_class_id = NEW.resource_class_id
           LOCK IN SHARE MODE;
        IF used_now + NEW.used > cap
           AND (valid = 0 OR JSON_EXTRACT(entry, '$.net') + NEW.used > 0) THEN
            SET msg = CONCAT('{GUARD_MESSAGE}: provider ', NEW.resource_provider_id,
                             ' class ', NEW.resource_class_id, ' used ', used_now,
                             ' + ', NEW.used, ' over capacity');
            SIGNAL SQLSTATE '45000' SET MYSQL_ERRNO = {GUARD_MYSQL_ERRNO}, MESSAGE_TEXT = msg;
        END IF;
    END IF;
    IF valid > 0 THEN
        SET @allotment_guard = JSON_SET(@allotment_guard, CONCAT('$."', k, '".net'),
                                        JSON_EXTRACT(entry, '$.net') + NEW.used);
    END IF;
END
"""

_MYSQL_DELETE = f"""
CREATE TRIGGER allotment_guard_delete AFTER DELETE ON allocations FOR EACH ROW
BEGIN
    DECLARE k VARCHAR(64) DEFAULT CONCAT(OLD.resource_provider_id, ':', OLD.resource_class_id);
    DECLARE entry TEXT;
    DECLARE valid INT DEFAULT 0;
    DECLARE cid INT;
    DECLARE cgen INT;
    {_MYSQL_VALID.format(rp="OLD.resource_provider_id", rc="OLD.resource_class_id")}
    IF valid > 0 THEN
        SET @allotment_guard = JSON_SET(@allotment_guard, CONCAT('$."', k, '".net'),
                                        JSON_EXTRACT(entry, '$.net') - OLD.used);
    ELSE
        SELECT MAX(id), MAX(generation) INTO cid, cgen FROM consumers
         WHERE `uuid` = OLD.consumer_id;
        IF @allotment_guard IS NULL OR JSON_LENGTH(@allotment_guard) > 1000 THEN
            SET @allotment_guard = '{{}}';
        END IF;
        SET @allotment_guard = JSON_SET(@allotment_guard, CONCAT('$."', k, '"'),
            JSON_OBJECT('net', -OLD.used, 'c', OLD.consumer_id, 'id', cid, 'g', cgen));
    END IF;
END
"""


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql(_PG_FUNCTIONS)
        for statement in _PG_TRIGGERS:
            bind.exec_driver_sql(statement)
    elif bind.dialect.name == "mysql":
        bind.exec_driver_sql(_MYSQL_INSERT)
        bind.exec_driver_sql(_MYSQL_DELETE)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_insert ON allocations")
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_delete ON allocations")
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS allotment_guard_allocation_insert()")
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS allotment_guard_allocation_delete()")
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS allotment_guard_net()")
    elif bind.dialect.name == "mysql":
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_insert")
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_guard_delete")
