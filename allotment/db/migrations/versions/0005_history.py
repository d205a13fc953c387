"""History: every change to allocations and inventories, recorded by the database.

Two tables of our own, filled by triggers so that every writer is recorded:
allotment, upstream Placement serving the same database during a switch, an
operator's SQL. Each entry is one (consumer, provider, class) -- or one
(provider, class) inventory -- as one transaction changed it, with the amounts
before and after, the names as they were then (provider uuid, class name,
consumer type, project and user: they survive the rows they came from), and
who wrote it (``allotment.db.writer``: the request ids and ``allotment``, or
``outside``).

A transaction's changes to the same key are merged into one entry (a claim
deletes and re-inserts a consumer's rows): by the transaction id on
PostgreSQL, by the token allotment sets per transaction on MySQL/MariaDB and
SQLite. ``used_before`` is what the consumer held there before the
transaction's first change to the key (what that change deleted), and
``used_after`` moves with every later change (less what is deleted, plus
what is inserted): a writer that inserts, deletes and inserts again within
one transaction (upstream retrying a claim) shows what it left. For
inventories the first "before" and the last "after" are kept; NULL "before"
is a creation, NULL "after" a deletion.

PostgreSQL records allocations once per statement (transition tables, as the
change log does); inventories, MySQL and SQLite once per row. Times are UTC.
Rows are trimmed by age (``[allotment] history_retention``), in the
background.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from allotment.db import writer as w

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ALLOCATIONS = "allotment_allocation_history"
INVENTORIES = "allotment_inventory_history"

_ALLOCATION_COLUMNS = (
    "created_at, txn, consumer_uuid, consumer_type, project_id, user_id, "
    "resource_provider_id, resource_provider_uuid, resource_class_id, resource_class, "
    "used_before, used_after, request_id, global_request_id, writer")
_INVENTORY_COLUMNS = (
    "created_at, txn, resource_provider_id, resource_provider_uuid, "
    "resource_provider_generation, resource_class_id, resource_class, "
    "total_before, total_after, reserved_before, reserved_after, "
    "allocation_ratio_before, allocation_ratio_after, min_unit, max_unit, step_size, "
    "request_id, global_request_id, writer")
_INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                     "allocation_ratio")


def _create_tables(dialect: str) -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer, "sqlite")
    when = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")

    def common_head() -> list[sa.Column]:
        return [sa.Column("id", big_id, primary_key=True, autoincrement=True),
                sa.Column("created_at", when, nullable=False),
                sa.Column("txn", sa.BigInteger, nullable=True)]

    def common_tail() -> list[sa.Column]:
        return [sa.Column("request_id", sa.String(64), nullable=True),
                sa.Column("global_request_id", sa.String(64), nullable=True),
                sa.Column("writer", sa.String(16), nullable=False)]

    op.create_table(
        ALLOCATIONS, *common_head(),
        sa.Column("consumer_uuid", sa.String(36), nullable=False),
        sa.Column("consumer_type", sa.Unicode(255), nullable=True),
        sa.Column("project_id", sa.String(255), nullable=True),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("resource_provider_id", sa.Integer, nullable=False),
        sa.Column("resource_provider_uuid", sa.String(36), nullable=True),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        sa.Column("resource_class", sa.Unicode(255), nullable=True),
        sa.Column("used_before", sa.BigInteger, nullable=False),
        sa.Column("used_after", sa.BigInteger, nullable=False),
        *common_tail(),
        sqlite_autoincrement=True, mysql_engine="InnoDB")
    op.create_index(f"{ALLOCATIONS}_consumer_idx", ALLOCATIONS, ["consumer_uuid", "id"])
    op.create_index(f"{ALLOCATIONS}_provider_idx", ALLOCATIONS,
                    ["resource_provider_uuid", "id"])
    op.create_index(f"{ALLOCATIONS}_project_idx", ALLOCATIONS, ["project_id", "id"])
    op.create_index(f"{ALLOCATIONS}_created_at_idx", ALLOCATIONS, ["created_at"])

    op.create_table(
        INVENTORIES, *common_head(),
        sa.Column("resource_provider_id", sa.Integer, nullable=False),
        sa.Column("resource_provider_uuid", sa.String(36), nullable=True),
        sa.Column("resource_provider_generation", sa.Integer, nullable=True),
        sa.Column("resource_class_id", sa.Integer, nullable=False),
        sa.Column("resource_class", sa.Unicode(255), nullable=True),
        sa.Column("total_before", sa.Integer, nullable=True),
        sa.Column("total_after", sa.Integer, nullable=True),
        sa.Column("reserved_before", sa.Integer, nullable=True),
        sa.Column("reserved_after", sa.Integer, nullable=True),
        sa.Column("allocation_ratio_before", sa.Float, nullable=True),
        sa.Column("allocation_ratio_after", sa.Float, nullable=True),
        sa.Column("min_unit", sa.Integer, nullable=True),
        sa.Column("max_unit", sa.Integer, nullable=True),
        sa.Column("step_size", sa.Integer, nullable=True),
        *common_tail(),
        sqlite_autoincrement=True, mysql_engine="InnoDB")
    op.create_index(f"{INVENTORIES}_provider_idx", INVENTORIES,
                    ["resource_provider_uuid", "id"])
    op.create_index(f"{INVENTORIES}_created_at_idx", INVENTORIES, ["created_at"])

    if dialect == "sqlite":
        op.create_table(
            w.SQLITE_CONTEXT,
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("txn", sa.BigInteger, nullable=False),
            sa.Column("request_id", sa.String(64), nullable=True),
            sa.Column("global_request_id", sa.String(64), nullable=True))


# --- PostgreSQL ---------------------------------------------------------------

_PG_CONTEXT = f"""
    v_txn bigint := pg_current_xact_id()::text::bigint;
    v_writer text := COALESCE(NULLIF(current_setting('{w.PG_WRITER}', true), ''),
                              '{w.WRITER_OUTSIDE}');
    v_request text := NULLIF(current_setting('{w.PG_REQUEST_ID}', true), '');
    v_global text := NULLIF(current_setting('{w.PG_GLOBAL_REQUEST_ID}', true), '');
