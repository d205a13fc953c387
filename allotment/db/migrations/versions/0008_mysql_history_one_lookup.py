"""MySQL/MariaDB: a history entry's names in one lookup, not five.

MariaDB runs migration 0005's history triggers once per row, and each new
entry looked its names up in five statements: the consumer's type, project
and user (each joining consumers again), the provider's uuid and the class's
name; an inventory's entry in three (the provider's uuid, its generation,
the class's name). Each statement of a trigger is a round of the server's
statement machinery, and a claim's three rows ran fifteen of them: the
triggers took more than half of what the database could otherwise commit
(bench/claim_floor.py). One SELECT ... INTO of left joins from a single row
reads the same names in one statement. Left joins keep what the scalar
subqueries gave: NULL for what is not there (a consumer already deleted, an
id no row has). It stays a plain read, like the subqueries, not a locking
INSERT ... SELECT.

PostgreSQL records allocations once per statement and SQLite has no such
cost: only MySQL/MariaDB change. The entries written are the same.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import importlib
from types import ModuleType

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _history_0005() -> ModuleType:
    return importlib.import_module("allotment.db.migrations.versions.0005_history")


def _allocation_lookups(row: str) -> tuple[str, str]:
    """0005's five lookups of an allocation entry's names, and the one that replaces them."""
    consumer = f"{row}.consumer_id"
    old = f"""        SET v_type = (SELECT ct.name FROM consumers c
                        JOIN consumer_types ct ON ct.id = c.consumer_type_id
                       WHERE c.uuid = {consumer});
        SET v_project = (SELECT p.external_id FROM consumers c
                           JOIN projects p ON p.id = c.project_id WHERE c.uuid = {consumer});
        SET v_user = (SELECT u.external_id FROM consumers c
                        JOIN users u ON u.id = c.user_id WHERE c.uuid = {consumer});
        SET v_uuid = (SELECT `uuid` FROM resource_providers
                       WHERE id = {row}.resource_provider_id);
        SET v_class = (SELECT name FROM resource_classes WHERE id = {row}.resource_class_id);
"""
    new = f"""        SELECT ct.name, p.external_id, u.external_id, rp.`uuid`, rc.name
          INTO v_type, v_project, v_user, v_uuid, v_class
          FROM (SELECT 1) one_row
          LEFT JOIN consumers c ON c.uuid = {consumer}
          LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id
          LEFT JOIN projects p ON p.id = c.project_id
          LEFT JOIN users u ON u.id = c.user_id
          LEFT JOIN resource_providers rp ON rp.id = {row}.resource_provider_id
          LEFT JOIN resource_classes rc ON rc.id = {row}.resource_class_id;
"""
    return old, new


_INVENTORY_LOOKUPS = (
    """    SET v_uuid = (SELECT `uuid` FROM resource_providers WHERE id = v_rp);
    SET v_generation = (SELECT generation FROM resource_providers WHERE id = v_rp);
    SET v_class = (SELECT name FROM resource_classes WHERE id = v_rc);
""",
    """    SELECT rp.`uuid`, rp.generation, rc.name INTO v_uuid, v_generation, v_class
      FROM (SELECT 1) one_row
      LEFT JOIN resource_providers rp ON rp.id = v_rp
      LEFT JOIN resource_classes rc ON rc.id = v_rc;
""")


def _joined(body: str, lookups: list[tuple[str, str]]) -> str:
    for old, new in lookups:
        assert old in body, "migration 0005's history trigger changed"
        body = body.replace(old, new)
    return body


def _create(history: ModuleType, joined: bool) -> None:
    """The history triggers of MySQL/MariaDB: 0005's, or with the lookups joined."""
    allocation_lookups = [_allocation_lookups("NEW"), _allocation_lookups("OLD")]
    for event, body in history._mysql_allocation_triggers().items():
        if joined:
            # INSERT and DELETE record one side (NEW, OLD), an UPDATE of the key both.
            body = _joined(body, [pair for pair in allocation_lookups if pair[0] in body])
            assert "SET v_type" not in body, "migration 0005's history trigger changed"
        op.execute(f"CREATE TRIGGER allotment_history_allocations_{event} AFTER {event} "
                   f"ON allocations FOR EACH ROW BEGIN{history._MYSQL_DECLARE}{body}\nEND")
    for event in ("INSERT", "UPDATE", "DELETE"):
        body = history._mysql_inventory_trigger(event)
        if joined:
            body = _joined(body, [_INVENTORY_LOOKUPS])
        op.execute(f"CREATE TRIGGER allotment_history_inventories_{event} AFTER {event} "
                   f"ON inventories FOR EACH ROW {body}")


def _replace(joined: bool) -> None:
    if op.get_bind().dialect.name != "mysql":
        return
    for table in ("allocations", "inventories"):
        for event in ("INSERT", "UPDATE", "DELETE"):
            op.execute(f"DROP TRIGGER IF EXISTS allotment_history_{table}_{event}")
    _create(_history_0005(), joined)


def upgrade() -> None:
    _replace(joined=True)


def downgrade() -> None:
    _replace(joined=False)
