"""History: a write's lookups are one index probe, however long the history.

Migration 0005's triggers merge a transaction's changes to one key into one
entry, so a write looks up "this transaction's entry for (consumer, provider,
class)" (allocations), "(provider, class)" (inventories) or "this
transaction's entries of this consumer" (a claim that changes the owner).
The only indexes that could answer were (consumer_uuid, id) and
(resource_provider_uuid, id): each lookup walked every entry the consumer or
provider ever had (SQLite, MariaDB), or, with no statistics on the history
(PostgreSQL with autovacuum off), the planner scanned the whole table. A
consumer with 100,000 entries took 73 ms per claim against 15 ms.

Two indexes led by the transaction id answer each lookup in one probe: the
transaction's own entries are a handful, whoever wrote before it. The
transaction id leads because every lookup names it, and on PostgreSQL it
grows, so new entries go to the index's right edge. The entries themselves
are unchanged.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ALLOCATIONS = "allotment_allocation_history"
INVENTORIES = "allotment_inventory_history"

# (name, table, columns): each matches a lookup of 0005's triggers column for
# column; the inventories' trailing id answers their "ORDER BY id DESC LIMIT 1".
INDEXES = (
    (f"{ALLOCATIONS}_txn_key_idx", ALLOCATIONS,
     ["txn", "consumer_uuid", "resource_provider_id", "resource_class_id"]),
    (f"{INVENTORIES}_txn_key_idx", INVENTORIES,
     ["txn", "resource_provider_uuid", "resource_class_id", "id"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _columns in INDEXES:
        op.drop_index(name, table_name=table)
