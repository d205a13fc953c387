"""Aggregates: uuids grouping providers; a row in placement_aggregates on first use."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment.db import tables as t
from allotment.ledger import providers
from allotment.ledger.common import is_duplicate, utcnow
from allotment.ledger.providers import Provider

_agg = t.placement_aggregates
_rpa = t.resource_provider_aggregates


def _provider_aggregates_select() -> sa.Select:
    """The links by their provider index, each aggregate's uuid by its id: index
    probes whatever the planner knows (a join was a hash join over every
    aggregate on a database without statistics)."""
    uuid = (sa.select(_agg.c.uuid).where(_agg.c.id == _rpa.c.aggregate_id)
            .scalar_subquery().label("uuid"))
    return (sa.select(uuid)
            .where(_rpa.c.resource_provider_id == sa.bindparam("provider_id"))
            .order_by(_rpa.c.aggregate_id))


# Built once, with its cache key: nova-compute reads it for every host (issue 40).
_PROVIDER_AGGREGATES = _provider_aggregates_select()


def provider_aggregates(conn: sa.Connection, provider_id: int) -> list[str]:
    """The uuids of the provider's aggregates, oldest aggregate first."""
    rows = conn.execute(_PROVIDER_AGGREGATES, {"provider_id": provider_id})
    return [row.uuid for row in rows if row.uuid is not None]


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
