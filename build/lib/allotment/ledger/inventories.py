"""Inventories: a provider's capacity per resource class, and the rules on it.

Upstream's rules, kept here:
- the capacity ``int((total - reserved) * allocation_ratio)`` must be positive
  (from 1.26 it may be zero: reserved == total);
- an inventory with allocations against it cannot be deleted (409
  ``placement.inventory.inuse``), but it may shrink below its usage: that
  only logs a warning, the allocations stay;
- every change bumps the provider generation. The writes a handler calls
  (``create``, ``replace_all``, ``update``, ``delete``) check the client's
  generation and bump it; ``replace_inventories`` leaves both to its caller
  so that the reshaper can change several things under one bump.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import capacity, providers
from allotment.ledger.common import class_ids, class_names, utcnow
from allotment.ledger.errors import (
    CapacityOutOfRange,
    InvalidCapacity,
    InventoryExists,
    InventoryInUse,
    InventoryNotFound,
    ResourceClassNotFound,
    UnknownResourceClass,
)
from allotment.ledger.providers import Provider

MAX_INT = capacity.MAX_INT

LOG = logging.getLogger(__name__)

# What a record gets for the fields a client leaves out.
DEFAULTS: dict[str, Any] = {
    "reserved": 0,
    "min_unit": 1,
    "max_unit": MAX_INT,
    "step_size": 1,
    "allocation_ratio": 1.0,
}
FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


@dataclass(frozen=True)
class Inventory:
    resource_class: str
    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float
    created_at: datetime.datetime | None = None
    updated_at: datetime.datetime | None = None

    @property
    def capacity(self) -> int:
        return capacity.capacity(self.total, self.reserved, self.allocation_ratio)

    def fields(self) -> dict[str, Any]:
        """The six values the API shows."""
        return {name: getattr(self, name) for name in FIELDS}


def from_request(resource_class: str, data: Any) -> Inventory:
    """A record from (validated) request data, defaults filled in.

    Unknown keys (a ``resource_provider_generation`` inside a record) are
    ignored, as upstream ignores them. A record under a key that is no class
    name is not validated and may lack its total: it is refused as an unknown
    class later.
    """
    given = data if isinstance(data, dict) else {}
    values = {**DEFAULTS, "total": None, **{k: v for k, v in given.items() if k in FIELDS}}
    return Inventory(resource_class=resource_class, **values)


def check_capacity(provider_uuid: str, inventories: list[Inventory],
                   reserved_may_equal_total: bool) -> None:
    """Refuse records whose capacity is negative (or zero, before 1.26), or
    larger than ``capacity.MAX_CAPACITY``."""
    for inv in inventories:
        if not isinstance(inv.total, int):
            continue  # A record under a non-class key: refused as an unknown class.
        if not capacity.fits_in_range(inv.total, inv.reserved, inv.allocation_ratio):
            raise CapacityOutOfRange(provider_uuid, inv.resource_class,
                                     (inv.total - inv.reserved) * inv.allocation_ratio,
                                     capacity.MAX_CAPACITY)
        if inv.capacity < 0 or (inv.capacity == 0 and not reserved_may_equal_total):
            raise InvalidCapacity(provider_uuid, inv.resource_class, reserved_may_equal_total)


def _require_class_ids(conn: sa.Connection, names: list[str]) -> dict[str, int]:
    """Class ids for ``names``; ``UnknownResourceClass`` for a name that does not exist."""
    ids = class_ids(conn, names)
    for name in names:
        if name not in ids:
            raise UnknownResourceClass(name)
    return ids


def _addressed_class_id(conn: sa.Connection, name: str) -> int:
    """The id of the class an inventory URL names; ``ResourceClassNotFound`` otherwise."""
    ids = class_ids(conn, [name])
    if name not in ids:
        raise ResourceClassNotFound(name)
    return ids[name]


def get_inventories(conn: sa.Connection, provider_id: int) -> list[Inventory]:
    """The provider's inventory records, in resource class id order."""
    inv = t.inventories
    rows = conn.execute(
        sa.select(inv.c.resource_class_id, *(inv.c[name] for name in FIELDS),
                  inv.c.created_at, inv.c.updated_at)
        .where(inv.c.resource_provider_id == provider_id)
        .order_by(inv.c.resource_class_id)).all()
    names = class_names(conn, {row.resource_class_id for row in rows})
    return [Inventory(resource_class=names[row.resource_class_id],
                      **{name: row._mapping[name] for name in FIELDS[:-1]},
                      allocation_ratio=capacity.shown_ratio(row.allocation_ratio),
                      created_at=row.created_at, updated_at=row.updated_at)
            for row in rows]


