"""Allocations: reading them, and replacing what consumers hold (the claim).

A claim replaces the complete allocations of one or more consumers in ONE
transaction (``write``), in this order:

1. lock the consumers' rows, read them and check their generations (1.28+);
2. find every provider involved -- those named in the request and those
   where the consumers hold allocations now -- and lock their rows (id
   order, so two claims never wait on each other in a cycle), taking their
   generations as of the lock;
3. read inventories and current usage, and check that every new amount
   respects min_unit/max_unit/step_size and that no provider ends up above
   ``(total - reserved) * allocation_ratio`` -- unless the claim leaves that
   usage no higher than it was (a provider already over capacity after its
   inventory shrank may still be given back resources or swapped within);
4. delete the consumers' old allocations and insert the new ones;
5. compare-and-set the generation of every provider in the new
   allocations and of an emptied consumer's old providers (as upstream; not
   of those a consumer leaves for others), then of every consumer; a
   consumer left without allocations is deleted.

Atomicity per database: PostgreSQL and MySQL/MariaDB run READ COMMITTED;
the row locks of steps 1-2 make concurrent claims on a provider queue, and
each statement after the lock sees every earlier commit, so the usage read
in step 3 is the usage we commit against. SQLite holds its single write
lock from BEGIN (BEGIN IMMEDIATE), so writers run one after the other. The
compare-and-sets of step 5 are the proof on every database: if any of them
finds the row changed (or a unique key or deadlock says another writer got
there first), the attempt raises ``Race``, its transaction is rolled back
and the handler's ``retry.run_write`` runs ``write`` again in a NEW
transaction -- a retry never sees its own earlier attempt.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.db.errors import CapacityGuardRefusal, meaning
from allotment.ledger import capacity, consumers, providers
from allotment.ledger.common import class_ids, class_names, utcnow
from allotment.ledger.errors import (
    InvalidAllocation,
    NoAllocations,
    Race,
    UnknownProvider,
    UnknownResourceClass,
)


@dataclass(frozen=True)
class Claim:
    """Everything one consumer should hold once the write is done."""

    consumer_uuid: str
    # provider uuid -> {resource class: amount}; empty releases everything.
    allocations: dict[str, dict[str, int]]
    project_id: str
    user_id: str
    # Checked only when ``check_generation`` (microversion 1.28+); None
    # means "I expect this consumer not to exist yet".
    generation: int | None = None
    check_generation: bool = False
    # None leaves the consumer's type as it is (requests before 1.38).
    consumer_type: str | None = None


# --- reading -----------------------------------------------------------------

@dataclass(frozen=True)
class Held:
    """One allocation row, with the names the API shows."""

    provider_uuid: str
    provider_generation: int
    consumer_uuid: str
    consumer_generation: int
    resource_class: str
    used: int
    changed_at: datetime.datetime | None


@dataclass
class ConsumerAllocations:
    consumer: consumers.Consumer
    held: list[Held] = field(default_factory=list)


def _held_select() -> sa.Select:
    a, rp, c = t.allocations, t.resource_providers, t.consumers
    return (sa.select(rp.c.uuid.label("provider_uuid"),
                      rp.c.generation.label("provider_generation"),
                      c.c.uuid.label("consumer_uuid"),
                      c.c.generation.label("consumer_generation"),
                      a.c.resource_class_id, a.c.used, a.c.created_at, a.c.updated_at)
            .select_from(a.join(rp, a.c.resource_provider_id == rp.c.id)
                         .join(c, a.c.consumer_id == c.c.uuid))
            .order_by(a.c.id))


def _to_held(conn: sa.Connection, rows: Sequence[sa.Row[Any]]) -> list[Held]:
    names = class_names(conn, {row.resource_class_id for row in rows})
    return [Held(provider_uuid=row.provider_uuid,
                 provider_generation=row.provider_generation,
                 consumer_uuid=row.consumer_uuid,
                 consumer_generation=row.consumer_generation,
                 resource_class=names[row.resource_class_id], used=row.used,
                 changed_at=row.updated_at or row.created_at)
            for row in rows]


def for_consumer(conn: sa.Connection, consumer_uuid: str) -> ConsumerAllocations | None:
    """What a consumer holds; None when it holds nothing.

    One statement, so that the consumer's generation and its allocations
    are read from the same committed state.
    """
    p, u, ct = t.projects, t.users, t.consumer_types
    c = t.consumers
    sel = _held_select().add_columns(
        c.c.id.label("consumer_id"), p.c.external_id.label("project"),
        u.c.external_id.label("user"), ct.c.name.label("consumer_type"))
    sel = (sel.join(p, c.c.project_id == p.c.id).join(u, c.c.user_id == u.c.id)
           .outerjoin(ct, c.c.consumer_type_id == ct.c.id)
           .where(t.allocations.c.consumer_id == consumer_uuid))
    rows = conn.execute(sel).all()
    if not rows:
        return None
    first = rows[0]
    consumer = consumers.Consumer(id=first.consumer_id, uuid=first.consumer_uuid,
                                  generation=first.consumer_generation, project=first.project,
                                  user=first.user, consumer_type=first.consumer_type)
    return ConsumerAllocations(consumer=consumer, held=_to_held(conn, rows))


def for_provider(conn: sa.Connection, provider_id: int) -> list[Held]:
    """Every allocation against one provider."""
    rows = conn.execute(
        _held_select().where(t.allocations.c.resource_provider_id == provider_id)).all()
    return _to_held(conn, rows)


def delete_for_consumer(conn: sa.Connection, consumer_uuid: str) -> None:
    """Remove everything a consumer holds, and the consumer (``NoAllocations`` if none).

    Releasing only lowers usage, so (as upstream) provider generations are
    left alone; the consumer's own generation is compare-and-set.
    """
    consumers.lock(conn, [consumer_uuid])
    consumer = consumers.get_many(conn, [consumer_uuid]).get(consumer_uuid)
    if consumer is None:
        raise NoAllocations(consumer_uuid)
    result = conn.execute(t.allocations.delete()
                          .where(t.allocations.c.consumer_id == consumer_uuid))
    if result.rowcount == 0:
        raise NoAllocations(consumer_uuid)
    consumers.delete(conn, consumer)


# --- writing -----------------------------------------------------------------


def _providers_with_ids(conn: sa.Connection, ids: set[int]) -> list[providers.Provider]:
    if not ids:
        return []
    rp = t.resource_providers
    rows = conn.execute(sa.select(rp.c.uuid).where(rp.c.id.in_(sorted(ids)))).all()
    return [p for p in (providers.get(conn, row.uuid) for row in rows) if p is not None]


def _lock_providers(conn: sa.Connection, touched: dict[int, providers.Provider]) -> None:
    """Row-lock the providers (in id order) and take their generations as of now.

    On PostgreSQL and MySQL this makes concurrent claims on a provider queue
    up instead of failing their compare-and-set; usage read after this
    point cannot change under us until we commit.
    """
    if not touched:
        return
    rp = t.resource_providers
    rows = conn.execute(sa.select(rp.c.id, rp.c.generation)
                        .where(rp.c.id.in_(sorted(touched))).order_by(rp.c.id)
                        .with_for_update()).all()
    locked = {row.id: row.generation for row in rows}
    for provider_id, provider in list(touched.items()):
        if provider_id not in locked:
            raise Race(f"provider {provider.uuid} vanished")
        touched[provider_id] = dataclasses.replace(provider, generation=locked[provider_id])


def write(conn: sa.Connection, claims: list[Claim]) -> None:
    """Replace the allocations of every consumer in ``claims``: one attempt, on ``conn``.

    The caller runs it with ``retry.run_write`` (a ``Race`` means: again, in a
    new transaction).
    """
    uuids = [c.consumer_uuid for c in claims]
    consumers.lock(conn, uuids)
    existing = consumers.get_many(conn, uuids)
    for c in claims:
        if c.check_generation:
            consumers.check_generation(c.consumer_uuid, existing.get(c.consumer_uuid),
                                       c.generation)

    # Providers are locked (and their generations taken) before usage is
    # read: the usage checked below is the usage we commit against.
    named = list(dict.fromkeys(rp for c in claims for rp in c.allocations))
    by_uuid: dict[str, providers.Provider] = {}
    for rp_uuid in named:
        provider = providers.get(conn, rp_uuid)
        if provider is None:
            raise UnknownProvider(rp_uuid)
        by_uuid[rp_uuid] = provider
    a = t.allocations
    old_rows = conn.execute(
        sa.select(a.c.consumer_id, a.c.resource_provider_id, a.c.resource_class_id, a.c.used)
        .where(a.c.consumer_id.in_(uuids))).all() if uuids else []
    touched = {p.id: p for p in by_uuid.values()}
    unseen = {row.resource_provider_id for row in old_rows} - set(touched)
    for p in _providers_with_ids(conn, unseen):
        touched[p.id] = p
    _lock_providers(conn, touched)

    class_order = list(dict.fromkeys(
        rc for c in claims for resources in c.allocations.values() for rc in resources))
    rc_ids = class_ids(conn, class_order)
    for name in class_order:
        if name not in rc_ids:
            raise UnknownResourceClass(name)

    old_ours: dict[tuple[int, int], int] = defaultdict(int)
    for row in old_rows:
        old_ours[(row.resource_provider_id, row.resource_class_id)] += row.used
    _check_capacity(conn, claims, by_uuid, rc_ids, old_ours)

    now = utcnow()
    if uuids:
        conn.execute(a.delete().where(a.c.consumer_id.in_(uuids)))
    new_rows = [
        {"resource_provider_id": by_uuid[rp_uuid].id, "resource_class_id": rc_ids[rc],
         "consumer_id": c.consumer_uuid, "used": amount, "created_at": now}
        for c in claims for rp_uuid, resources in c.allocations.items()
        for rc, amount in resources.items()
    ]
    if new_rows:
        try:
            conn.execute(a.insert(), new_rows)
        except sa.exc.DBAPIError as exc:
            # The database's own capacity guard (migration 0002) refuses a row
            # that takes a provider over capacity, for every writer sharing the
            # database. Our check above runs under the provider lock, so it
            # fires for us only when another writer (upstream Placement)
            # committed between; the answer is the same 409.
            refused = meaning(exc)
            if not isinstance(refused, CapacityGuardRefusal):
                raise
            rp_uuid = next(p.uuid for p in by_uuid.values() if p.id == refused.provider_id)
            rc = next(name for name, rc_id in rc_ids.items() if rc_id == refused.class_id)
            raise InvalidAllocation(
                f"Unable to create allocation for '{rc}' on resource provider "
                f"'{rp_uuid}'. The requested amount would exceed the capacity.") from exc

    # Which generations change, as upstream: the providers in the new
    # allocations, and those of a consumer whose allocations are emptied
    # (upstream writes its old ones as zero amounts); not those a consumer
    # leaves for others (a migration's destination on revert) nor, on
    # DELETE, any. All are locked all the same.
    emptied = {c.consumer_uuid for c in claims if not any(c.allocations.values())}
    changed = {by_uuid[rp_uuid].id for c in claims
               for rp_uuid, resources in c.allocations.items() if resources}
    changed |= {row.resource_provider_id for row in old_rows if row.consumer_id in emptied}
    for provider_id in sorted(changed):
        providers.bump_generation(conn, touched[provider_id])
    for c in sorted(claims, key=lambda c: c.consumer_uuid):
        _save_consumer(conn, c, existing.get(c.consumer_uuid))


def _save_consumer(conn: sa.Connection, c: Claim, consumer: consumers.Consumer | None) -> None:
    holds = any(c.allocations.values())
    if not holds:
        if consumer is not None:
            consumers.delete(conn, consumer)
        return
    project_id = consumers.ensure_project(conn, c.project_id)
    user_id = consumers.ensure_user(conn, c.user_id)
    type_id = consumers.ensure_type(conn, c.consumer_type) if c.consumer_type else None
    if consumer is None:
        consumers.create(conn, c.consumer_uuid, project_id, user_id, type_id)
    else:
        consumers.update(conn, consumer, project_id, user_id, type_id,
                         set_type=c.consumer_type is not None)


def _check_capacity(conn: sa.Connection, claims: list[Claim],
                    by_uuid: dict[str, providers.Provider], rc_ids: dict[str, int],
                    old_ours: dict[tuple[int, int], int]) -> None:
    """Refuse amounts that break an inventory's rules or its capacity."""
    if not rc_ids:
        return
    class_order = list(dict.fromkeys(
        rc for c in claims for resources in c.allocations.values() for rc in resources))
    provider_ids = [by_uuid[rp].id for c in claims for rp in c.allocations]
    class_id_list = list(rc_ids.values())
    inv, a = t.inventories, t.allocations
    inventories = {
        (row.resource_provider_id, row.resource_class_id): row
        for row in conn.execute(
            sa.select(inv).where(inv.c.resource_provider_id.in_(provider_ids),
                                 inv.c.resource_class_id.in_(class_id_list)))
    }
    usage = {
        (row.resource_provider_id, row.resource_class_id): int(row.used)
        for row in conn.execute(
            sa.select(a.c.resource_provider_id, a.c.resource_class_id,
                      sa.func.sum(a.c.used).label("used"))
            .where(a.c.resource_provider_id.in_(provider_ids),
                   a.c.resource_class_id.in_(class_id_list))
            .group_by(a.c.resource_provider_id, a.c.resource_class_id))
    }

    # A provider with no inventory at all of the requested classes.
    with_inventory = {provider_id for provider_id, _ in inventories}
    named = list(dict.fromkeys(rp for c in claims for rp, res in c.allocations.items() if res))
    missing = [rp for rp in named if by_uuid[rp].id not in with_inventory]
    if missing:
        raise InvalidAllocation(f"Inventory for '{', '.join(class_order)}' on resource provider "
                                f"'{', '.join(missing)}' invalid.")

    wanted: dict[tuple[int, int], int] = defaultdict(int)
    for c in claims:
        for rp_uuid, resources in c.allocations.items():
            provider_id = by_uuid[rp_uuid].id
            for rc, amount in resources.items():
                key = (provider_id, rc_ids[rc])
                inventory = inventories.get(key)
                if inventory is None:
                    raise InvalidAllocation(
                        f"Inventory for '{rc}' on resource provider '{rp_uuid}' invalid.")
                before = usage.get(key, 0)
                # Allocated besides this amount: this request's earlier amounts
                # replace what its consumers held.
                used = before - old_ours.get(key, 0) + wanted[key]
                limit = capacity.capacity(inventory.total, inventory.reserved,
                                          inventory.allocation_ratio)
                if not capacity.fits(amount, used, limit, inventory.min_unit,
                                     inventory.max_unit, inventory.step_size):
                    if not capacity.amount_allowed(amount, inventory.min_unit,
                                                   inventory.max_unit, inventory.step_size):
                        raise InvalidAllocation(
                            f"Unable to create allocation for '{rc}' on resource provider "
                            f"'{rp_uuid}'. The requested amount would violate inventory "
                            "constraints.")
                    # Over capacity is tolerated only when it is no worse than before.
                    if used + amount > before:
                        raise InvalidAllocation(
                            f"Unable to create allocation for '{rc}' on resource provider "
                            f"'{rp_uuid}'. The requested amount would exceed the capacity.")
                wanted[key] += amount
