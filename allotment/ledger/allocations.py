"""Allocations: reading them, and replacing what consumers hold (the claim).

A claim replaces the complete allocations of one or more consumers in ONE
transaction (``write``), in this order:

1. lock the consumers' rows, read them and check their generations (1.28+);
2. delete the consumers' old allocations, getting them back from the delete;
3. find every provider involved -- those named in the request and those
   where the consumers held allocations -- and lock their rows (id order, so
   two claims never wait on each other in a cycle), taking their
   generations as of the lock;
4. read inventories with everybody else's usage, and check that every new
   amount respects min_unit/max_unit/step_size and that no provider ends up
   above ``(total - reserved) * allocation_ratio`` -- unless the claim
   leaves that usage no higher than it was (a provider already over
   capacity after its inventory shrank may still be given back resources
   or swapped within);
5. create the consumers that are new;
6. insert the new allocations;
7. move the generation of every provider in the new allocations and of an
   emptied consumer's old providers (as upstream; not of those a consumer
   leaves for others) one up, then compare-and-set every existing
   consumer's; a consumer left without allocations is deleted.

Each step is one statement for all the claim's consumers and providers (a
new project, user or consumer type adds its insert), so that a claim costs
the same few round trips however many rows it writes
(``tests/test_claim_statements.py`` counts them).

Atomicity per database: PostgreSQL and MySQL/MariaDB run READ COMMITTED;
the row locks of steps 1 and 3 make concurrent claims on a provider queue, and
each statement after the lock sees every earlier commit, so the usage read
in step 4 is the usage we commit against. SQLite holds its single write
lock from BEGIN (BEGIN IMMEDIATE), so writers run one after the other. The
writes of steps 5 and 7 are the proof on every database: if a consumer's
compare-and-set finds its row changed or a provider's row is gone (or a
unique key or deadlock says another writer got there first), the attempt
raises ``Race``, its transaction is rolled back
and the handler's ``retry.run_write`` runs ``write`` again in a NEW
transaction -- a retry never sees its own earlier attempt.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from allotment.db import tables as t
from allotment.db.errors import CapacityGuardRefusal, meaning
from allotment.ledger import capacity, consumers, providers
from allotment.ledger.common import STANDARD_CLASS_NAMES, class_ids, class_names, utcnow
from allotment.ledger.errors import (
    AllocationBreaksConstraints,
    AllocationOverCapacity,
    AllocationWithoutInventory,
    NoAllocations,
    ProviderNotFound,
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

class Held(NamedTuple):
    """One allocation row, with the names the API shows.

    A named tuple rather than a frozen dataclass: nova-compute reads every
    allocation of its host each minute, and building a frozen dataclass
    costs three times as much per row (issue 40).
    """

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


# Lookups by key, one row each, in the select list: a correlated scalar
# subquery is always run as an index probe per allocation row, whatever the
# planner knows of the tables' sizes. As joins they were planned, on a
# PostgreSQL without statistics, as hash joins that read every consumer (or
# provider) to answer for a few rows (tests/test_plans_without_statistics.py).
_A_HELD = t.allocations


def _by_key(table: sa.Table, column: str, key: sa.ColumnElement[Any],
            label: str, match: str = "id") -> sa.Label[Any]:
    return (sa.select(table.c[column]).where(table.c[match] == key)
            .scalar_subquery().label(label))


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
    are read from the same committed state: the consumer's one row by its
    unique uuid, its allocations by their consumer index, each provider by
    its id.
    """
    p, u, ct = t.projects, t.users, t.consumer_types
    c = t.consumers
    consumer = (sa.select(c.c.id.label("consumer_id"), c.c.uuid.label("consumer_uuid"),
                          c.c.generation.label("consumer_generation"),
                          p.c.external_id.label("project"), u.c.external_id.label("user"),
                          ct.c.name.label("consumer_type"))
                .select_from(c.join(p, c.c.project_id == p.c.id)
                             .join(u, c.c.user_id == u.c.id)
                             .outerjoin(ct, c.c.consumer_type_id == ct.c.id))
                .where(c.c.uuid == consumer_uuid).subquery("consumer"))
    a, rp = _A_HELD, t.resource_providers
    columns = (_by_key(rp, "uuid", a.c.resource_provider_id, "provider_uuid"),
               _by_key(rp, "generation", a.c.resource_provider_id, "provider_generation"),
               consumer.c.consumer_uuid, consumer.c.consumer_generation,
               a.c.resource_class_id, a.c.used, a.c.created_at, a.c.updated_at,
               consumer.c.consumer_id, consumer.c.project, consumer.c.user,
               consumer.c.consumer_type)
    sel: sa.Select[Any] = (
        sa.select(*columns)
        .select_from(consumer.join(a, a.c.consumer_id == consumer.c.consumer_uuid))
        .where(a.c.consumer_id == consumer_uuid).order_by(a.c.id))
    rows = [row for row in conn.execute(sel).all() if row.provider_uuid is not None]
    if not rows:
        return None
    first = rows[0]
    found = consumers.Consumer(id=first.consumer_id, uuid=first.consumer_uuid,
                               generation=first.consumer_generation, project=first.project,
                               user=first.user, consumer_type=first.consumer_type)
    return ConsumerAllocations(consumer=found, held=_to_held(conn, rows))