"""

# What one allocations statement changed, per (consumer, provider, class).
_PG_CHANGED = {
    "insert": "SELECT consumer_id, resource_provider_id, resource_class_id, "
              "0::bigint AS b, SUM(used)::bigint AS a FROM new_rows GROUP BY 1, 2, 3",
    "delete": "SELECT consumer_id, resource_provider_id, resource_class_id, "
              "SUM(used)::bigint AS b, 0::bigint AS a FROM old_rows GROUP BY 1, 2, 3",
    "update": "SELECT consumer_id, resource_provider_id, resource_class_id, "
              "SUM(b)::bigint AS b, SUM(a)::bigint AS a FROM ("
              "SELECT consumer_id, resource_provider_id, resource_class_id, used AS b, 0 AS a "
              "FROM old_rows UNION ALL "
              "SELECT consumer_id, resource_provider_id, resource_class_id, 0, used "
              "FROM new_rows) both_sides GROUP BY 1, 2, 3 HAVING SUM(b) <> SUM(a)",
}

# Scalar subqueries, not joins: one index probe per key, however large the
# looked-up tables grow (the planner knows little of a transition table). A
# transaction's first allocations statement has nothing to merge with: a
# transaction-local setting says whether this one wrote entries already.
_PG_NEW_ENTRIES = f"""
    INSERT INTO {ALLOCATIONS} ({_ALLOCATION_COLUMNS})
    SELECT now() AT TIME ZONE 'UTC', v_txn, changed.consumer_id, owner.consumer_type,
           owner.project_id, owner.user_id, changed.resource_provider_id,
           (SELECT uuid FROM resource_providers WHERE id = changed.resource_provider_id),
           changed.resource_class_id,
           (SELECT name FROM resource_classes WHERE id = changed.resource_class_id),
           changed.b, changed.a, v_request, v_global, v_writer
      FROM changed
      LEFT JOIN LATERAL (
           SELECT ct.name AS consumer_type, p.external_id AS project_id,
                  u.external_id AS user_id
             FROM consumers c
             JOIN projects p ON p.id = c.project_id
             JOIN users u ON u.id = c.user_id
             LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id
            WHERE c.uuid = changed.consumer_id) owner ON true"""

_PG_ALLOCATIONS_FUNCTION = f"""
CREATE FUNCTION allotment_history_allocations_{{op}}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE{_PG_CONTEXT}BEGIN
    IF NOT EXISTS (SELECT 1 FROM {{rows}}) THEN
        RETURN NULL;  -- a statement that changed nothing (a new consumer's delete)
    END IF;
    IF current_setting('{w.PG_HISTORY_SEEN}', true) IS DISTINCT FROM v_txn::text THEN
        PERFORM set_config('{w.PG_HISTORY_SEEN}', v_txn::text, true);
        WITH changed AS ({{changed}}){_PG_NEW_ENTRIES};
        RETURN NULL;
    END IF;
    WITH changed AS ({{changed}}),
    merged AS (
        UPDATE {ALLOCATIONS} h
           SET used_after = h.used_after - changed.b + changed.a
          FROM changed
         WHERE h.consumer_uuid = changed.consumer_id AND h.txn = v_txn
           AND h.resource_provider_id = changed.resource_provider_id
           AND h.resource_class_id = changed.resource_class_id
        RETURNING h.consumer_uuid, h.resource_provider_id, h.resource_class_id){_PG_NEW_ENTRIES}
     WHERE NOT EXISTS (SELECT 1 FROM merged m
                        WHERE m.consumer_uuid = changed.consumer_id
                          AND m.resource_provider_id = changed.resource_provider_id
                          AND m.resource_class_id = changed.resource_class_id);
    RETURN NULL;
END $$;
"""

_PG_ALLOCATIONS_TRIGGER = {
    "insert": "AFTER INSERT ON allocations REFERENCING NEW TABLE AS new_rows",
    "delete": "AFTER DELETE ON allocations REFERENCING OLD TABLE AS old_rows",
    "update": "AFTER UPDATE ON allocations REFERENCING OLD TABLE AS old_rows "
              "NEW TABLE AS new_rows",
}

# A transaction's later change to an inventory it changed already: the last
# "after" (PostgreSQL and MySQL, whose triggers found the entry's id).
_INVENTORY_MERGE = f"""
        UPDATE {INVENTORIES}
           SET total_after = a_total, reserved_after = a_reserved,
               allocation_ratio_after = a_ratio, min_unit = v_min, max_unit = v_max,
               step_size = v_step
         WHERE id = {{hit}};"""

_UNCHANGED = " AND ".join(f"NEW.{f} = OLD.{f}" for f in _INVENTORY_FIELDS)

_PG_INVENTORIES_FUNCTION = f"""
CREATE FUNCTION allotment_history_inventories() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE{_PG_CONTEXT}
    v_rp integer;
    v_rc integer;
    v_uuid varchar(36);
    v_generation integer;
    v_class varchar(255);
    v_hit bigint;
    b_total integer; b_reserved integer; b_ratio double precision;
    a_total integer; a_reserved integer; a_ratio double precision;
    v_min integer; v_max integer; v_step integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.resource_provider_id = OLD.resource_provider_id
           AND NEW.resource_class_id = OLD.resource_class_id AND {_UNCHANGED} THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        v_rp := OLD.resource_provider_id; v_rc := OLD.resource_class_id;
        b_total := OLD.total; b_reserved := OLD.reserved; b_ratio := OLD.allocation_ratio;
        v_min := OLD.min_unit; v_max := OLD.max_unit; v_step := OLD.step_size;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        v_rp := NEW.resource_provider_id; v_rc := NEW.resource_class_id;
        a_total := NEW.total; a_reserved := NEW.reserved; a_ratio := NEW.allocation_ratio;
        v_min := NEW.min_unit; v_max := NEW.max_unit; v_step := NEW.step_size;
    END IF;
    SELECT uuid, generation INTO v_uuid, v_generation FROM resource_providers WHERE id = v_rp;
    SELECT name INTO v_class FROM resource_classes WHERE id = v_rc;
    SELECT id INTO v_hit FROM {INVENTORIES}
     WHERE resource_provider_uuid = v_uuid AND txn = v_txn AND resource_class_id = v_rc
     ORDER BY id DESC LIMIT 1;
    IF v_hit IS NULL THEN
        INSERT INTO {INVENTORIES} ({_INVENTORY_COLUMNS})
        VALUES (now() AT TIME ZONE 'UTC', v_txn, v_rp, v_uuid, v_generation, v_rc, v_class,
                b_total, a_total, b_reserved, a_reserved, b_ratio, a_ratio,
                v_min, v_max, v_step, v_request, v_global, v_writer);
    ELSE{_INVENTORY_MERGE.format(hit="v_hit")}
    END IF;
    RETURN NULL;
END $$;
"""


# A claim that changes an existing consumer's project, user or type updates
# the consumer after inserting its rows: its entries of this transaction take
# the new owner.
_OWNER_CHANGED = ("NEW.project_id <> OLD.project_id OR NEW.user_id <> OLD.user_id OR "
                  "{not_same_type}")
_OWNER_SET = f"""
    UPDATE {ALLOCATIONS}
       SET project_id = (SELECT external_id FROM projects WHERE id = NEW.project_id),
           user_id = (SELECT external_id FROM users WHERE id = NEW.user_id),
           consumer_type = (SELECT name FROM consumer_types WHERE id = NEW.consumer_type_id)
     WHERE consumer_uuid = NEW.{{uuid}} AND txn = {{txn}};"""

_PG_OWNER_FUNCTION = f"""
CREATE FUNCTION allotment_history_consumer_owner() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN{_OWNER_SET.format(uuid="uuid", txn="pg_current_xact_id()::text::bigint")}
    RETURN NULL;
END $$;
"""


def _postgresql(bind: sa.Connection) -> None:
    for name, changed in _PG_CHANGED.items():
        rows = "new_rows" if name == "insert" else "old_rows"
        bind.exec_driver_sql(_PG_ALLOCATIONS_FUNCTION.format(op=name, changed=changed,
                                                             rows=rows))
        bind.exec_driver_sql(
            f"CREATE TRIGGER allotment_history_{name} {_PG_ALLOCATIONS_TRIGGER[name]} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION allotment_history_allocations_{name}()")
    bind.exec_driver_sql(_PG_INVENTORIES_FUNCTION)
    bind.exec_driver_sql(
        "CREATE TRIGGER allotment_history AFTER INSERT OR UPDATE OR DELETE ON inventories "
        "FOR EACH ROW EXECUTE FUNCTION allotment_history_inventories()")
    bind.exec_driver_sql(_PG_OWNER_FUNCTION)
    changed = _OWNER_CHANGED.format(
        not_same_type="NEW.consumer_type_id IS DISTINCT FROM OLD.consumer_type_id")
    bind.exec_driver_sql(
        "CREATE TRIGGER allotment_history_owner AFTER UPDATE ON consumers FOR EACH ROW "
        f"WHEN ({changed}) EXECUTE FUNCTION allotment_history_consumer_owner()")


# --- MySQL / MariaDB ----------------------------------------------------------

_MYSQL_WRITER_EXPR = f"IF({w.MYSQL_WRITER} IS NULL, '{w.WRITER_OUTSIDE}', {w.MYSQL_WRITER})"


def _mysql_allocation_change(row: str, before: str, after: str) -> str:
    """Record one allocation row's change (``row``: NEW or OLD)."""
    consumer = f"{row}.consumer_id"
    # Only a transaction of allotment's that wrote entries already (its token
    # in @allotment_history_seen) has any to merge with.
    return f"""
    IF {w.MYSQL_TXN} IS NOT NULL AND {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN} THEN
        SET hit = (SELECT id FROM {ALLOCATIONS}
                    WHERE consumer_uuid = {consumer} AND txn = {w.MYSQL_TXN}
                      AND resource_provider_id = {row}.resource_provider_id
                      AND resource_class_id = {row}.resource_class_id
                    ORDER BY id DESC LIMIT 1);
    ELSE
        SET hit = NULL;
    END IF;
    IF hit IS NULL THEN
        SET v_type = (SELECT ct.name FROM consumers c
                        JOIN consumer_types ct ON ct.id = c.consumer_type_id
                       WHERE c.uuid = {consumer});
        SET v_project = (SELECT p.external_id FROM consumers c
                           JOIN projects p ON p.id = c.project_id WHERE c.uuid = {consumer});
        SET v_user = (SELECT u.external_id FROM consumers c
                        JOIN users u ON u.id = c.user_id WHERE c.uuid = {consumer});
        SET v_uuid = (SELECT `uuid` FROM resource_providers
                       WHERE id = {row}.resource_provider_id);
        SET v_class = (SELECT name FROM resource_classes WHERE id = {row}.resource_class_id);
        INSERT INTO {ALLOCATIONS} ({_ALLOCATION_COLUMNS})
        VALUES (UTC_TIMESTAMP(6), {w.MYSQL_TXN}, {consumer}, v_type, v_project, v_user,
                {row}.resource_provider_id, v_uuid, {row}.resource_class_id, v_class,
                {before}, {after}, {w.MYSQL_REQUEST_ID}, {w.MYSQL_GLOBAL_REQUEST_ID},
                {_MYSQL_WRITER_EXPR});
    ELSE
        UPDATE {ALLOCATIONS} SET used_after = used_after - {before} + {after}
         WHERE id = hit;
    END IF;
    SET {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN};"""


_MYSQL_DECLARE = """
    DECLARE hit BIGINT DEFAULT NULL;
    DECLARE v_type VARCHAR(255) DEFAULT NULL;
    DECLARE v_project VARCHAR(255) DEFAULT NULL;
    DECLARE v_user VARCHAR(255) DEFAULT NULL;
    DECLARE v_uuid VARCHAR(36) DEFAULT NULL;
    DECLARE v_class VARCHAR(255) DEFAULT NULL;"""

_SAME_KEY = ("NEW.consumer_id = OLD.consumer_id "
             "AND NEW.resource_provider_id = OLD.resource_provider_id "
             "AND NEW.resource_class_id = OLD.resource_class_id")


def _mysql_allocation_triggers() -> dict[str, str]:
    update = (f"IF {_SAME_KEY} THEN IF NEW.used <> OLD.used THEN"
              f"{_mysql_allocation_change('NEW', 'OLD.used', 'NEW.used')}\n    END IF; ELSE"
              f"{_mysql_allocation_change('OLD', 'OLD.used', '0')}"
              f"{_mysql_allocation_change('NEW', '0', 'NEW.used')}\n    END IF;")
    return {
        "INSERT": _mysql_allocation_change("NEW", "0", "NEW.used"),
        "DELETE": _mysql_allocation_change("OLD", "OLD.used", "0"),
        "UPDATE": update,
    }


def _mysql_inventory_trigger(event: str) -> str:
    def side(row: str | None, prefix: str) -> str:
        if row is None:
            return f"SET {prefix}_total = NULL, {prefix}_reserved = NULL, {prefix}_ratio = NULL;"
        return (f"SET {prefix}_total = {row}.total, {prefix}_reserved = {row}.reserved, "
                f"{prefix}_ratio = {row}.allocation_ratio, v_min = {row}.min_unit, "
                f"v_max = {row}.max_unit, v_step = {row}.step_size, "
                f"v_rp = {row}.resource_provider_id, v_rc = {row}.resource_class_id;")
    before = side(None if event == "INSERT" else "OLD", "b")
    after = side(None if event == "DELETE" else "NEW", "a")
    skip = ""
    if event == "UPDATE":
        skip = (f"IF NOT (NEW.resource_provider_id = OLD.resource_provider_id "
                f"AND NEW.resource_class_id = OLD.resource_class_id AND {_UNCHANGED}) THEN")
    return f"""BEGIN
    DECLARE hit BIGINT DEFAULT NULL;
    DECLARE v_rp INT; DECLARE v_rc INT; DECLARE v_generation INT;
    DECLARE v_uuid VARCHAR(36); DECLARE v_class VARCHAR(255);
    DECLARE b_total INT; DECLARE b_reserved INT; DECLARE b_ratio DOUBLE;
    DECLARE a_total INT; DECLARE a_reserved INT; DECLARE a_ratio DOUBLE;
    DECLARE v_min INT; DECLARE v_max INT; DECLARE v_step INT;
    {skip}
    {before}
    {after}
    SET v_uuid = (SELECT `uuid` FROM resource_providers WHERE id = v_rp);
    SET v_generation = (SELECT generation FROM resource_providers WHERE id = v_rp);
    SET v_class = (SELECT name FROM resource_classes WHERE id = v_rc);
    SET hit = (SELECT id FROM {INVENTORIES}
                WHERE resource_provider_uuid = v_uuid AND txn = {w.MYSQL_TXN}
                  AND resource_class_id = v_rc ORDER BY id DESC LIMIT 1);
    IF hit IS NULL THEN
        INSERT INTO {INVENTORIES} ({_INVENTORY_COLUMNS})
        VALUES (UTC_TIMESTAMP(6), {w.MYSQL_TXN}, v_rp, v_uuid, v_generation, v_rc, v_class,
                b_total, a_total, b_reserved, a_reserved, b_ratio, a_ratio, v_min, v_max,
                v_step, {w.MYSQL_REQUEST_ID}, {w.MYSQL_GLOBAL_REQUEST_ID}, {_MYSQL_WRITER_EXPR});
    ELSE{_INVENTORY_MERGE.format(hit="hit")}
    END IF;
    {"END IF;" if skip else ""}
END"""


def _mysql(bind: sa.Connection) -> None:
    for event, body in _mysql_allocation_triggers().items():
        bind.exec_driver_sql(
            f"CREATE TRIGGER allotment_history_allocations_{event} AFTER {event} "
            f"ON allocations FOR EACH ROW BEGIN{_MYSQL_DECLARE}{body}\nEND")
    for event in ("INSERT", "UPDATE", "DELETE"):
        bind.exec_driver_sql(
            f"CREATE TRIGGER allotment_history_inventories_{event} AFTER {event} "
            f"ON inventories FOR EACH ROW {_mysql_inventory_trigger(event)}")
    changed = _OWNER_CHANGED.format(
        not_same_type="NOT (NEW.consumer_type_id <=> OLD.consumer_type_id)")
    bind.exec_driver_sql(
        "CREATE TRIGGER allotment_history_consumers_UPDATE AFTER UPDATE ON consumers "
        f"FOR EACH ROW BEGIN IF {w.MYSQL_TXN} IS NOT NULL AND ({changed}) THEN"
        f"{_OWNER_SET.format(uuid='`uuid`', txn=w.MYSQL_TXN)}\n    END IF;\nEND")


# --- SQLite -------------------------------------------------------------------

# UTC with microseconds, as SQLAlchemy reads DATETIME text ("%f" is SS.SSS).
_SQLITE_NOW = "strftime('%Y-%m-%d %H:%M:%f000', 'now')"
_SQLITE_TXN = f"(SELECT txn FROM {w.SQLITE_CONTEXT} WHERE id = 1)"
_SQLITE_FROM_CONTEXT = f"FROM (SELECT 1) one LEFT JOIN {w.SQLITE_CONTEXT} ctx ON ctx.id = 1"
_SQLITE_WRITER = (f"CASE WHEN ctx.id IS NULL THEN '{w.WRITER_OUTSIDE}' "
                  f"ELSE '{w.WRITER_ALLOTMENT}' END")


def _sqlite_allocation_change(row: str, before: str, after: str) -> str:
    consumer = f"{row}.consumer_id"
    same = (f"consumer_uuid = {consumer} AND txn = {_SQLITE_TXN} "
            f"AND resource_provider_id = {row}.resource_provider_id "
            f"AND resource_class_id = {row}.resource_class_id")
    return f"""
    UPDATE {ALLOCATIONS} SET used_after = used_after - {before} + {after} WHERE {same};
    INSERT INTO {ALLOCATIONS} ({_ALLOCATION_COLUMNS})
    SELECT {_SQLITE_NOW}, ctx.txn, {consumer},
           (SELECT ct.name FROM consumers c JOIN consumer_types ct
               ON ct.id = c.consumer_type_id WHERE c.uuid = {consumer}),
           (SELECT p.external_id FROM consumers c JOIN projects p
               ON p.id = c.project_id WHERE c.uuid = {consumer}),
           (SELECT u.external_id FROM consumers c JOIN users u
               ON u.id = c.user_id WHERE c.uuid = {consumer}),
           {row}.resource_provider_id,
           (SELECT uuid FROM resource_providers WHERE id = {row}.resource_provider_id),
           {row}.resource_class_id,
           (SELECT name FROM resource_classes WHERE id = {row}.resource_class_id),
           {before}, {after}, ctx.request_id, ctx.global_request_id, {_SQLITE_WRITER}
      {_SQLITE_FROM_CONTEXT}
     WHERE NOT EXISTS (SELECT 1 FROM {ALLOCATIONS} WHERE {same});"""


def _sqlite_inventory_change(old: str | None, new: str | None) -> str:
    row = new or old
    assert row is not None

    def value(side: str | None, field: str) -> str:
        return f"{side}.{field}" if side else "NULL"

    same = (f"resource_provider_uuid = (SELECT uuid FROM resource_providers "
            f"WHERE id = {row}.resource_provider_id) AND txn = {_SQLITE_TXN} "
            f"AND resource_class_id = {row}.resource_class_id")
    return f"""
    UPDATE {INVENTORIES}
       SET total_after = {value(new, 'total')}, reserved_after = {value(new, 'reserved')},
           allocation_ratio_after = {value(new, 'allocation_ratio')},
           min_unit = {row}.min_unit, max_unit = {row}.max_unit, step_size = {row}.step_size
     WHERE {same};
    INSERT INTO {INVENTORIES} ({_INVENTORY_COLUMNS})
    SELECT {_SQLITE_NOW}, ctx.txn, {row}.resource_provider_id,
           (SELECT uuid FROM resource_providers WHERE id = {row}.resource_provider_id),
           (SELECT generation FROM resource_providers WHERE id = {row}.resource_provider_id),
           {row}.resource_class_id,
           (SELECT name FROM resource_classes WHERE id = {row}.resource_class_id),
           {value(old, 'total')}, {value(new, 'total')},
           {value(old, 'reserved')}, {value(new, 'reserved')},
           {value(old, 'allocation_ratio')}, {value(new, 'allocation_ratio')},
           {row}.min_unit, {row}.max_unit, {row}.step_size,
           ctx.request_id, ctx.global_request_id, {_SQLITE_WRITER}
      {_SQLITE_FROM_CONTEXT}
     WHERE NOT EXISTS (SELECT 1 FROM {INVENTORIES} WHERE {same});"""


def _sqlite(bind: sa.Connection) -> None:
    triggers = {
        "allocations_insert": ("INSERT ON allocations", None,
                               _sqlite_allocation_change("NEW", "0", "NEW.used")),
        "allocations_delete": ("DELETE ON allocations", None,
                               _sqlite_allocation_change("OLD", "OLD.used", "0")),
        "allocations_update": ("UPDATE ON allocations",
                               f"{_SAME_KEY} AND NEW.used <> OLD.used",
                               _sqlite_allocation_change("NEW", "OLD.used", "NEW.used")),
        "allocations_rekey": ("UPDATE ON allocations", f"NOT ({_SAME_KEY})",
                              _sqlite_allocation_change("OLD", "OLD.used", "0")
                              + _sqlite_allocation_change("NEW", "0", "NEW.used")),
        "inventories_insert": ("INSERT ON inventories", None,
                               _sqlite_inventory_change(None, "NEW")),
        "inventories_delete": ("DELETE ON inventories", None,
                               _sqlite_inventory_change("OLD", None)),
        "inventories_update": ("UPDATE ON inventories",
                               "NOT (NEW.resource_provider_id = OLD.resource_provider_id "
                               f"AND NEW.resource_class_id = OLD.resource_class_id "
                               f"AND {_UNCHANGED})",
                               _sqlite_inventory_change("OLD", "NEW")),
    }
    triggers["consumers_owner"] = (
        "UPDATE ON consumers",
        _OWNER_CHANGED.format(
            not_same_type="NEW.consumer_type_id IS NOT OLD.consumer_type_id"),
        _OWNER_SET.format(uuid="uuid", txn=_SQLITE_TXN))
    for name, (event, when, body) in triggers.items():
        condition = f" WHEN {when}" if when else ""
        bind.exec_driver_sql(f"CREATE TRIGGER allotment_history_{name} AFTER {event} "
                             f"FOR EACH ROW{condition} BEGIN{body}\nEND")


SQLITE_TRIGGERS = ("allocations_insert", "allocations_delete", "allocations_update",
                   "allocations_rekey", "inventories_insert", "inventories_delete",
                   "inventories_update", "consumers_owner")


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    _create_tables(dialect)
    if dialect == "postgresql":
        _postgresql(bind)
    elif dialect == "mysql":
        _mysql(bind)
    else:
        _sqlite(bind)


def downgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    if dialect == "postgresql":
        for name in _PG_CHANGED:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS allotment_history_{name} "
                                 "ON allocations")
            bind.exec_driver_sql(f"DROP FUNCTION IF EXISTS allotment_history_allocations_{name}()")
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_history ON inventories")
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS allotment_history_inventories()")
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_history_owner ON consumers")
        bind.exec_driver_sql("DROP FUNCTION IF EXISTS allotment_history_consumer_owner()")
    elif dialect == "mysql":
        for table in ("allocations", "inventories"):
            for event in ("INSERT", "UPDATE", "DELETE"):
                bind.exec_driver_sql(
                    f"DROP TRIGGER IF EXISTS allotment_history_{table}_{event}")
        bind.exec_driver_sql("DROP TRIGGER IF EXISTS allotment_history_consumers_UPDATE")
    else:
        for name in SQLITE_TRIGGERS:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS allotment_history_{name}")
        op.drop_table(w.SQLITE_CONTEXT)
    op.drop_table(INVENTORIES)
    op.drop_table(ALLOCATIONS)
