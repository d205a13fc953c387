"""The capacity rule, once: how much of an inventory can still be allocated.

An inventory record of a class on a provider can hold at most
``(total - reserved) * allocation_ratio`` (truncated to a whole number, as
the API shows it), and one allocation from it must lie within
``min_unit..max_unit`` and be a multiple of ``step_size``.

The rule is here twice, in the two languages that need it, side by side:
``fits`` (from ``capacity`` and ``amount_allowed``) and ``room`` in Python (the
claim check, the read model, explain, the summaries; ``how_many``, what
``fits`` takes one after another, for headroom, and ``how_many_each``, the
same over many records at once) and ``usage``/``room_for``
as SQL expressions (the candidate filter and the provider list's
``resources`` filter); likewise ``exceeds`` and ``exceeded``, a record holding
more than its capacity (the audit). ``InventoryWithUsage`` is the record the Python side
reads them from. They agree by construction on every amount the API accepts
(``tests/test_capacity_rule.py`` checks a grid on every backend): for a
whole number ``n``, ``n <= int(c)`` exactly when ``n <= c`` for ``c >= 0``,
and for ``c < 0`` both are false for every ``n >= 0``; the SQL therefore
compares with the untruncated product, which every backend computes in
double precision as Python does.

Every derived quantity must stay in range on all three databases and in the
JSON we write (64-bit integers), so a capacity is bounded by ``MAX_CAPACITY``
(2**53 - 1, the largest whole number a double holds exactly, so the SQL's
double-precision comparison and Python's agree). A write that would make a
larger one is refused (``fits_in_range``); a larger one written behind our
back (upstream accepts ratios up to 3.4e38, and NaN on PostgreSQL) is read
as the bound, or as nothing for NaN, so that no stored value breaks a read.
An amount asked for above the bound fits nowhere (``requestable``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from allotment.db import tables as t

# The largest integer upstream's integer columns hold (a signed 32-bit integer):
# totals, reserved, units, and one allocation's amount.
MAX_INT = 2**31 - 1
# The largest capacity an inventory may have (see the module's docstring).
MAX_CAPACITY = 2**53 - 1
# Sums of capacities (cloud-wide totals) saturate here: a signed 64-bit integer,
# the most a JSON writer (orjson) or a database integer holds.
MAX_TOTAL = 2**63 - 1
# The largest allocation_ratio upstream's schema takes (a single-precision float).
MAX_RATIO = 3.40282e+38


def capacity(total: int, reserved: int, allocation_ratio: float) -> int:
    """The most that can be allocated from an inventory record in all."""
    product = (total - reserved) * allocation_ratio
    if -MAX_CAPACITY <= product <= MAX_CAPACITY:
        return int(product)
    if product != product:  # NaN, stored by another writer
        return 0
    return MAX_CAPACITY if product > 0 else -MAX_CAPACITY


def shown_ratio(allocation_ratio: float) -> float:
    """A stored ratio as the API shows it: JSON has no NaN or infinity, so one
    stored behind our back is shown as 0.0 (NaN: nothing fits, as ``capacity``
    reads it) or as the largest ratio a client may write."""
    if -MAX_RATIO <= allocation_ratio <= MAX_RATIO:
        return float(allocation_ratio)
    if allocation_ratio != allocation_ratio:
        return 0.0
    return MAX_RATIO if allocation_ratio > 0 else -MAX_RATIO


def fits_in_range(total: int, reserved: int, allocation_ratio: float) -> bool:
    """A record with these values has a capacity within ``MAX_CAPACITY``."""
    return abs((total - reserved) * allocation_ratio) <= MAX_CAPACITY


def amount_param(name: str) -> sa.BindParameter[int]:
    """A bound parameter for an amount a query compares (``requestable`` values
    pass 32 bits: PostgreSQL must not take it for an ``integer``)."""
    return sa.bindparam(name, type_=sa.BigInteger)


def requestable(amount: int) -> int:
    """``amount`` as a query may compare it: above every capacity, it is kept
    at ``MAX_CAPACITY + 1`` (which fits nowhere and every backend binds)."""
    return min(amount, MAX_CAPACITY + 1)


def amount_allowed(amount: int, min_unit: int, max_unit: int, step_size: int) -> bool:
    """One allocation of ``amount`` respects the record's unit rules."""
    return min_unit <= amount <= max_unit and amount % step_size == 0


