"""The "fits" rule's two forms agree: ``capacity.fits`` in Python and
``capacity.room_for`` in SQL (and so do ``exceeds`` and ``exceeded``), on every
backend, over a grid of inventories (zero and negative capacity, usage over
capacity, ratios below and above 1, unit rules) and amounts."""

from __future__ import annotations

import itertools
import uuid as uuidlib

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import capacity
from allotment.ledger.common import STANDARD_CLASS_IDS

TOTALS = (0, 5, 10)
RESERVED = (0, 2, 10)          # reserved > total: a negative capacity
RATIOS = (0.5, 1.0, 1.5)       # 5 * 0.5 and 5 * 1.5 are not whole numbers
MIN_UNITS = (1, 2)
MAX_UNITS = (3, 10)
STEP_SIZES = (1, 3)
USED = (0, 4, 12)              # 12 is over every capacity of the grid
AMOUNTS = (1, 2, 3, 4, 6, 9, 16)

GRID = list(itertools.product(TOTALS, RESERVED, RATIOS, MIN_UNITS, MAX_UNITS, STEP_SIZES,
                              USED))


def _store_grid(engine: sa.Engine) -> None:
    """One provider per grid point, with one VCPU record and its usage."""
    vcpu = STANDARD_CLASS_IDS["VCPU"]
    providers, records, allocations = [], [], []
    for ident, (total, reserved, ratio, min_unit, max_unit, step, used) in enumerate(GRID, 1):
        providers.append({"id": ident, "uuid": str(uuidlib.UUID(int=ident)), "name": f"p{ident}",
                          "generation": 0, "root_provider_id": ident})
        records.append({"resource_provider_id": ident, "resource_class_id": vcpu,
                        "total": total, "reserved": reserved, "min_unit": min_unit,
                        "max_unit": max_unit, "step_size": step, "allocation_ratio": ratio})
        if used:
            allocations.append({"resource_provider_id": ident, "resource_class_id": vcpu,
                                "consumer_id": str(uuidlib.UUID(int=ident)), "used": used})
    with engine.begin() as conn:
        conn.execute(t.resource_providers.insert(), providers)
        # Usage first: the capacity guard lets rows without an inventory record be, so
        # usage over capacity can be stored as another writer might have left it.
        conn.execute(t.allocations.insert(), allocations)
        conn.execute(t.inventories.insert(), records)


def _sql_fitting(conn: sa.Connection, amount: int, bound: bool) -> set[int]:
    inventory = t.inventories.alias("inventory")
    given = capacity.amount_param("amount") if bound else amount
    rows = conn.execute(sa.select(inventory.c.resource_provider_id)
                        .where(*capacity.room_for(inventory, given)),
                        {"amount": capacity.requestable(amount)} if bound else {})
    return {row[0] for row in rows}


def test_python_and_sql_agree_on_what_fits(database):
    _store_grid(database.engine)
    with database.engine.connect() as conn:
        for amount in AMOUNTS:
            expected = {ident for ident, (total, reserved, ratio, min_unit, max_unit, step, used)
                        in enumerate(GRID, 1)
                        if capacity.fits(amount, used, capacity.capacity(total, reserved, ratio),
                                         min_unit, max_unit, step)}
            assert _sql_fitting(conn, amount, bound=True) == expected, amount
            assert _sql_fitting(conn, amount, bound=False) == expected, amount
    # The grid is not trivial: some points fit and some do not.
    fitting = {capacity.fits(a, u, capacity.capacity(tt, r, q), lo, hi, s)
               for a in AMOUNTS for tt, r, q, lo, hi, s, u in GRID}
    assert fitting == {True, False}


def test_the_read_model_record_follows_the_rule():
    for total, reserved, ratio, min_unit, max_unit, step, used in GRID:
        record = capacity.with_usage(total, reserved, min_unit, max_unit, step, ratio, used)
        most = capacity.capacity(total, reserved, ratio)
        assert record.capacity == most
        assert record.free == most - used
        assert record.room == min(most - used, max_unit)
        for amount in AMOUNTS:
            assert record.fits(amount) == capacity.fits(amount, used, most, min_unit,
                                                        max_unit, step)


def test_python_and_sql_agree_on_what_is_over_capacity(database):
    """``exceeded`` (the audit's SQL) and ``exceeds`` pick the same records."""
    _store_grid(database.engine)
    inventory = t.inventories.alias("inventory")
    with database.engine.connect() as conn:
        found = set(conn.execute(sa.select(inventory.c.resource_provider_id)
                                 .where(capacity.exceeded(inventory))).scalars())
    expected = {ident for ident, (total, reserved, ratio, _lo, _hi, _step, used)
                in enumerate(GRID, 1)
                if capacity.exceeds(used, capacity.capacity(total, reserved, ratio))}
    assert found == expected
    # Some records are over (12 used, negative capacities), some are not (nothing used).
    assert expected and len(expected) < len(GRID)


def test_how_many_is_fits_one_after_another():
    """``how_many`` counts what ``fits`` takes when allocations of one amount are
    made one after another, each on top of the ones before (``plus``)."""
    counted = set()
    for total, reserved, ratio, min_unit, max_unit, step, used in GRID:
        record = capacity.with_usage(total, reserved, min_unit, max_unit, step, ratio, used)
        for amount in AMOUNTS:
            placed, now = 0, record
            while now.fits(amount):
                placed, now = placed + 1, now.plus(amount)
            assert record.how_many(amount) == placed, (record, amount)
            assert now.used == used + placed * amount
            counted.add(placed)
    assert {0, 1} < counted and max(counted) > 5


def test_how_many_each_is_how_many_record_by_record():
    records = [capacity.with_usage(total, reserved, min_unit, max_unit, step, ratio, used)
               for total, reserved, ratio, min_unit, max_unit, step, used in GRID]
    for amount in AMOUNTS:
        assert capacity.how_many_each(amount, records) == [
            record.how_many(amount) for record in records], amount