def _refuse_in_use(conn: sa.Connection, provider: Provider, class_id_list: list[int]) -> None:
    """409 when any of these classes has allocations on the provider."""
    if not class_id_list:
        return
    alloc = t.allocations
    rows = conn.execute(
        sa.select(alloc.c.resource_class_id)
        .where(alloc.c.resource_provider_id == provider.id,
               alloc.c.resource_class_id.in_(class_id_list))
        .group_by(alloc.c.resource_class_id)
        .order_by(alloc.c.resource_class_id)).all()
    if rows:
        names = class_names(conn, [row.resource_class_id for row in rows])
        raise InventoryInUse([names[row.resource_class_id] for row in rows], provider.uuid)


def _warn_over_capacity(conn: sa.Connection, provider: Provider,
                        records: dict[int, Inventory]) -> None:
    """Upstream allows shrinking below usage; it only says so in the log."""
    alloc = t.allocations
    rows = conn.execute(
        sa.select(alloc.c.resource_class_id, sa.func.sum(alloc.c.used).label("used"))
        .where(alloc.c.resource_provider_id == provider.id,
               alloc.c.resource_class_id.in_(list(records)))
        .group_by(alloc.c.resource_class_id)).all()
    for row in rows:
        inv = records[row.resource_class_id]
        if row.used > inv.capacity:
            LOG.warning("Resource provider %s is now over-capacity for %s",
                        provider.uuid, inv.resource_class)


def _values(inv: Inventory) -> dict[str, Any]:
    return {name: getattr(inv, name) for name in FIELDS}


# --- the writes handlers call: check, write, bump -----------------------------

def create(conn: sa.Connection, provider_uuid: str, inv: Inventory,
           reserved_may_equal_total: bool) -> int:
    """Add one record to a provider; the provider's new generation."""
    provider = providers.require(conn, provider_uuid)
    check_capacity(provider.uuid, [inv], reserved_may_equal_total)
    add_inventory(conn, provider, inv)
    return providers.bump_generation(conn, provider)


def replace_all(conn: sa.Connection, provider_uuid: str, generation: int | None,
                records: list[Inventory], reserved_may_equal_total: bool) -> int:
    """Make ``records`` the provider's whole inventory; its new generation.

    ``generation`` None (DELETE of all inventories) checks none.
    """
    provider = providers.require(conn, provider_uuid)
    if generation is not None:
        providers.check_generation(provider, generation)
    check_capacity(provider.uuid, records, reserved_may_equal_total)
    replace_inventories(conn, provider, {inv.resource_class: inv.fields() for inv in records})
    return providers.bump_generation(conn, provider)


def update(conn: sa.Connection, provider_uuid: str, generation: int, inv: Inventory,
           reserved_may_equal_total: bool) -> int:
    """Change one existing record; the provider's new generation."""
    provider = providers.require(conn, provider_uuid)
    providers.check_generation(provider, generation)
    check_capacity(provider.uuid, [inv], reserved_may_equal_total)
    update_inventory(conn, provider, inv)
    return providers.bump_generation(conn, provider)


def delete(conn: sa.Connection, provider_uuid: str, resource_class: str) -> None:
    """Delete one record (``InventoryInUse`` while allocated)."""
    provider = providers.require(conn, provider_uuid)
    delete_inventory(conn, provider, resource_class)
    providers.bump_generation(conn, provider)