def _held_of_uuid_select() -> sa.Select:
    """The provider by its uuid with every allocation against it, in one
    statement: the provider's one row by its unique uuid, its allocations by
    their provider index (a LEFT JOIN, so that a provider without any still
    answers), each consumer by its uuid and each custom class by its id."""
    rp, a, c, rc = providers.PROVIDER_BY_UUID, _A_HELD, t.consumers, t.resource_classes
    return (sa.select(rp.c.generation, rp.c.uuid.label("provider_uuid"),
                      rp.c.generation.label("provider_generation"),
                      a.c.consumer_id.label("consumer_uuid"),
                      _by_key(c, "generation", a.c.consumer_id, "consumer_generation",
                              match="uuid"),
                      a.c.resource_class_id,
                      sa.case((a.c.resource_class_id >= len(STANDARD_CLASS_NAMES),
                               _by_key(rc, "name", a.c.resource_class_id, "name")))
                      .label("class_name"),
                      a.c.used, a.c.created_at, a.c.updated_at)
            .select_from(rp.outerjoin(a, a.c.resource_provider_id == rp.c.id))
            .where(*providers.by_uuid_conditions(rp))
            .with_hint(a, capacity.BY_PROVIDER_AND_CLASS, "mysql")
            .order_by(a.c.id))


# Built once: nova-compute reads it for every host every minute (issue 40).
_HELD_OF_UUID = _held_of_uuid_select()


def of_provider(conn: sa.Connection, uuid: str) -> tuple[int, list[Held]]:
    """The generation of the provider ``uuid`` and every allocation against
    it, read together; ``ProviderNotFound`` when there is no such provider.

    A custom class's name comes in the same row (standard ones are known),
    so that, unlike ``for_provider``, no second statement looks them up.
    """
    rows = conn.execute(_HELD_OF_UUID, {"uuid": uuid}).all()
    if not rows:
        raise ProviderNotFound(uuid)
    held = []
    standard = STANDARD_CLASS_NAMES
    # Unpacked by position, in the select list's order: reading a row's
    # columns by name costs twenty times more, and a busy host has hundreds.
    for (_, provider_uuid, provider_generation, consumer_uuid, consumer_generation,
         class_id, class_name, used, created_at, updated_at) in rows:
        if consumer_generation is None:  # no allocation, or its consumer is gone
            continue
        name = standard.get(class_id, class_name)
        if name is None:  # as the lookup of ``_to_held`` would have failed
            raise KeyError(class_id)
        held.append(Held(provider_uuid, provider_generation, consumer_uuid,
                         consumer_generation, name, used, updated_at or created_at))
    return rows[0][0], held


