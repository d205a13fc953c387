"""Upstream Placement's schema, created only where it does not exist yet.

An operator's existing Placement database already has every table: then this
step changes nothing. On an empty database it creates the tables exactly as
upstream's migrations leave them (openstack-placement 16.0.0, head
a082b8bb98d0, constraint and index names included) and stamps upstream's own
version table with that head, so upstream Placement accepts the database too.

The schema is frozen here, written out table by table, on purpose: it must not
follow ``allotment.db.tables``. A column added to tables.py arrives together
with a migration of its own; were this step to build from the live metadata,
fresh databases would get the column here and then again from the new
migration. tests/test_schema.py checks that the two still agree.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Upstream's Alembic head as of openstack-placement 16.0.0 (frozen, like the tables).
UPSTREAM_ALEMBIC_HEAD = "a082b8bb98d0"


def _timestamps() -> list[sa.Column[Any]]:
    return [
        sa.Column("created_at", sa.DateTime(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
    ]


# Constraints and indexes are listed in upstream's order: MySQL names an unnamed
# foreign key by its position (``<table>_ibfk_<n>``), and the indexes are made
# one by one, in order, so that every backend lists them as upstream's do.
def _index(table: str, name: str, *columns: str) -> None:
    op.create_index(name, table, list(columns), unique=False)


def _resource_providers() -> None:
    op.create_table(
        "resource_providers",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("name", sa.Unicode(200), nullable=True),
        sa.Column("generation", sa.Integer(), nullable=True),
        sa.Column("root_provider_id", sa.Integer(), nullable=True),
        sa.Column("parent_provider_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.ForeignKeyConstraint(["parent_provider_id"], ["resource_providers.id"]),
        sa.ForeignKeyConstraint(["root_provider_id"], ["resource_providers.id"]),
        sa.UniqueConstraint("name", name="uniq_resource_providers0name"),
        sa.UniqueConstraint("uuid", name="uniq_resource_providers0uuid"),
    )
    _index("resource_providers", "resource_providers_parent_provider_id_idx",
           "parent_provider_id")
    _index("resource_providers", "resource_providers_root_provider_id_idx", "root_provider_id")


def _inventories() -> None:
    op.create_table(
        "inventories",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("resource_class_id", sa.Integer(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("reserved", sa.Integer(), nullable=False),
        sa.Column("min_unit", sa.Integer(), nullable=False),
        sa.Column("max_unit", sa.Integer(), nullable=False),
        sa.Column("step_size", sa.Integer(), nullable=False),
        sa.Column("allocation_ratio", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("resource_provider_id", "resource_class_id",
                            name="uniq_inventories0resource_provider_resource_class"),
    )
    _index("inventories", "inventories_resource_class_id_idx", "resource_class_id")


def _allocations() -> None:
    op.create_table(
        "allocations",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("consumer_id", sa.String(36), nullable=False),
        sa.Column("resource_class_id", sa.Integer(), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    _index("allocations", "allocations_resource_provider_class_used_idx",
           "resource_provider_id", "resource_class_id", "used")
    _index("allocations", "allocations_resource_class_id_idx", "resource_class_id")
    _index("allocations", "allocations_consumer_id_idx", "consumer_id")


def _resource_provider_aggregates() -> None:
    op.create_table(
        "resource_provider_aggregates",
        *_timestamps(),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.Column("aggregate_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("resource_provider_id", "aggregate_id"),
    )
    _index("resource_provider_aggregates", "resource_provider_aggregates_aggregate_id_idx",
           "aggregate_id")


def _placement_aggregates() -> None:
    op.create_table(
        "placement_aggregates",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid", name="uniq_placement_aggregates0uuid"),
    )


def _resource_classes() -> None:
    op.create_table(
        "resource_classes",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uniq_resource_classes0name"),
    )


def _traits() -> None:
    op.create_table(
        "traits",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Unicode(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uniq_traits0name"),
    )


def _resource_provider_traits() -> None:
    op.create_table(
        "resource_provider_traits",
        *_timestamps(),
        sa.Column("trait_id", sa.Integer(), nullable=False),
        sa.Column("resource_provider_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("trait_id", "resource_provider_id"),
        sa.ForeignKeyConstraint(["resource_provider_id"], ["resource_providers.id"]),
        sa.ForeignKeyConstraint(["trait_id"], ["traits.id"]),
    )
    _index("resource_provider_traits", "resource_provider_traits_resource_provider_trait_idx",
           "resource_provider_id", "trait_id")


def _projects() -> None:
    op.create_table(
        "projects",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("external_id", name="uniq_projects0external_id"),
    )


def _users() -> None:
    op.create_table(
        "users",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("external_id", name="uniq_users0external_id"),
    )


def _consumer_types() -> None:
    op.create_table(
        "consumer_types",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Unicode(255), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uniq_consumer_types0name"),
    )


def _consumers() -> None:
    op.create_table(
        "consumers",
        *_timestamps(),
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("consumer_type_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("uuid", name="uniq_consumers0uuid"),
        sa.ForeignKeyConstraint(["consumer_type_id"], ["consumer_types.id"],
                                name="consumers_consumer_type_id_fkey"),
    )
    _index("consumers", "consumers_project_id_user_id_uuid_idx",
           "project_id", "user_id", "uuid")
    _index("consumers", "consumers_project_id_uuid_idx", "project_id", "uuid")
    _index("consumers", "consumers_consumer_type_id_idx", "consumer_type_id")


# Every upstream table, in an order where a table comes after those it refers to.
UPSTREAM_TABLES: dict[str, Callable[[], None]] = {
    "resource_providers": _resource_providers,
    "inventories": _inventories,
    "allocations": _allocations,
    "resource_provider_aggregates": _resource_provider_aggregates,
    "placement_aggregates": _placement_aggregates,
    "resource_classes": _resource_classes,
    "traits": _traits,
    "resource_provider_traits": _resource_provider_traits,
    "projects": _projects,
    "users": _users,
    "consumer_types": _consumer_types,
    "consumers": _consumers,
}


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    missing = [name for name in UPSTREAM_TABLES if name not in existing]
    if not missing:
        return
    for name in missing:
        UPSTREAM_TABLES[name]()
    if "alembic_version" not in existing:
        version = op.create_table(
            "alembic_version",
            sa.Column("version_num", sa.String(32), nullable=False),
            sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
        )
        op.bulk_insert(version, [{"version_num": UPSTREAM_ALEMBIC_HEAD}])
