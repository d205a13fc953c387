"""Aggregates: uuids grouping providers; a row in placement_aggregates on first use."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment.db import tables as t
from allotment.ledger import providers
from allotment.ledger.common import is_duplicate, utcnow
from allotment.ledger.errors import ProviderNotFound
from allotment.ledger.providers import Provider

_agg = t.placement_aggregates
_rpa = t.resource_provider_aggregates


def _aggregates_of_uuid_select() -> sa.Select:
    """The provider by its uuid with its aggregates' uuids, in one statement:
    the provider's one row by its unique uuid, its links by their provider
    index (a LEFT JOIN, so that a provider in no aggregate still answers),
    each aggregate by its id."""
    rp = providers.PROVIDER_BY_UUID
    link = _rpa.alias("link")
    uuid = (sa.select(_agg.c.uuid).where(_agg.c.id == link.c.aggregate_id)
            .scalar_subquery().label("aggregate_uuid"))
    return (sa.select(rp.c.generation, uuid)
            .select_from(rp.outerjoin(link, link.c.resource_provider_id == rp.c.id))
            .where(*providers.by_uuid_conditions(rp))
            .order_by(link.c.aggregate_id))


# Built once: nova-compute reads it for every host (issue 40).
_AGGREGATES_OF_UUID = _aggregates_of_uuid_select()


def aggregates_of_provider(conn: sa.Connection, uuid: str) -> tuple[int, list[str]]:
    """The generation and aggregate uuids (oldest aggregate first) of the
    provider ``uuid``, read together; ``ProviderNotFound`` when there is no
    such provider."""
    rows = conn.execute(_AGGREGATES_OF_UUID, {"uuid": uuid}).all()
    if not rows:
        raise ProviderNotFound(uuid)
    return rows[0].generation, [row.aggregate_uuid for row in rows
                                if row.aggregate_uuid is not None]


def ensure_aggregate(conn: sa.Connection, uuid: str) -> int:
    """The internal id of aggregate ``uuid``, creating its row when new."""
    select = sa.select(_agg.c.id).where(_agg.c.uuid == uuid)
    found = conn.execute(select).scalar()
    if found is not None:
        return found
    try:
        # A savepoint: a concurrent creator may win; then we read its row.
        with conn.begin_nested():
            new_id: int = conn.execute(_agg.insert().values(uuid=uuid, created_at=utcnow())
                                       ).inserted_primary_key[0]  # type: ignore[index]
            return new_id
    except IntegrityError as exc:
        if not is_duplicate(exc):
            raise
    return conn.execute(select).scalar_one()


def replace(conn: sa.Connection, provider_uuid: str, uuids: list[str],
            generation: int | None) -> int:
    """Make ``uuids`` the provider's aggregates; the provider's generation after it.

    From 1.19 the client sends the ``generation``, which is checked and
    bumped; before (``generation`` None) the generation is left alone.
    """
    provider = providers.require(conn, provider_uuid)
    if generation is not None:
        providers.check_generation(provider, generation)
    set_provider_aggregates(conn, provider, uuids)
    if generation is None:
        return provider.generation
    return providers.bump_generation(conn, provider)


def set_provider_aggregates(conn: sa.Connection, provider: Provider,
                            uuids: list[str]) -> None:
    """Make ``uuids`` the provider's aggregates (the caller decides on a bump).

    An association added meanwhile by a concurrent writer is a duplicate key:
    a lost race, run again by the retry loop.
    """
    existing = {row.aggregate_id: row.uuid for row in conn.execute(
        sa.select(_rpa.c.aggregate_id, _agg.c.uuid)
        .select_from(_rpa.join(_agg, _agg.c.id == _rpa.c.aggregate_id))
        .where(_rpa.c.resource_provider_id == provider.id))}
    wanted = set(uuids)
    to_delete = [agg_id for agg_id, uuid in existing.items() if uuid not in wanted]
    to_add = sorted(wanted - set(existing.values()))
    if to_delete:
        conn.execute(_rpa.delete().where(_rpa.c.resource_provider_id == provider.id,
                                         _rpa.c.aggregate_id.in_(to_delete)))
    if to_add:
        now = utcnow()
        rows = [{"resource_provider_id": provider.id, "aggregate_id": ensure_aggregate(conn, u),
                 "created_at": now} for u in to_add]
        conn.execute(_rpa.insert(), rows)