# --- steps ------------------------------------------------------------------------


def replace_inventories(conn: sa.Connection, provider: Provider,
                        inventories: dict[str, dict]) -> None:
    """Make ``inventories`` (class name -> fields) the provider's whole inventory.

    Classes left out are deleted (``InventoryInUse`` when they have
    allocations); unknown classes are refused (``UnknownResourceClass``).
    Capacity rules are the caller's (``check_capacity``), and so is the
    generation bump. A class added meanwhile by a concurrent writer is a
    duplicate key: a lost race, run again by the retry loop.
    """
    wanted = [from_request(name, data) for name, data in inventories.items()]
    ids = _require_class_ids(conn, [inv.resource_class for inv in wanted])
    by_id = {ids[inv.resource_class]: inv for inv in wanted}
    inv_table = t.inventories
    existing = {row.resource_class_id for row in conn.execute(
        sa.select(inv_table.c.resource_class_id)
        .where(inv_table.c.resource_provider_id == provider.id))}
    to_delete = sorted(existing - set(by_id))
    _refuse_in_use(conn, provider, to_delete)
    if to_delete:
        conn.execute(inv_table.delete().where(
            inv_table.c.resource_provider_id == provider.id,
            inv_table.c.resource_class_id.in_(to_delete)))
    now = utcnow()
    to_add = [class_id for class_id in by_id if class_id not in existing]
    if to_add:
        conn.execute(inv_table.insert(), [
            {"resource_provider_id": provider.id, "resource_class_id": class_id,
             "created_at": now, **_values(by_id[class_id])}
            for class_id in to_add])
    to_update = {class_id: inv for class_id, inv in by_id.items() if class_id in existing}
    for class_id, inv in to_update.items():
        conn.execute(inv_table.update()
                     .where(inv_table.c.resource_provider_id == provider.id,
                            inv_table.c.resource_class_id == class_id)
                     .values(updated_at=now, **_values(inv)))
    if to_update:
        _warn_over_capacity(conn, provider, to_update)


def add_inventory(conn: sa.Connection, provider: Provider, inv: Inventory) -> None:
    """Insert one record; ``InventoryExists`` when the provider already has that class.

    (Added meanwhile by a concurrent writer: a duplicate key, so a lost race
    whose next attempt finds the record.)
    """
    class_id = _require_class_ids(conn, [inv.resource_class])[inv.resource_class]
    inv_table = t.inventories
    exists = conn.execute(sa.select(inv_table.c.id).where(
        inv_table.c.resource_provider_id == provider.id,
        inv_table.c.resource_class_id == class_id)).first()
    if exists:
        raise InventoryExists(inv.resource_class, provider.uuid)
    conn.execute(inv_table.insert().values(
        resource_provider_id=provider.id, resource_class_id=class_id,
        created_at=utcnow(), **_values(inv)))


def update_inventory(conn: sa.Connection, provider: Provider, inv: Inventory) -> None:
    """Change one existing record (``InventoryNotFound`` when there is none)."""
    class_id = _addressed_class_id(conn, inv.resource_class)
    inv_table = t.inventories
    result = conn.execute(inv_table.update()
                          .where(inv_table.c.resource_provider_id == provider.id,
                                 inv_table.c.resource_class_id == class_id)
                          .values(updated_at=utcnow(), **_values(inv)))
    if result.rowcount != 1:
        raise InventoryNotFound(provider.uuid, inv.resource_class)
    _warn_over_capacity(conn, provider, {class_id: inv})


def delete_inventory(conn: sa.Connection, provider: Provider, resource_class: str) -> None:
    """Delete one record (``InventoryNotFound`` when there is none)."""
    class_id = _addressed_class_id(conn, resource_class)
    _refuse_in_use(conn, provider, [class_id])
    inv_table = t.inventories
    result = conn.execute(inv_table.delete().where(
        inv_table.c.resource_provider_id == provider.id,
        inv_table.c.resource_class_id == class_id))
    if result.rowcount != 1:
        raise InventoryNotFound(provider.uuid, resource_class)
