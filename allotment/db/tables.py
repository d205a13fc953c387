"""The database schema: upstream Placement's tables, column for column.

Keeping the exact upstream schema lets allotment serve an existing Placement
database in place (and lets the operator switch back). Index names match
upstream's so that our migrations can detect what is already there.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

metadata = sa.MetaData()


def _timestamps() -> list[sa.Column]:
    return [
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
    ]


resource_providers = sa.Table(
    "resource_providers",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.Unicode(200)),
    sa.Column("generation", sa.Integer),
    sa.Column("root_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
    sa.Column("parent_provider_id", sa.Integer, sa.ForeignKey("resource_providers.id")),
    sa.UniqueConstraint("uuid", name="uniq_resource_providers0uuid"),
    sa.UniqueConstraint("name", name="uniq_resource_providers0name"),
    sa.Index("resource_providers_root_provider_id_idx", "root_provider_id"),
    sa.Index("resource_providers_parent_provider_id_idx", "parent_provider_id"),
)

inventories = sa.Table(
    "inventories",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource_provider_id", sa.Integer, nullable=False),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("reserved", sa.Integer, nullable=False),
    sa.Column("min_unit", sa.Integer, nullable=False),
    sa.Column("max_unit", sa.Integer, nullable=False),
    sa.Column("step_size", sa.Integer, nullable=False),
    sa.Column("allocation_ratio", sa.Float, nullable=False),
    sa.Index("inventories_resource_class_id_idx", "resource_class_id"),
    sa.UniqueConstraint(
        "resource_provider_id",
        "resource_class_id",
        name="uniq_inventories0resource_provider_resource_class",
    ),
)

allocations = sa.Table(
    "allocations",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("resource_provider_id", sa.Integer, nullable=False),
    sa.Column("consumer_id", sa.String(36), nullable=False),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("used", sa.Integer, nullable=False),
    sa.Index(
        "allocations_resource_provider_class_used_idx",
        "resource_provider_id",
        "resource_class_id",
        "used",
    ),
    sa.Index("allocations_resource_class_id_idx", "resource_class_id"),
    sa.Index("allocations_consumer_id_idx", "consumer_id"),
)

resource_provider_aggregates = sa.Table(
    "resource_provider_aggregates",
    metadata,
    *_timestamps(),
    sa.Column("resource_provider_id", sa.Integer, primary_key=True, nullable=False),
    sa.Column("aggregate_id", sa.Integer, primary_key=True, nullable=False),
    sa.Index("resource_provider_aggregates_aggregate_id_idx", "aggregate_id"),
)

placement_aggregates = sa.Table(
    "placement_aggregates",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), index=False),
    sa.UniqueConstraint("uuid", name="uniq_placement_aggregates0uuid"),
)

resource_classes = sa.Table(
    "resource_classes",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_resource_classes0name"),
)

traits = sa.Table(
    "traits",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("name", sa.Unicode(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_traits0name"),
)

resource_provider_traits = sa.Table(
    "resource_provider_traits",
    metadata,
    *_timestamps(),
    sa.Column(
        "trait_id", sa.Integer, sa.ForeignKey("traits.id"), primary_key=True, nullable=False
    ),
    sa.Column(
        "resource_provider_id",
        sa.Integer,
        sa.ForeignKey("resource_providers.id"),
        primary_key=True,
        nullable=False,
    ),
    sa.Index(
        "resource_provider_traits_resource_provider_trait_idx",
        "resource_provider_id",
        "trait_id",
    ),
)

projects = sa.Table(
    "projects",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False),
    sa.UniqueConstraint("external_id", name="uniq_projects0external_id"),
)

users = sa.Table(
    "users",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("external_id", sa.String(255), nullable=False),
    sa.UniqueConstraint("external_id", name="uniq_users0external_id"),
)

consumer_types = sa.Table(
    "consumer_types",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("name", sa.Unicode(255), nullable=False),
    sa.UniqueConstraint("name", name="uniq_consumer_types0name"),
)

consumers = sa.Table(
    "consumers",
    metadata,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, nullable=False, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("project_id", sa.Integer, nullable=False),
    sa.Column("user_id", sa.Integer, nullable=False),
    sa.Column("generation", sa.Integer, default=0, server_default=sa.text("0"), nullable=False),
    sa.Column(
        "consumer_type_id",
        sa.Integer,
        sa.ForeignKey("consumer_types.id", name="consumers_consumer_type_id_fkey"),
        nullable=True,
    ),
    sa.Index("consumers_project_id_uuid_idx", "project_id", "uuid"),
    sa.Index("consumers_project_id_user_id_uuid_idx", "project_id", "user_id", "uuid"),
    sa.Index("consumers_consumer_type_id_idx", "consumer_type_id"),
    sa.UniqueConstraint("uuid", name="uniq_consumers0uuid"),
)

# Upstream's own Alembic head; stamped when allotment creates the schema so
# that upstream Placement accepts the database as current.
UPSTREAM_ALEMBIC_HEAD = "a082b8bb98d0"

# --- allotment's own tables (not upstream's; migrations 0003 and 0005) ---------
# In a metadata of their own: code that walks upstream's schema never meets them.
own_metadata = sa.MetaData()

_when = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql")


def _entry_head() -> list[sa.Column]:
    """An entry's id, when, and the transaction it came from."""
    return [sa.Column("id", sa.BigInteger, primary_key=True),
            sa.Column("created_at", _when, nullable=False),
            sa.Column("txn", sa.BigInteger)]


def _entry_writer() -> list[sa.Column]:
    """Who wrote an entry (``allotment.db.writer``)."""
    return [sa.Column("request_id", sa.String(64)),
            sa.Column("global_request_id", sa.String(64)),
            sa.Column("writer", sa.String(16), nullable=False)]


allocation_history = sa.Table(
    "allotment_allocation_history",
    own_metadata,
    *_entry_head(),
    sa.Column("consumer_uuid", sa.String(36), nullable=False),
    sa.Column("consumer_type", sa.Unicode(255)),
    sa.Column("project_id", sa.String(255)),
    sa.Column("user_id", sa.String(255)),
    sa.Column("resource_provider_id", sa.Integer, nullable=False),
    sa.Column("resource_provider_uuid", sa.String(36)),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("resource_class", sa.Unicode(255)),
    sa.Column("used_before", sa.BigInteger, nullable=False),
    sa.Column("used_after", sa.BigInteger, nullable=False),
    *_entry_writer(),
)

inventory_history = sa.Table(
    "allotment_inventory_history",
    own_metadata,
    *_entry_head(),
    sa.Column("resource_provider_id", sa.Integer, nullable=False),
    sa.Column("resource_provider_uuid", sa.String(36)),
    sa.Column("resource_provider_generation", sa.Integer),
    sa.Column("resource_class_id", sa.Integer, nullable=False),
    sa.Column("resource_class", sa.Unicode(255)),
    sa.Column("total_before", sa.Integer),
    sa.Column("total_after", sa.Integer),
    sa.Column("reserved_before", sa.Integer),
    sa.Column("reserved_after", sa.Integer),
    sa.Column("allocation_ratio_before", sa.Float),
    sa.Column("allocation_ratio_after", sa.Float),
    sa.Column("min_unit", sa.Integer),
    sa.Column("max_unit", sa.Integer),
    sa.Column("step_size", sa.Integer),
    *_entry_writer(),
)