def delete_for_consumer(conn: sa.Connection, consumer_uuid: str) -> None:
    """Remove everything a consumer holds, and the consumer (``NoAllocations`` if none).

    Releasing only lowers usage, so (as upstream) provider generations are
    left alone; the consumer's own generation is compare-and-set.
    """
    consumer = consumers.lock_many(conn, [consumer_uuid]).get(consumer_uuid)
    if consumer is None:
        raise NoAllocations(consumer_uuid)
    result = conn.execute(t.allocations.delete()
                          .where(t.allocations.c.consumer_id == consumer_uuid))
    if result.rowcount == 0:
        raise NoAllocations(consumer_uuid)
    consumers.delete(conn, consumer)


# --- writing -----------------------------------------------------------------

@dataclass(frozen=True)
class _OldRow:
    consumer_id: str
    resource_provider_id: int
    resource_class_id: int
    used: int


@dataclass(frozen=True)
class _Locked:
    id: int
    uuid: str
    generation: int


# The claim's statements, built once (expanding parameters for the lists):
# building and keying a statement costs more than its compiled-cache lookup.
_A = t.allocations
_RP = t.resource_providers
_OLD_COLUMNS = (_A.c.consumer_id, _A.c.resource_provider_id, _A.c.resource_class_id, _A.c.used)
_CONSUMERS: sa.BindParameter[str] = sa.bindparam("consumers", expanding=True)
_DELETE_OLD = _A.delete().where(_A.c.consumer_id.in_(_CONSUMERS))
_DELETE_OLD_RETURNING = _DELETE_OLD.returning(*_OLD_COLUMNS)
_SELECT_OLD = sa.select(*_OLD_COLUMNS).where(_A.c.consumer_id.in_(_CONSUMERS))
# Finding and locking the providers a claim names (by uuid) or its consumers
# held (by id): row locks taken in id order whatever the database knows, each
# provider one probe of a unique index.
#
# On a freshly loaded table without statistics PostgreSQL believes the
# table small, and for a list of some 30 values it prefers reading the whole
# table to that many index probes; MariaDB, trusting the empty table's
# statistics, walks the primary key for "uuid IN (...) ORDER BY id", and
# "uuid IN (...) OR id IN (...)" too (tests/test_plans_without_statistics.py).
# So on PostgreSQL the lists are arrays the planner cannot look into
# (``ARRAY(SELECT unnest(:list))`` is computed once before the statement
# runs, and the plan is made for some values, each an index probe); the
# LockRows step above the sort takes the locks in id order. Elsewhere each
# uuid is its own scalar subquery on the unique index among the ids, and the
# lock a range of the primary key, read in id order.
_BY_UUID = t.resource_providers.alias("by_uuid")
_PG_NAMES = postgresql.ARRAY(sa.String)
_PG_IDS = postgresql.ARRAY(sa.Integer)


def _opaque_array(name: str, array_type: postgresql.ARRAY[Any]) -> sa.ColumnElement[Any]:
    return sa.func.array(sa.select(sa.func.unnest(sa.bindparam(name, type_=array_type)))
                         .scalar_subquery())


_PG_LOCK = (sa.select(_RP.c.id, _RP.c.uuid, _RP.c.generation)
            .where(sa.or_(_RP.c.uuid == sa.any_(_opaque_array("named", _PG_NAMES)),
                          _RP.c.id == sa.any_(_opaque_array("held", _PG_IDS))))
            .order_by(_RP.c.id).with_for_update())
_PG_BUMP = (_RP.update().where(_RP.c.id == sa.any_(_opaque_array("ids", _PG_IDS)))
            .values(generation=_RP.c.generation + 1, updated_at=sa.bindparam("now")))
_BUMP = (_RP.update().where(_RP.c.id.in_(sa.bindparam("ids", expanding=True)))
         .values(generation=_RP.c.generation + 1, updated_at=sa.bindparam("now")))
# The locking statement per (uuids named, ids held) elsewhere, built once
# for the counts claims use; beyond _MAX_LOCKS shapes one is built per call.
_LOCKS: dict[tuple[int, int], sa.Select] = {}
_MAX_LOCKS = 256


