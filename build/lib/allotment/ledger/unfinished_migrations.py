"""Rows older Placement releases left for their online data migrations to finish.

``allotment status upgrade check`` (and ``placement-status``) counts them, as
upstream's ``placement-status`` does; allotment's ``placement-manage db
online_data_migrations`` finishes them in batches, as upstream's does: each
step takes at most ``limit`` rows and answers (found, done). A database at
upstream's Alembic head has none left (its migrations refuse to go on while
any remain); only one adopted from an older schema can.
"""

from __future__ import annotations

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import consumers
from allotment.ledger.common import utcnow


def has_tables(conn: sa.Connection) -> bool:
    """Whether the database has Placement's tables at all (a fresh one has not)."""
    inspector = sa.inspect(conn)
    return all(inspector.has_table(table.name)
               for table in (t.resource_providers, t.allocations, t.consumers))


def providers_without_root(conn: sa.Connection) -> int:
    """Providers from before root_provider_id (Queens) that were never migrated."""
    query = (sa.select(sa.func.count()).select_from(t.resource_providers)
             .where(t.resource_providers.c.root_provider_id.is_(None)))
    return int(conn.execute(query).scalar_one())


def consumers_missing(conn: sa.Connection) -> int:
    """Consumers holding allocations but with no consumers row (allocations
    written below microversion 1.8 before Rocky)."""
    allocation, consumer = t.allocations, t.consumers
    query = (sa.select(sa.func.count(sa.distinct(allocation.c.consumer_id)))
             .select_from(allocation.outerjoin(
                 consumer, allocation.c.consumer_id == consumer.c.uuid))
             .where(consumer.c.id.is_(None)))
    return int(conn.execute(query).scalar_one())


def set_root_provider_ids(conn: sa.Connection, limit: int) -> tuple[int, int]:
    """Up to ``limit`` providers without a root become their own root (pre-nesting
    providers had no parent); (found, done)."""
    rp = t.resource_providers
    ids = list(conn.execute(sa.select(rp.c.id).where(rp.c.root_provider_id.is_(None))
                            .order_by(rp.c.id).limit(limit)).scalars())
    if ids:
        conn.execute(rp.update().where(rp.c.id.in_(ids)).values(root_provider_id=rp.c.id))
    return len(ids), len(ids)


def create_incomplete_consumers(conn: sa.Connection, limit: int, project_id: str,
                                user_id: str) -> tuple[int, int]:
    """A consumers row for up to ``limit`` consumers that hold allocations without one,
    owned by the configured incomplete-consumer project and user; (found, done)."""
    allocation, consumer = t.allocations, t.consumers
    uuids = list(conn.execute(
        sa.select(allocation.c.consumer_id)
        .select_from(allocation.outerjoin(consumer,
                                          allocation.c.consumer_id == consumer.c.uuid))
        .where(consumer.c.id.is_(None))
        .group_by(allocation.c.consumer_id).order_by(allocation.c.consumer_id)
        .limit(limit)).scalars())
    if uuids:
        project = consumers.ensure_project(conn, project_id)
        user = consumers.ensure_user(conn, user_id)
        now = utcnow()
        # Generation 0: what upstream's migration leaves (the column's default).
        conn.execute(consumer.insert(), [
            {"uuid": uuid, "project_id": project, "user_id": user, "generation": 0,
             "created_at": now} for uuid in uuids])
    return len(uuids), len(uuids)
