"""Rows older Placement releases left for their online data migrations to finish.

``allotment status upgrade check`` counts them (as upstream's
``placement-status`` does); allotment has no online data migrations of its
own, so these rows are fixed by ``placement-manage db online_data_migrations``
of the release that wrote them.
"""

from __future__ import annotations

import sqlalchemy as sa

from allotment.db import tables as t


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