def _lock_statement(named: int, held: int) -> sa.Select:
    statement = _LOCKS.get((named, held))
    if statement is None:
        ids = [*(sa.select(_BY_UUID.c.id).where(_BY_UUID.c.uuid == sa.bindparam(f"named_{n}"))
                 .scalar_subquery() for n in range(named)),
               *(sa.bindparam(f"held_{n}") for n in range(held))]
        statement = (sa.select(_RP.c.id, _RP.c.uuid, _RP.c.generation)
                     .where(_RP.c.id.in_(ids)).order_by(_RP.c.id).with_for_update())
        if len(_LOCKS) < _MAX_LOCKS:
            _LOCKS[(named, held)] = statement
    return statement


_INVENTORY = t.inventories.alias("inventory")
_INVENTORIES_WITH_USAGE = (
    sa.select(_INVENTORY.c.resource_provider_id, _INVENTORY.c.resource_class_id,
              t.resource_classes.c.name.label("resource_class"), _INVENTORY.c.total,
              _INVENTORY.c.reserved, _INVENTORY.c.min_unit, _INVENTORY.c.max_unit,
              _INVENTORY.c.step_size, _INVENTORY.c.allocation_ratio,
              capacity.usage(_INVENTORY).label("used"))
    .select_from(_INVENTORY.join(t.resource_classes,
                                 t.resource_classes.c.id == _INVENTORY.c.resource_class_id))
    .where(_INVENTORY.c.resource_provider_id.in_(sa.bindparam("providers", expanding=True)),
           t.resource_classes.c.name.in_(sa.bindparam("classes", expanding=True))))


def _delete_old(conn: sa.Connection, uuids: list[str]) -> list[_OldRow]:
    """Delete what the consumers hold now, returning it: one statement where
    the database can return deleted rows (PostgreSQL, MariaDB, SQLite)."""
    if conn.dialect.delete_returning:
        rows = conn.execute(_DELETE_OLD_RETURNING, {"consumers": uuids}).all()
    else:
        rows = conn.execute(_SELECT_OLD, {"consumers": uuids}).all()
        conn.execute(_DELETE_OLD, {"consumers": uuids})
    return [_OldRow(row.consumer_id, row.resource_provider_id, row.resource_class_id,
                    int(row.used)) for row in rows]


def _lock_providers(conn: sa.Connection, named: list[str],
                    held_ids: set[int]) -> dict[int, _Locked]:
    """Find and row-lock (in id order) the providers named by uuid and those
    the consumers held allocations on, taking their generations as of the lock.

    On PostgreSQL and MySQL this makes concurrent claims on a provider queue
    up instead of failing their compare-and-set; usage read after this
    point cannot change under us until we commit.
    """
    if not named and not held_ids:
        return {}
    held = sorted(held_ids)
    if conn.dialect.name == "postgresql":
        rows = conn.execute(_PG_LOCK, {"named": named, "held": held}).all()
    else:
        rows = conn.execute(_lock_statement(len(named), len(held)), {
            **{f"named_{n}": uuid for n, uuid in enumerate(named)},
            **{f"held_{n}": id_ for n, id_ in enumerate(held)}}).all()
    locked = {row.id: _Locked(row.id, row.uuid, row.generation) for row in rows}
    found = {p.uuid for p in locked.values()}
    for rp_uuid in named:
        if rp_uuid not in found:
            raise UnknownProvider(rp_uuid)
    return locked


def _bump_generations(conn: sa.Connection, locked: dict[int, _Locked],
                      changed: set[int]) -> None:
    """One higher, every changed provider's generation, in one statement.

    The rows are locked (SQLite: the write lock is ours), so the generations
    read under the lock are still theirs; a row count short of ``changed``
    means one was deleted meanwhile by a writer that took no lock.
    """
    if not changed:
        return
    ids = sorted(changed)
    bump = _PG_BUMP if conn.dialect.name == "postgresql" else _BUMP
    result = conn.execute(bump, {"ids": ids, "now": utcnow()})
    if result.rowcount != len(ids):
        raise Race(f"provider {', '.join(locked[i].uuid for i in ids)} changed")