def fits(amount: int, used: int, capacity: int, min_unit: int, max_unit: int,
         step_size: int) -> bool:
    """One more allocation of ``amount`` fits: the unit rules, and room for it
    on top of ``used`` within ``capacity`` (of ``capacity()``). ``room_for``
    in SQL."""
    # Room first: it is the test that fails most often in a candidates search.
    return used + amount <= capacity and amount_allowed(amount, min_unit, max_unit, step_size)


def exceeds(used: int, capacity: int) -> bool:
    """A record holds more than its capacity (of ``capacity()``): something is
    allocated, beyond what may be. ``exceeded`` in SQL."""
    return used > 0 and used > capacity


def how_many(amount: int, used: int, capacity: int, min_unit: int, max_unit: int,
             step_size: int) -> int:
    """How many allocations of ``amount``, made one after another, ``fits`` takes:
    the largest ``n`` such that ``fits(amount, used + i * amount, ...)`` holds for
    every ``i < n`` (what headroom counts on one provider).

    ``fits`` holds for the ``i``-th exactly when the unit rules hold (they do not
    depend on ``i``) and ``used + (i + 1) * amount <= capacity``: so ``n`` is
    ``(capacity - used) // amount``, or 0 when that is negative or the unit rules
    refuse the amount (``tests/test_capacity_rule.py`` checks it against ``fits``
    step by step).
    """
    if amount < 1 or not amount_allowed(amount, min_unit, max_unit, step_size):
        return 0
    return max((capacity - used) // amount, 0)


def how_many_each(amount: int, records: Iterable[InventoryWithUsage]) -> list[int]:
    """``how_many`` of ``amount`` for each record, in order: the same numbers, the
    unit rules judged again only when a record's differ from the previous one's
    (headroom's pass over every provider of a cloud, where they seldom differ;
    ``tests/test_capacity_rule.py`` checks it against ``how_many``)."""
    found: list[int] = []
    append = found.append
    low = high = step = None
    allowed = False
    for record in records:
        if record.step_size != step or record.min_unit != low or record.max_unit != high:
            low, high, step = record.min_unit, record.max_unit, record.step_size
            allowed = amount >= 1 and amount_allowed(amount, low, high, step)
        free = record.capacity - record.used
        append(free // amount if allowed and free > 0 else 0)
    return found


def room(used: int, capacity: int, max_unit: int) -> int:
    """The most one allocation may take: the free capacity, capped by
    ``max_unit`` (negative when the record is over capacity)."""
    return min(capacity - used, max_unit)


@dataclass(slots=True, frozen=True)
class InventoryWithUsage:
    """An inventory record's values with what is allocated from it.

    What the read model holds per (provider, class) and explain judges by;
    tens of thousands of them live in a worker, hence slots and no more than
    the record's own fields plus the two read with it.
    """

    total: int
    reserved: int
    min_unit: int
    max_unit: int
    step_size: int
    allocation_ratio: float
    used: int
    # capacity(total, reserved, allocation_ratio), computed once at load.
    capacity: int

    def fits(self, amount: int) -> bool:
        """One more allocation of ``amount`` fits (``fits`` above)."""
        return fits(amount, self.used, self.capacity, self.min_unit, self.max_unit,
                    self.step_size)

    def how_many(self, amount: int) -> int:
        """How many allocations of ``amount`` fit one after another (``how_many`` above)."""
        return how_many(amount, self.used, self.capacity, self.min_unit, self.max_unit,
                        self.step_size)

    def plus(self, more: int) -> InventoryWithUsage:
        """The same record once ``more`` more is allocated from it."""
        return InventoryWithUsage(self.total, self.reserved, self.min_unit, self.max_unit,
                                  self.step_size, self.allocation_ratio, self.used + more,
                                  self.capacity)

    @property
    def room(self) -> int:
        """The most one candidate may take (``room`` above)."""
        return room(self.used, self.capacity, self.max_unit)

    @property
    def free(self) -> int:
        """What is left of the capacity (negative when over it)."""
        return self.capacity - self.used


def with_usage(total: int, reserved: int, min_unit: int, max_unit: int, step_size: int,
               allocation_ratio: float, used: int) -> InventoryWithUsage:
    """The record of a stored row: its capacity by the one rule."""
    ratio = float(allocation_ratio)
    return InventoryWithUsage(total, reserved, min_unit, max_unit, step_size, ratio, int(used),
                              capacity(total, reserved, ratio))


# --- the same rule in SQL, on an alias of the inventories table ---------------

_ALLOCATED = t.allocations.alias("allocated")
# MariaDB's planner picks among indexes by its persistent statistics; those of
# a freshly loaded table (the empty table's, until InnoDB's background
# recalculation) made it read the class index, a third of all allocations,
# for one provider's usage. The hint names the index that always serves.
BY_PROVIDER_AND_CLASS = "FORCE INDEX (allocations_resource_provider_class_used_idx)"


def usage(inventory: Any) -> sa.ScalarSelect[Any]:
    """The amount allocated from an inventory row (a correlated subquery).

    ``inventory`` is an alias of ``inventories``. The subquery reads the
    allocations index on (provider, class) and is 0 when nothing is allocated.
    """
    return (sa.select(sa.func.coalesce(sa.func.sum(_ALLOCATED.c.used), 0))
            .where(_ALLOCATED.c.resource_provider_id == inventory.c.resource_provider_id,
                   _ALLOCATED.c.resource_class_id == inventory.c.resource_class_id)
            .with_hint(_ALLOCATED, BY_PROVIDER_AND_CLASS, "mysql")
            .scalar_subquery())


def _capacity(inventory: Any) -> sa.ColumnElement[Any]:
    """``(total - reserved) * allocation_ratio``, untruncated (see the module's docstring)."""
    return (inventory.c.total - inventory.c.reserved) * inventory.c.allocation_ratio


def room_for(inventory: Any, amount: Any) -> list[sa.ColumnElement[bool]]:
    """Conditions: the inventory row can take one more allocation of ``amount``.

    ``amount`` is an integer or a bound parameter (of ``amount_param``).
    """
    if isinstance(amount, int):
        amount = sa.literal(requestable(amount), sa.BigInteger)
    return [
        usage(inventory) + amount <= _capacity(inventory),
        inventory.c.min_unit <= amount,
        inventory.c.max_unit >= amount,
        amount % inventory.c.step_size == 0,
    ]


def exceeded(inventory: Any) -> sa.ColumnElement[bool]:
    """Condition: the inventory row holds more than its capacity (``exceeds``).

    For a whole ``used`` of at least 1, ``used > int(c)`` exactly when
    ``used > c``, for a negative ``c`` too (both are then true), so the
    untruncated product agrees with ``capacity()`` here as in ``room_for``.
    ``used > max(c, 0)`` is both tests with one evaluation of the usage.
    """
    most = _capacity(inventory)
    return usage(inventory) > sa.case((most > 0, most), else_=0)


# --- the whole cloud's capacity, for monitoring -------------------------------

def provider_report(conn: sa.Connection) -> list[sa.Row[Any]]:
    """Every provider: ``id, uuid, name, root_uuid, parent_uuid``, in id order."""
    rp = t.resource_providers.alias("rp")
    root = t.resource_providers.alias("root")
    parent = t.resource_providers.alias("parent")
    return list(conn.execute(
        sa.select(rp.c.id, rp.c.uuid, rp.c.name, root.c.uuid.label("root_uuid"),
                  parent.c.uuid.label("parent_uuid"))
        .select_from(rp.outerjoin(root, root.c.id == rp.c.root_provider_id)
                     .outerjoin(parent, parent.c.id == rp.c.parent_provider_id))
        .order_by(rp.c.id)))


def inventory_report(conn: sa.Connection) -> list[sa.Row[Any]]:
    """Every inventory record with its usage, in one statement.

    Rows: ``provider_id, resource_class, total, reserved, allocation_ratio,
    min_unit, max_unit, step_size, used``, by provider id and class id;
    ``used`` is ``usage`` above, the one definition of what is allocated.
    """
    inventory = t.inventories.alias("inventory")
    rc = t.resource_classes
    return list(conn.execute(
        sa.select(inventory.c.resource_provider_id.label("provider_id"),
                  rc.c.name.label("resource_class"), inventory.c.total, inventory.c.reserved,
                  inventory.c.allocation_ratio, inventory.c.min_unit, inventory.c.max_unit,
                  inventory.c.step_size, usage(inventory).label("used"))
        .select_from(inventory.join(rc, rc.c.id == inventory.c.resource_class_id))
        .order_by(inventory.c.resource_provider_id, inventory.c.resource_class_id)))