def write(conn: sa.Connection, claims: list[Claim]) -> None:
    """Replace the allocations of every consumer in ``claims``: one attempt, on ``conn``.

    The caller runs it with ``retry.run_write`` (a ``Race`` means: again, in a
    new transaction).
    """
    uuids = [c.consumer_uuid for c in claims]
    existing = consumers.lock_many(conn, uuids)
    for c in claims:
        if c.check_generation:
            consumers.check_generation(c.consumer_uuid, existing.get(c.consumer_uuid),
                                       c.generation)
    # The old rows go first: the usage read below is then what everybody
    # else holds, and what the consumers held comes back with the delete.
    old_rows = _delete_old(conn, uuids) if uuids else []

    # Providers are locked (and their generations taken) before usage is
    # read: the usage checked below is the usage we commit against.
    named = list(dict.fromkeys(rp for c in claims for rp in c.allocations))
    locked = _lock_providers(conn, named, {row.resource_provider_id for row in old_rows})
    by_uuid = {p.uuid: p for p in locked.values()}

    old_ours: dict[tuple[int, int], int] = defaultdict(int)
    for row in old_rows:
        old_ours[(row.resource_provider_id, row.resource_class_id)] += row.used
    rc_ids = _check_capacity(conn, claims, by_uuid, old_ours)
    # New consumers before their allocations: the history triggers (migration
    # 0005) record each new row with its consumer's project, user and type.
    owners = _create_consumers(conn, claims, existing)

    now = utcnow()
    # Ordered by provider and class: the capacity guard (migration 0004) then
    # sums each (provider, class) once on MySQL too.
    new_rows = sorted((
        {"resource_provider_id": by_uuid[rp_uuid].id, "resource_class_id": rc_ids[rc],
         "consumer_id": c.consumer_uuid, "used": amount, "created_at": now}
        for c in claims for rp_uuid, resources in c.allocations.items()
        for rc, amount in resources.items()),
        key=lambda row: (row["resource_provider_id"], row["resource_class_id"]))
    if new_rows:
        _insert(conn, new_rows, by_uuid, rc_ids)

    # Which generations change, as upstream: the providers in the new
    # allocations, and those of a consumer whose allocations are emptied
    # (upstream writes its old ones as zero amounts); not those a consumer
    # leaves for others (a migration's destination on revert) nor, on
    # DELETE, any. All are locked all the same.
    emptied = {c.consumer_uuid for c in claims if not any(c.allocations.values())}
    changed = {by_uuid[rp_uuid].id for c in claims
               for rp_uuid, resources in c.allocations.items() if resources}
    changed |= {row.resource_provider_id for row in old_rows if row.consumer_id in emptied}
    _bump_generations(conn, locked, changed)
    # Existing consumers after the insert: on MySQL the capacity guard credits
    # what a consumer's delete gave back only while its generation is unchanged.
    _save_existing_consumers(conn, claims, existing, owners)


def _insert(conn: sa.Connection, new_rows: list[dict[str, Any]],
            by_uuid: dict[str, _Locked], rc_ids: dict[str, int]) -> None:
    """The new allocation rows, as multi-row INSERTs.

    With RETURNING, SQLAlchemy sends the rows as multi-row INSERTs of up to
    1,000 rows ("insertmanyvalues"); without it psycopg's executemany sends
    one statement per row, and the guard's statement-level triggers
    (migration 0004) would run once per row.
    """
    a = t.allocations
    try:
        conn.execute(a.insert().returning(a.c.id), new_rows).all()
    except sa.exc.DBAPIError as exc:
        # The database's own capacity guard (migration 0002) refuses a row
        # that takes a provider over capacity, for every writer sharing the
        # database. Our check runs under the provider lock, so it fires for
        # us only when another writer (upstream Placement) committed between;
        # the answer is the same 409.
        refused = meaning(exc)
        if not isinstance(refused, CapacityGuardRefusal):
            raise
        rp_uuid = next(p.uuid for p in by_uuid.values() if p.id == refused.provider_id)
        rc = next(name for name, rc_id in rc_ids.items() if rc_id == refused.class_id)
        raise AllocationOverCapacity(rc, rp_uuid) from exc


def _create_consumers(conn: sa.Connection, claims: list[Claim],
                      existing: dict[str, consumers.Version]) -> consumers.Owners:
    """The owners' ids (inserting new projects, users, types), and the consumers
    that do not exist yet, created."""
    holding = [c for c in claims if any(c.allocations.values())]
    owners = consumers.ensure_owners(
        conn, {c.project_id for c in holding}, {c.user_id for c in holding},
        {c.consumer_type for c in holding if c.consumer_type})
    consumers.create_many(conn, [
        consumers.New(c.consumer_uuid, owners.projects[c.project_id], owners.users[c.user_id],
                      owners.types[c.consumer_type] if c.consumer_type else None)
        for c in sorted(holding, key=lambda c: c.consumer_uuid)
        if c.consumer_uuid not in existing])
    return owners


def _save_existing_consumers(conn: sa.Connection, claims: list[Claim],
                             existing: dict[str, consumers.Version],
                             owners: consumers.Owners) -> None:
    """Update (compare-and-set) each existing consumer, or delete one left empty."""
    for c in sorted(claims, key=lambda c: c.consumer_uuid):
        consumer = existing.get(c.consumer_uuid)
        if consumer is None:
            continue
        if not any(c.allocations.values()):
            consumers.delete(conn, consumer)
            continue
        type_id = owners.types[c.consumer_type] if c.consumer_type else None
        consumers.update(conn, consumer, owners.projects[c.project_id],
                         owners.users[c.user_id], type_id,
                         set_type=c.consumer_type is not None)


def _check_capacity(conn: sa.Connection, claims: list[Claim], by_uuid: dict[str, _Locked],
                    old_ours: dict[tuple[int, int], int]) -> dict[str, int]:
    """Refuse amounts that break an inventory's rules or its capacity; the
    ids of the classes asked for.

    ``old_ours`` is what the consumers held before (already deleted): the
    usage read here is everybody else's.
    """
    class_order = list(dict.fromkeys(
        rc for c in claims for resources in c.allocations.values() for rc in resources))
    if not class_order:
        return {}
    provider_ids = sorted({by_uuid[rp].id for c in claims for rp in c.allocations})
    rows = conn.execute(_INVENTORIES_WITH_USAGE,
                        {"providers": provider_ids, "classes": class_order}).all()
    inventories = {(row.resource_provider_id, row.resource_class_id): row for row in rows}
    usage = {key: int(row.used) for key, row in inventories.items()}
    rc_ids = {row.resource_class: row.resource_class_id for row in rows}
    if len(rc_ids) < len(class_order):
        # Classes no provider here has inventory of: do they exist at all?
        rc_ids.update(class_ids(conn, [n for n in class_order if n not in rc_ids]))
        for name in class_order:
            if name not in rc_ids:
                raise UnknownResourceClass(name)

    # A provider with no inventory at all of the requested classes.
    with_inventory = {provider_id for provider_id, _ in inventories}
    named = list(dict.fromkeys(rp for c in claims for rp, res in c.allocations.items() if res))
    missing = [rp for rp in named if by_uuid[rp].id not in with_inventory]
    if missing:
        raise AllocationWithoutInventory(class_order, missing)

    wanted: dict[tuple[int, int], int] = defaultdict(int)
    for c in claims:
        for rp_uuid, resources in c.allocations.items():
            provider_id = by_uuid[rp_uuid].id
            for rc, amount in resources.items():
                key = (provider_id, rc_ids[rc])
                inventory = inventories.get(key)
                if inventory is None:
                    raise AllocationWithoutInventory([rc], [rp_uuid])
                others = usage.get(key, 0)
                before = others + old_ours.get(key, 0)
                # Allocated besides this amount: this request's earlier amounts
                # replace what its consumers held.
                used = others + wanted[key]
                limit = capacity.capacity(inventory.total, inventory.reserved,
                                          inventory.allocation_ratio)
                if not capacity.fits(amount, used, limit, inventory.min_unit,
                                     inventory.max_unit, inventory.step_size):
                    if not capacity.amount_allowed(amount, inventory.min_unit,
                                                   inventory.max_unit, inventory.step_size):
                        raise AllocationBreaksConstraints(rc, rp_uuid)
                    # Over capacity is tolerated only when it is no worse than before.
                    if used + amount > before:
                        raise AllocationOverCapacity(rc, rp_uuid)
                wanted[key] += amount
    return rc_ids
